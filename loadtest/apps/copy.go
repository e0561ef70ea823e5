//go:build linux

package apps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/mrgw/mrgw/units"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// copyBuf is the copy loop's buffer: every read of the source and every
// write into the connection is one such block, on every system alike.
const copyBuf = 1 << 20

// sourceFile is the file every copy sends: pseudo-random bytes (nothing on
// the way compresses them), written once per Run.
type sourceFile struct {
	path string
	size int64
	sum  [sha256.Size]byte
}

// newSourceFile writes size pseudo-random bytes (seeded) into a new file
// in dir and keeps their SHA-256.
func newSourceFile(ctx context.Context, dir string, size int64, seed uint64) (*sourceFile, error) {
	f, err := os.CreateTemp(dir, "mrgw-apps-src-*.bin")
	if err != nil {
		return nil, fmt.Errorf("apps: source file: %w", err)
	}
	s := &sourceFile{path: f.Name(), size: size}
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24), 'a', 'p', 'p', 's'})
	h := sha256.New()
	buf := make([]byte, copyBuf)
	for left := size; left > 0; {
		if ctx.Err() != nil {
			f.Close()
			s.remove()
			return nil, ctx.Err()
		}
		b := buf[:min(left, int64(len(buf)))]
		_, _ = rng.Read(b)
		h.Write(b)
		if _, err := f.Write(b); err != nil {
			f.Close()
			s.remove()
			return nil, fmt.Errorf("apps: source file: %w", err)
		}
		left -= int64(len(b))
	}
	if err := f.Close(); err != nil {
		s.remove()
		return nil, fmt.Errorf("apps: source file: %w", err)
	}
	copy(s.sum[:], h.Sum(nil))
	return s, nil
}

func (s *sourceFile) remove() { _ = os.Remove(s.path) }

// copyFunc moves the source file to dst (a path that does not exist yet)
// and returns once dst holds all of it, on disk (fsynced); got follows the
// bytes at the receiver as they arrive. It must return soon after ctx ends.
type copyFunc func(ctx context.Context, dst string, got *atomic.Int64) error

// copyRun times one copy with fn, bounded by o.CopyLimit, and checks the
// result byte for byte (SHA-256, read back after the timed part). A copy
// still running at the limit counts the bytes that had arrived.
func copyRun(ctx context.Context, o *Options, src *sourceFile, fn copyFunc) (Result, error) {
	dst := filepath.Join(o.Dir, fmt.Sprintf("mrgw-apps-dst-%d-%d.bin", os.Getpid(), copySeq.Add(1)))
	defer os.Remove(dst)
	cctx, cancel := context.WithTimeout(ctx, o.CopyLimit)
	defer cancel()
	var got atomic.Int64
	cpu0, t0 := processCPU(), time.Now()
	err := fn(cctx, dst, &got)
	wall, cpu := time.Since(t0), processCPU()-cpu0
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	r := Result{CPUSelf: cpu, Wall: wall}
	n := got.Load()
	r.GoodputBps = float64(units.Throughput(float64(n), wall.Seconds()))
	switch {
	case err != nil && cctx.Err() != nil:
		r.Note = fmt.Sprintf("incomplete: %s of %s within the %v limit", sizeString(n), sizeString(src.size), o.CopyLimit)
		return r, nil
	case err != nil:
		return Result{}, err
	}
	sum, size, err := fileSum(dst)
	if err != nil {
		return Result{}, err
	}
	if size != src.size || sum != src.sum {
		return Result{}, fmt.Errorf("the copy differs: %s, sha256 %s; the source %s, sha256 %s",
			sizeString(size), hex.EncodeToString(sum[:8]), sizeString(src.size), hex.EncodeToString(src.sum[:8]))
	}
	r.GoodputBps = float64(units.Throughput(float64(size), wall.Seconds()))
	r.Note = fmt.Sprintf("%s in %.1f s, sha256 equal", sizeString(size), wall.Seconds())
	return r, nil
}

var copySeq atomic.Uint64

// fileSum returns a file's SHA-256 and size.
func fileSum(path string) ([sha256.Size]byte, int64, error) {
	var sum [sha256.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, onlyReader{f}, make([]byte, copyBuf))
	if err != nil {
		return sum, n, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, n, nil
}

// connCopy is the copy over a byte stream: the receiver accepts, writes
// what it reads into dst and fsyncs it; the sender dials, writes the
// source in copyBuf blocks and half-closes. before, if set, runs once the
// receiver is done and before the sender's connection closes. When ctx
// ends both connections' deadlines pass, which ends every blocked read and
// write (net.Conn's contract), and then they close.
func connCopy(ctx context.Context, srcPath, dst string, got *atomic.Int64,
	dial, accept func(context.Context) (net.Conn, error), before func()) error {
	recv := make(chan error, 1)
	var rc atomic.Pointer[net.Conn]
	go func() {
		c, err := accept(ctx)
		if err != nil {
			recv <- fmt.Errorf("accept: %w", err)
			return
		}
		rc.Store(&c)
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
		defer stop()
		recv <- receiveFile(c, dst, got)
	}()
	c, err := dial(ctx)
	if err != nil {
		if p := rc.Load(); p != nil {
			_ = (*p).SetDeadline(time.Unix(1, 0))
		}
		<-recv
		return fmt.Errorf("dial: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	send := make(chan error, 1)
	go func() { send <- sendFile(c, srcPath) }()
	var serr, rerr error
	select {
	case rerr = <-recv:
		// The receiver is done (or failed): the sender has nothing left
		// to do, or must stop.
		if rerr != nil {
			_ = c.SetDeadline(time.Unix(1, 0))
		}
		serr = <-send
	case serr = <-send:
		if serr != nil {
			if p := rc.Load(); p != nil {
				_ = (*p).SetDeadline(time.Unix(1, 0))
			}
		}
		rerr = <-recv
	}
	if before != nil {
		before()
	}
	c.Close()
	switch {
	case rerr != nil:
		return fmt.Errorf("receiver: %w", rerr)
	case serr != nil:
		return fmt.Errorf("sender: %w", serr)
	}
	return nil
}

// sendFile writes the file at path into c in copyBuf blocks, then
// half-closes c.
func sendFile(c net.Conn, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// onlyWriter and onlyReader keep io.CopyBuffer from handing the copy
	// to sendfile or a ReadFrom of the connection: every system runs this
	// same loop.
	if _, err := io.CopyBuffer(onlyWriter{c}, onlyReader{f}, make([]byte, copyBuf)); err != nil {
		return err
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("the connection cannot half-close")
}

// receiveFile reads c until EOF into a new file at path, counting into
// got, and fsyncs it.
func receiveFile(c net.Conn, path string, got *atomic.Int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, copyBuf)
	for {
		n, rerr := c.Read(buf)
		if n > 0 {
			if _, err := f.Write(buf[:n]); err != nil {
				f.Close()
				return err
			}
			got.Add(int64(n))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			f.Close()
			return rerr
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type onlyWriter struct{ io.Writer }
type onlyReader struct{ io.Reader }

// sizeString formats a byte count with a binary unit.
func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
