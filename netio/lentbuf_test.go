//go:build linux

package netio

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/mrgw/mrgw/netio/udp"
)

// recordSocket takes every datagram, keeping a copy of each and the slice
// it was handed.
type recordSocket struct {
	Socket
	got   [][]byte
	wires [][]byte
}

func (r *recordSocket) WriteBatch(msgs []udp.Message) (int, error) {
	for _, m := range msgs {
		r.got = append(r.got, bytes.Clone(m.Buf[:m.N]))
		r.wires = append(r.wires, m.Buf[:m.N])
	}
	return len(msgs), nil
}

// TestLentDataInSenderBuffers: a DATA whose payload is lent reaches its
// sender as a header in its item, with no buffer of the owner's; the
// sender writes header and payload one behind the other into a buffer of
// its own, in order with the datagrams that came with a buffer, reuses
// its buffers from batch to batch, and sentFrom still finds the path of
// each (a send refused for its size is told to that path).
func TestLentDataInSenderBuffers(t *testing.T) {
	e := &Endpoint{}
	rec := &recordSocket{}
	s := &sock{c: rec}
	w := &txSender{bufLen: 256}
	dst := netip.MustParseAddrPort("192.0.2.1:4791")
	owned := make([]byte, 256)
	copy(owned[maxOverhead:], "reply")
	b := &sendBatch{}
	for i := range 3 {
		hdr, payload := []byte{'h', byte('0' + i)}, []byte{'p', byte('0' + i), '!'}
		it := txItem{n: len(hdr), payload: payload, s: s, dst: dst, path: int32(i), tracked: true, seq: uint64(i)}
		copy(it.hdr[:], hdr)
		b.items = append(b.items, it)
	}
	b.items = append(b.items, txItem{buf: owned, n: len("reply"), s: s, dst: dst, path: 7})

	for round := range 2 {
		rec.got, rec.wires = nil, nil
		e.writeBatch(w, b)
		want := []string{"h0p0!", "h1p1!", "h2p2!", "reply"}
		if len(rec.got) != len(want) {
			t.Fatalf("round %d: %d datagrams written, want %d", round, len(rec.got), len(want))
		}
		for i, g := range rec.got {
			if string(g) != want[i] {
				t.Errorf("round %d: datagram %d is %q, want %q", round, i, g, want[i])
			}
		}
		for i, wantPath := range []int{0, 1, 2, 7} {
			if f := sentFrom(w, b, rec.wires[i]); f.path != wantPath {
				t.Errorf("round %d: datagram %d found on path %d, want %d", round, i, f.path, wantPath)
			}
		}
		if len(w.bufs) != 3 {
			t.Fatalf("round %d: sender holds %d buffers, want 3 (one per lent datagram of the batch)", round, len(w.bufs))
		}
	}
	if &rec.wires[3][0] != &owned[maxOverhead] {
		t.Error("a datagram with the owner's buffer was moved out of it")
	}
}
