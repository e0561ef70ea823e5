//go:build linux

package netio

// A receive buffer a metaroce.BufferSink kept (a relay passing a chunk on
// where it arrived instead of copying it out) leaves its batch, and the
// owner puts a spare in its place. Spares are the buffers the keepers gave
// back (ReturnRxBuf), up to maxSpareRx; beyond that they are made, and the
// surplus is left to the collector.
const maxSpareRx = 4096

// spareRxBuf returns a receive buffer for a batch whose own was kept.
func (o *ownerState) spareRxBuf(bufLen int) []byte {
	if n := len(o.spareRx); n > 0 {
		b := o.spareRx[n-1]
		o.spareRx[n-1] = nil
		o.spareRx = o.spareRx[:n-1]
		return b
	}
	return make([]byte, bufLen)
}

// ReturnRxBuf gives back a receive buffer that a metaroce.BufferSink kept
// (the buf of its ChunkIn) once the sink is done with it. It must be
// called on the owner goroutine, as sinks and relay release callbacks are.
// Buffers of another length are ignored.
func (e *Endpoint) ReturnRxBuf(b []byte) {
	o := &e.owner
	if cap(b) != e.rxBufLen || len(o.spareRx) >= maxSpareRx {
		return
	}
	o.spareRx = append(o.spareRx, b[:cap(b)])
}
