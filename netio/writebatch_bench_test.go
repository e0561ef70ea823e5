//go:build linux

package netio

import (
	"net/netip"
	"testing"

	"github.com/mrgw/mrgw/netio/udp"
)

// discardSocket takes every datagram and sends nothing: what is measured
// is the sender's own work per batch.
type discardSocket struct{ Socket }

func (discardSocket) WriteBatch(msgs []udp.Message) (int, error) { return len(msgs), nil }

// BenchmarkWriteBatch is a sender's work for one full batch of unsealed
// datagrams, in runs of 16 over 8 path sockets as a bulk transfer over 8
// paths fills it, without the AEAD and the system call: the per-datagram
// bookkeeping between the owner's poll and the socket.
func BenchmarkWriteBatch(b *testing.B) {
	e := &Endpoint{}
	var w txSender
	socks := make([]*sock, 8)
	for i := range socks {
		socks[i] = &sock{c: discardSocket{}}
	}
	dst := netip.MustParseAddrPort("192.0.2.1:4791")
	batch := &sendBatch{items: make([]txItem, 0, txBatch)}
	for i := range txBatch {
		batch.items = append(batch.items, txItem{buf: make([]byte, 1500), n: 1344, s: socks[(i/16)%len(socks)], dst: dst,
			path: int32((i / 16) % len(socks)), tracked: true, seq: uint64(i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		e.writeBatch(&w, batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/txBatch, "ns/datagram")
	if got := e.ctr.txDatagrams.Load(); got%txBatch != 0 || got == 0 {
		b.Fatalf("%d datagrams counted, want a multiple of %d", got, txBatch)
	}
}
