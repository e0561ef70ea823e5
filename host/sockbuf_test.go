package host

import "testing"

// TestSocketBufferDefault: the host's sockets ask for DefaultSocketBuffer
// unless told otherwise; a negative value keeps the kernel's default.
func TestSocketBufferDefault(t *testing.T) {
	c := Config{}.withDefaults()
	if o := socketOptions(c); o.ReadBuffer != DefaultSocketBuffer || o.WriteBuffer != DefaultSocketBuffer {
		t.Fatalf("default: read %d write %d, want %d", o.ReadBuffer, o.WriteBuffer, DefaultSocketBuffer)
	}
	if o := socketOptions(Config{SocketBuffer: 1 << 20}.withDefaults()); o.ReadBuffer != 1<<20 {
		t.Fatalf("explicit 1 MiB: read %d", o.ReadBuffer)
	}
	if o := socketOptions(Config{SocketBuffer: -1}.withDefaults()); o.ReadBuffer != 0 || o.WriteBuffer != 0 {
		t.Fatalf("negative: read %d write %d, want the kernel's (0)", o.ReadBuffer, o.WriteBuffer)
	}
}
