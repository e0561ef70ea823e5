//go:build linux

package filecopy

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
	"github.com/mrgw/mrgw/stream"
)

// TestCopySparse16GiB copies a sparse file of 16 GiB holding 5 MiB of
// data in four places. Only the chunks holding data travel; the copy is
// sparse too and byte-exact (its SHA-256, computed here, equals the one
// both ends agreed on, and the data regions compare equal); the Go heap
// grows by far less than the file (the sender holds Buffers chunks, the
// receiver only its mapped windows, which never exceed MaxWindows).
func TestCopySparse16GiB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	root := t.TempDir()
	const window = 64 << 20
	r := newReceiver(t, ctx, l, ServerConfig{Root: root, Window: window, MaxWindows: 2})
	snd := newEndpoint(t, l, "loader", lab.RegionA)

	const size = 16 << 30
	src := t.TempDir()
	file := filepath.Join(src, "sparse.img")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	regions := []struct {
		off int64
		n   int
	}{{0, 1 << 20}, {3<<30 + 12345, 2 << 20}, {9 << 30, 1<<20 + 1}, {size - 1<<20, 1 << 20}}
	for i, rg := range regions {
		if _, err := f.WriteAt(randBytes(uint64(10+i), rg.n), rg.off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	// The live heap (what the last collection kept), sampled while the
	// copy runs, with collections frequent enough to see a peak.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	base := live[0].Value.Uint64()
	stop := make(chan struct{})
	peak := make(chan uint64, 1)
	go func() {
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		hi := uint64(0)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			hi = max(hi, s[0].Value.Uint64())
			select {
			case <-stop:
				peak <- hi
				return
			case <-tick.C:
			}
		}
	}()
	opt := Options{Chunk: 4 << 20, Buffers: 8}
	sum, err := Send(ctx, snd.m, target(r), "", []string{file}, opt)
	close(stop)
	hi := <-peak
	if err != nil {
		t.Fatal(err)
	}
	st := r.srv.Stats()
	growth := int64(hi) - int64(base)
	t.Logf("sent %d bytes, holes %d; live heap %d MiB before, peak %d MiB; mapped at most %d MiB",
		sum.BytesSent, sum.BytesHoles, base>>20, hi>>20, st.MaxMappedBytes>>20)
	// Data chunks: 1 + 1 (3 GiB+12345 crosses no boundary... at most 2) + 2 + 1.
	if sum.BytesSent > 8*opt.Chunk || sum.BytesHoles < size-8*opt.Chunk {
		t.Fatalf("sent %d bytes and skipped %d as holes of a %d-byte file with 5 MiB of data", sum.BytesSent, sum.BytesHoles, int64(size))
	}
	// The lab's gateways account for about 100 MiB of the growth (their
	// sockets' rings, their status snapshots); a copy that held the file,
	// or a window per chunk, would exceed the bound many times over.
	if growth > 256<<20 {
		t.Fatalf("the Go heap grew by %d MiB copying a sparse 16 GiB file: want it bounded by the buffers (%d MiB)", growth>>20, int64(opt.Buffers)*opt.Chunk>>20)
	}
	if st.MaxMappedBytes > 2*window {
		t.Fatalf("mapped %d bytes at once, more than MaxWindows × Window", st.MaxMappedBytes)
	}
	dst := filepath.Join(root, "sparse.img")
	var sst syscall.Stat_t
	if err := syscall.Stat(dst, &sst); err != nil {
		t.Fatal(err)
	}
	if sst.Size != size || sst.Blocks*512 > 64<<20 {
		t.Fatalf("copy: %d bytes, %d allocated: want %d bytes, sparse", sst.Size, sst.Blocks*512, int64(size))
	}
	// Byte-exact without reading 16 GiB: every data extent of either
	// file equals the other file's bytes there; elsewhere both are holes,
	// which read as zeros.
	sf, _ := os.Open(file)
	df, _ := os.Open(dst)
	defer sf.Close()
	defer df.Close()
	for _, pair := range [][2]*os.File{{sf, df}, {df, sf}} {
		for off := int64(0); off < size; {
			d := nextData(pair[0], off, size)
			if d >= size {
				break
			}
			e := nextHole(pair[0], d, size)
			for p := d; p < e; p += 1 << 20 {
				n := min(1<<20, e-p)
				a, b := make([]byte, n), make([]byte, n)
				if _, err := pair[0].ReadAt(a, p); err != nil {
					t.Fatal(err)
				}
				if _, err := pair[1].ReadAt(b, p); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Fatalf("bytes at %d..%d differ", p, p+n)
				}
			}
			off = e
		}
	}
	want, err := hashFile(ctx, file, size)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(want[:]) != sum.List[0].SHA256 {
		t.Fatalf("the ends agreed on SHA-256 %s, the source's is %x", sum.List[0].SHA256, want)
	}
}

// TestRefusePathsOutOfRoot: the receiver refuses, with ErrNotAllowed,
// paths that leave its root: "..", absolute paths, a destination
// directory or an entry's directory that is a symbolic link (out of the
// root or not), and writes nothing outside the root.
func TestRefusePathsOutOfRoot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	root := t.TempDir()
	outside := t.TempDir()
	r := newReceiver(t, ctx, l, ServerConfig{Root: root})
	snd := newEndpoint(t, l, "loader", lab.RegionA)
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "in", "sub")); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "sub", "x"), []byte("payload"), 0o644, time.Now())
	writeFile(t, filepath.Join(src, "big"), randBytes(1, 1<<20), 0o644, time.Now())

	// Through Send: a destination that is a link out of the root, and a
	// tree whose directory is a link at the destination.
	for _, c := range []struct {
		dest string
		srcs []string
	}{
		{"link", []string{filepath.Join(src, "big")}},
		{"link/deeper", []string{filepath.Join(src, "sub")}},
		{"in", []string{filepath.Join(src, "sub")}},
	} {
		_, err := Send(ctx, snd.m, target(r), c.dest, c.srcs, Options{})
		if !errors.Is(err, ErrNotAllowed) {
			t.Fatalf("copy of %v to %q: %v, want ErrNotAllowed", c.srcs, c.dest, err)
		}
		t.Logf("%q: %v", c.dest, err)
	}
	// Raw control messages, as a hostile sender would write them.
	for _, c := range []struct{ dest, path string }{
		{"", "../escape"},
		{"", "a/../../escape"},
		{"", "/etc/escape"},
		{"../up", "x"},
		{"", "x/.y.mrgw-state"},
	} {
		conn, err := snd.m.DialAddr(ctx, target(r))
		if err != nil {
			t.Fatal(err)
		}
		var b []byte
		b = appendMsg(b, &msg{Type: tHello, Version: protocolVersion, Size: 1 << 20, Count: 1, Path: c.dest})
		b = appendMsg(b, &msg{Type: tEntry, Idx: 0, Kind: kindFile, Mode: 0o644, Size: 7, DataBytes: 7, Path: c.path})
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		mr := newMsgReader(conn)
		var m msg
		for {
			if m, err = mr.read(); err != nil || m.Type != tHelloOK {
				break
			}
		}
		conn.Close()
		if err != nil || m.Type != tError || m.Code != codeNotAllowed {
			t.Fatalf("dest %q path %q: answer %v code %d %q, err %v; want ERROR not allowed", c.dest, c.path, m.Type, m.Code, m.Text, err)
		}
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 0 {
		t.Fatalf("%d entries written outside the root", len(ents))
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "escape")); err == nil {
		t.Fatal("escape written beside the root")
	}
	if n := r.srv.Stats().Refused; n != 8 {
		t.Fatalf("refusals counted: %d, want 8", n)
	}
}

// TestRefusals: a full disk at the receiver refuses the copy before any
// data moves, saying how much is needed and free; a destination where
// nothing listens is refused by the stream.
func TestRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	root := t.TempDir()
	r := newReceiver(t, ctx, l, ServerConfig{Root: root, freeSpace: func(string) (uint64, error) { return 1 << 20, nil }})
	snd := newEndpoint(t, l, "loader", lab.RegionA)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "big"), randBytes(1, 3<<20), 0o644, time.Now())
	_, err := Send(ctx, snd.m, target(r), "", []string{filepath.Join(src, "big")}, Options{Chunk: 1 << 20})
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "needs 3145728 bytes") {
		t.Fatalf("copy to a full disk: %v", err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("%d entries written to a full disk", len(ents))
	}
	t.Logf("%v", err)
	to := target(r)
	to.Port++
	_, err = Send(ctx, snd.m, to, "", []string{filepath.Join(src, "big")}, Options{})
	if !errors.Is(err, stream.ErrRefused) {
		t.Fatalf("copy to a port nobody listens on: %v", err)
	}
	t.Logf("%v", err)
}
