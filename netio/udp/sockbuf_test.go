//go:build linux

package udp

import "testing"

// Options.ReadBuffer and WriteBuffer reach the socket, and Stats reports
// what the kernel granted (64 KiB is below every distribution's cap, so it
// is granted as asked).
func TestSocketBuffersApplied(t *testing.T) {
	const ask = 64 << 10
	c := open(t, loop4, Options{ReadBuffer: ask, WriteBuffer: ask})
	if st := c.Stats(); st.ReadBuffer != ask || st.WriteBuffer != ask {
		t.Fatalf("granted %d/%d bytes, asked %d each", st.ReadBuffer, st.WriteBuffer, ask)
	}
}
