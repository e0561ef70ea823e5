package host

// dedup is the set of sequences of one incoming flow already reported to
// the application: every sequence below below, plus the few above it that
// completed early. Messages of one stream complete in order, so the set
// above the watermark is empty unless two streams of the flow (before and
// after a failover) interleave; it is bounded all the same.
type dedup struct {
	below uint64
	above map[uint64]struct{}
}

// maxAbove bounds the sequences tracked above the watermark. A source
// keeps at most its credit (and MaxFlowMessages) outstanding, far less.
const maxAbove = 1 << 16

// has reports whether seq was already reported.
func (d *dedup) has(seq uint64) bool {
	if seq < d.below {
		return true
	}
	_, ok := d.above[seq]
	return ok
}

// room reports whether seq can be recorded.
func (d *dedup) room(seq uint64) bool {
	return seq == d.below || len(d.above) < maxAbove
}

// add records seq (which must not be present and must have room) and
// moves the watermark over every contiguous sequence.
func (d *dedup) add(seq uint64) {
	switch {
	case seq < d.below:
		return
	case seq > d.below:
		if d.above == nil {
			d.above = map[uint64]struct{}{}
		}
		d.above[seq] = struct{}{}
		return
	}
	d.below++
	for len(d.above) > 0 {
		if _, ok := d.above[d.below]; !ok {
			break
		}
		delete(d.above, d.below)
		d.below++
	}
}
