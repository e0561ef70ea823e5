//go:build linux

package netio

import "testing"

// TestSpareRxBuffersBounded: the spares that replace kept receive buffers
// are the ones given back, newest first, and at most maxSpareRx of them
// are held; a buffer of another length is not taken.
func TestSpareRxBuffersBounded(t *testing.T) {
	e := &Endpoint{rxBufLen: 64}
	e.ReturnRxBuf(make([]byte, 32)) // not a receive buffer
	if n := len(e.owner.spareRx); n != 0 {
		t.Fatalf("%d spares after a buffer of another length", n)
	}
	a, b := make([]byte, 64), make([]byte, 64)
	e.ReturnRxBuf(a[:10]) // given back as the sink sliced it
	e.ReturnRxBuf(b)
	if got := e.owner.spareRxBuf(64); &got[0] != &b[0] || len(got) != 64 {
		t.Fatal("the newest spare was not handed out first, whole")
	}
	if got := e.owner.spareRxBuf(64); &got[0] != &a[0] || len(got) != 64 {
		t.Fatal("a spare given back as a slice was not handed out whole")
	}
	if got := e.owner.spareRxBuf(64); len(got) != 64 || &got[0] == &a[0] || &got[0] == &b[0] {
		t.Fatal("with no spares left, a new buffer of the receive length was not made")
	}
	for range maxSpareRx + 10 {
		e.ReturnRxBuf(make([]byte, 64))
	}
	if n := len(e.owner.spareRx); n != maxSpareRx {
		t.Fatalf("%d spares held, want the bound %d", n, maxSpareRx)
	}
}
