//go:build linux

package filecopy

import (
	"context"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/loadtest/lab/labtest"
)

// resumeSource is a 40 MiB file copied in 1 MiB chunks into 2 MiB
// windows: twenty windows, each recorded in the state file as it is
// released.
func resumeSource(t *testing.T) (dir, file string) {
	dir = t.TempDir()
	file = filepath.Join(dir, "model.pt")
	writeFile(t, file, randBytes(7, 40<<20+777), 0o600, time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC))
	return dir, file
}

// atHalf returns a Progress callback that runs f once, the first time
// half the bytes are in, after the receiver has recorded at least 4
// chunks in its state file. The copy waits meanwhile, so f acts in the
// middle of the transfer whatever the machine's speed.
func atHalf(ctx context.Context, r func() *receiver, f func()) func(done, total int64) {
	var once atomic.Bool
	return func(done, total int64) {
		if done < total/2 || !once.CompareAndSwap(false, true) {
			return
		}
		for r().srv.Stats().ChunksPersisted < 4 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		f()
	}
}

// checkResumed: the second run sent only part of the file, skipped the
// rest as verified by the first, and the result is byte-exact.
func checkResumed(t *testing.T, sum *Summary, src, root string) {
	t.Helper()
	t.Logf("second run: sent %d of %d bytes, skipped %d", sum.BytesSent, sum.Bytes, sum.BytesSkipped)
	if sum.BytesSent >= sum.Bytes || sum.BytesSkipped == 0 || sum.BytesSent+sum.BytesSkipped < sum.Bytes {
		t.Fatalf("second run sent %d and skipped %d of %d bytes: want only what was missing", sum.BytesSent, sum.BytesSkipped, sum.Bytes)
	}
	if sum.Verified != 1 {
		t.Fatalf("verified %d files", sum.Verified)
	}
	sameTree(t, src, root)
}

// TestResumeAfterSenderKilled kills the sending host (as kill -9) in the
// middle of a copy, then runs the same copy from a new host of the same
// name: it sends only the chunks the receiver had not verified, and the
// file is byte-exact.
func TestResumeAfterSenderKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	root := t.TempDir()
	r := newReceiver(t, ctx, l, ServerConfig{Root: root, Window: 2 << 20, MaxWindows: 2})
	src, file := resumeSource(t)
	snd := newEndpoint(t, l, "loader", lab.RegionA)
	opt := Options{Chunk: 1 << 20, Progress: atHalf(ctx, func() *receiver { return r }, snd.h.Kill)}
	if _, err := Send(ctx, snd.m, target(r), "", []string{file}, opt); err == nil {
		t.Fatal("the copy succeeded although its host was killed halfway")
	} else {
		t.Logf("first run: %v", err)
	}
	snd2 := newEndpoint(t, l, "loader", lab.RegionA)
	sum, err := Send(ctx, snd2.m, target(r), "", []string{file}, Options{Chunk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	checkResumed(t, sum, src, root)
}

// TestResumeAfterReceiverKilled kills the receiving host (as kill -9:
// nothing more is saved) in the middle of a copy. The sender fails by
// itself once its flows have no route; a new receiver on the same root
// and the same copy run again send only the chunks not yet verified.
func TestResumeAfterReceiverKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	root := t.TempDir()
	cfg := ServerConfig{Root: root, Window: 2 << 20, MaxWindows: 2}
	r := newReceiver(t, ctx, l, cfg)
	src, file := resumeSource(t)
	snd := newEndpoint(t, l, "loader", lab.RegionA)
	opt := Options{Chunk: 1 << 20, Progress: atHalf(ctx, func() *receiver { return r }, func() { r.kill() })}
	if _, err := Send(ctx, snd.m, target(r), "", []string{file}, opt); err == nil {
		t.Fatal("the copy succeeded although its receiver was killed halfway")
	} else {
		t.Logf("first run: %v", err)
	}
	r2 := newReceiver(t, ctx, l, cfg)
	sum, err := Send(ctx, snd.m, target(r2), "", []string{file}, Options{Chunk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	checkResumed(t, sum, src, root)
}

// TestCopySurvivesGatewayKilled kills the gateway that carries the data
// flow in the middle of a copy over the emulated WAN: the flow fails
// over to the region's other gateway, the copy completes byte-exact, and
// the same copy run again sends nothing.
func TestCopySurvivesGatewayKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{OneWay: 5 * time.Millisecond})
	root := t.TempDir()
	r := newReceiver(t, ctx, l, ServerConfig{Root: root, Window: 2 << 20, MaxWindows: 2})
	src, file := resumeSource(t)
	snd := newEndpoint(t, l, "loader", lab.RegionA)
	var route atomic.Value
	victim := ""
	opt := Options{Chunk: 1 << 20,
		onFlow: func(f *host.Flow) { route.Store(f.Gateway()) },
		Progress: atHalf(ctx, func() *receiver { return r }, func() {
			a, _ := route.Load().(netip.AddrPort)
			for i, g := range l.HostGateways(lab.RegionA) {
				if g == a {
					victim = l.Names[lab.RegionA][i]
				}
			}
			if victim != "" {
				l.Gateways[victim].Close()
			}
		})}
	sum, err := Send(ctx, snd.m, target(r), "", []string{file}, opt)
	if victim == "" {
		t.Fatalf("the data flow's gateway %v is none of %v", route.Load(), l.HostGateways(lab.RegionA))
	}
	if err != nil {
		t.Fatalf("copy with %s killed halfway: %v", victim, err)
	}
	st := snd.h.Stats()
	t.Logf("%s killed: sent %d of %d bytes, %d flow re-opens", victim, sum.BytesSent, sum.Bytes, st.Reopens)
	if st.Reopens == 0 {
		t.Fatal("no flow failed over")
	}
	sameTree(t, src, root)
	again, err := Send(ctx, snd.m, target(r), "", []string{file}, Options{Chunk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if again.BytesSent != 0 || again.Skipped != 1 {
		t.Fatalf("the same copy again sent %d bytes, skipped %d files", again.BytesSent, again.Skipped)
	}
}

// TestResumeTreeAfterSenderKilled kills the sending host halfway through
// a tree of 2,000 small files: the same copy run again skips the files
// the receiver committed, sends the rest, and the tree is byte-exact
// with no working file left behind.
func TestResumeTreeAfterSenderKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	l := labtest.Start(t, ctx, lab.Config{Direct: true})
	root := t.TempDir()
	r := newReceiver(t, ctx, l, ServerConfig{Root: root})
	src := t.TempDir()
	mt := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for i := range 2000 {
		writeFile(t, filepath.Join(src, "t", fmt.Sprintf("d%02d", i%20), fmt.Sprintf("f%04d", i)), randBytes(uint64(i), 1000+i), 0o644, mt)
	}
	filepath.WalkDir(filepath.Join(src, "t"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chtimes(p, mt, mt)
		}
		return nil
	})
	snd := newEndpoint(t, l, "loader", lab.RegionA)
	var once atomic.Bool
	opt := Options{Progress: func(done, total int64) {
		if done < total/2 || !once.CompareAndSwap(false, true) {
			return
		}
		for r.srv.Stats().Files < 200 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		snd.h.Kill()
	}}
	if _, err := Send(ctx, snd.m, target(r), "", []string{filepath.Join(src, "t")}, opt); err == nil {
		t.Fatal("the copy succeeded although its host was killed halfway")
	}
	snd2 := newEndpoint(t, l, "loader", lab.RegionA)
	sum, err := Send(ctx, snd2.m, target(r), "", []string{filepath.Join(src, "t")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second run: %d files skipped, %d copied; sent %d of %d bytes", sum.Skipped, sum.Verified, sum.BytesSent, sum.Bytes)
	if sum.Skipped < 200 || sum.Skipped+sum.Verified != 2000 || sum.BytesSent >= sum.Bytes {
		t.Fatalf("second run skipped %d files and copied %d, sent %d of %d bytes", sum.Skipped, sum.Verified, sum.BytesSent, sum.Bytes)
	}
	sameTree(t, src, root)
}
