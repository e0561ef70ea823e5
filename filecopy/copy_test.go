//go:build linux

package filecopy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
	"github.com/mrgw/mrgw/stream"
)

// patience bounds every wait: a deadline for a failure, never a
// performance threshold.
const patience = 3 * time.Minute

// endpoint is a host with a stream Mux on it.
type endpoint struct {
	h *host.Host
	m *stream.Mux
}

func newEndpoint(t *testing.T, l *lab.Lab, name, region string) *endpoint {
	t.Helper()
	h, err := host.New(host.Config{Name: name, Region: region, Gateways: l.HostGateways(region), Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: patience / 4, FailAfter: 5 * time.Second, Takeover: true, Logger: labtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.New(h, stream.Config{Logger: labtest.Logger()})
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	ep := &endpoint{h: h, m: m}
	t.Cleanup(ep.close)
	return ep
}

func (ep *endpoint) close() {
	ep.m.Close()
	ep.h.Close()
}

// receiver is a Server on its own endpoint, serving until closed.
type receiver struct {
	*endpoint
	srv  *Server
	done chan error
}

func newReceiver(t *testing.T, ctx context.Context, l *lab.Lab, cfg ServerConfig) *receiver {
	t.Helper()
	ep := newEndpoint(t, l, "store", lab.RegionB)
	cfg.Logger = labtest.Logger()
	srv, err := NewServer(ep.m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{endpoint: ep, srv: srv, done: make(chan error, 1)}
	go func() { r.done <- srv.Serve(ctx) }()
	t.Cleanup(func() { srv.Close() })
	return r
}

// kill stands for kill -9 of the receiving process: its host falls
// silent and nothing more is saved.
func (r *receiver) kill() {
	r.srv.killed.Store(true)
	r.h.Kill()
	r.srv.Close()
	r.m.Close()
}

func target(r *receiver) stream.Addr {
	return stream.Addr{Region: lab.RegionB, Endpoint: "store", Port: r.srv.Addr().Port}
}

func randBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func writeFile(t *testing.T, p string, data []byte, mode fs.FileMode, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// sameTree fails unless every regular file and directory under src is
// under dst with the same bytes, mode and modification time, and dst
// holds nothing else (no working files left behind).
func sameTree(t *testing.T, src, dst string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		q := filepath.Join(dst, rel)
		si, err := os.Stat(p)
		if err != nil {
			return err
		}
		di, err := os.Lstat(q)
		if err != nil {
			return err
		}
		if si.Mode() != di.Mode() {
			return fmt.Errorf("%s: mode %v, want %v", rel, di.Mode(), si.Mode())
		}
		if !si.ModTime().Equal(di.ModTime()) {
			return fmt.Errorf("%s: mtime %v, want %v", rel, di.ModTime(), si.ModTime())
		}
		if d.IsDir() {
			return nil
		}
		n++
		a, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(q)
		if err != nil {
			return err
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("%s: content differs (%d and %d bytes)", rel, len(a), len(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := 0
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			m++
		}
		return nil
	})
	if m != n {
		t.Fatalf("%d files at the destination, %d at the source (working files left?)", m, n)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestCopyFileAndTree copies a large file (WRITTEN into mapped windows,
// several of them) and a tree of 2,000 small files in nested
// directories (inline): both arrive byte for byte with their modes and
// modification times, each file's SHA-256 matches the source's, no
// working file is left, and the same copy run again sends nothing.
func TestCopyFileAndTree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	root := t.TempDir()
	r := newReceiver(t, ctx, l, ServerConfig{Root: root, Window: 4 << 20, MaxWindows: 2})
	snd := newEndpoint(t, l, "loader", lab.RegionA)

	src := t.TempDir()
	mt := time.Date(2025, 3, 4, 5, 6, 7, 891011120, time.UTC)
	big := randBytes(1, 21<<20+4321)
	writeFile(t, filepath.Join(src, "shard.bin"), big, 0o640, mt)
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range 2000 {
		p := filepath.Join(src, "ckpt", fmt.Sprintf("d%02d", i%37), fmt.Sprintf("e%d", i%5), fmt.Sprintf("f%04d", i))
		writeFile(t, p, randBytes(uint64(i), rng.IntN(6000)), fs.FileMode(0o600|rng.IntN(0o100)), mt.Add(time.Duration(i)*time.Second))
	}
	if err := os.MkdirAll(filepath.Join(src, "ckpt", "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	// Directory times last: creating entries changes them.
	filepath.WalkDir(filepath.Join(src, "ckpt"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chtimes(p, mt, mt)
		}
		return nil
	})

	opt := Options{Chunk: 1 << 20}
	sum, err := Send(ctx, snd.m, target(r), "in", []string{filepath.Join(src, "shard.bin"), filepath.Join(src, "ckpt")}, opt)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, src, filepath.Join(root, "in"))
	if sum.Files != 2001 || sum.Verified != 2001 || sum.Skipped != 0 || sum.Dirs < 38 {
		t.Fatalf("summary: %d files, %d verified, %d skipped, %d dirs", sum.Files, sum.Verified, sum.Skipped, sum.Dirs)
	}
	if sum.BytesSent != sum.Bytes || sum.BytesSkipped != 0 {
		t.Fatalf("sent %d of %d bytes, skipped %d", sum.BytesSent, sum.Bytes, sum.BytesSkipped)
	}
	for _, f := range sum.List {
		if f.Path == "shard.bin" && f.SHA256 != sha(big) {
			t.Fatalf("shard.bin: sha256 %s, want %s", f.SHA256, sha(big))
		}
	}
	st := r.srv.Stats()
	if st.Files != 2001 || st.Inline != 2000 || st.ChunksVerified != 22 || st.MaxMappedBytes > 2*(4<<20) {
		t.Fatalf("receiver: %+v", st)
	}

	again, err := Send(ctx, snd.m, target(r), "in", []string{filepath.Join(src, "shard.bin"), filepath.Join(src, "ckpt")}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if again.BytesSent != 0 || again.Skipped != 2001 || again.BytesSkipped != sum.Bytes {
		t.Fatalf("the same copy again sent %d bytes, skipped %d files (%d bytes)", again.BytesSent, again.Skipped, again.BytesSkipped)
	}
	sameTree(t, src, filepath.Join(root, "in"))
}

// TestCopyChunkCorrupted: a chunk whose bytes in the mapping do not
// match its CRC32C is refused by the receiver and WRITTEN again; the
// copy is byte-exact.
func TestCopyChunkCorrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	root := t.TempDir()
	var hit atomic.Int32
	r := newReceiver(t, ctx, l, ServerConfig{Root: root, Window: 2 << 20, corrupt: func(rel string, chunk uint64, mem []byte) {
		if chunk == 3 && hit.Add(1) == 1 {
			mem[100] ^= 0xff
		}
	}})
	snd := newEndpoint(t, l, "loader", lab.RegionA)
	src := t.TempDir()
	data := randBytes(3, 6<<20)
	writeFile(t, filepath.Join(src, "f"), data, 0o644, time.Now())
	sum, err := Send(ctx, snd.m, target(r), "", []string{filepath.Join(src, "f")}, Options{Chunk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ChunksResent != 1 || r.srv.Stats().ChunksBad != 1 {
		t.Fatalf("chunks re-sent %d, refused %d; want 1 and 1", sum.ChunksResent, r.srv.Stats().ChunksBad)
	}
	sameTree(t, src, root)
}
