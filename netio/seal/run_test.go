package seal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
)

// TestRunSealsAsSealer: a Run's datagram is byte for byte the one
// Sealer.Seal makes with the same counter (the wire is the same whichever
// path seals), in place and into another buffer, for every suite.
func TestRunSealsAsSealer(t *testing.T) {
	for _, s := range suites {
		k := testKey(s, 7, 21)
		one, batch := mustSealer(t, k, 0), mustSealer(t, k, 0)
		var r Run
		if got := batch.Reserve(&r, 5); got != 5 || r.Left() != 5 || r.Sealer() != batch {
			t.Fatalf("%v: Reserve got %d, Left %d", s, got, r.Left())
		}
		for i := range 5 {
			pt := payload(100 + i)
			want, err := one.Seal(nil, pt)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			if i%2 == 0 {
				got, err = r.Seal(nil, pt)
			} else { // in place, as netio seals
				buf := make([]byte, HeaderLen+len(pt)+TagLen)
				copy(buf[HeaderLen:], pt)
				got, err = r.Seal(buf[:0], buf[HeaderLen:HeaderLen+len(pt)])
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%v: datagram %d differs from Sealer.Seal's", s, i)
			}
		}
		if _, err := r.Seal(nil, payload(8)); !errors.Is(err, ErrKeyExhausted) {
			t.Fatalf("%v: a spent run sealed: %v", s, err)
		}
		// The Sealer goes on after the run's counters.
		d, _ := batch.Seal(nil, payload(8))
		if c := binary.BigEndian.Uint64(d[4:12]); c != 5 {
			t.Fatalf("%v: Seal after a run of 5 used counter %d", s, c)
		}
	}
}

// TestRunLimit: a reservation never goes past the Sealer's limit, and
// Sent counts reserved counters (the rekey threshold sees them).
func TestRunLimit(t *testing.T) {
	k := testKey(AES128GCM, 0, 22)
	sl := mustSealer(t, k, 10)
	var r Run
	if got := sl.Reserve(&r, 8); got != 8 || sl.Sent() != 8 {
		t.Fatalf("Reserve(8) = %d, Sent %d", got, sl.Sent())
	}
	var r2 Run
	if got := sl.Reserve(&r2, 8); got != 2 || r2.Left() != 2 || sl.Remaining() != 0 {
		t.Fatalf("Reserve(8) near the limit = %d (Left %d, Remaining %d), want 2", got, r2.Left(), sl.Remaining())
	}
	if got := sl.Reserve(&r2, 8); got != 0 || r2.Left() != 0 {
		t.Fatalf("Reserve past the limit = %d", got)
	}
	dst := []byte("keep")
	if d, err := r2.Seal(dst, payload(8)); !errors.Is(err, ErrKeyExhausted) || !bytes.Equal(d, dst) {
		t.Fatalf("seal from an empty run: %q, %v", d, err)
	}
	if _, err := sl.Seal(nil, payload(8)); !errors.Is(err, ErrKeyExhausted) {
		t.Fatalf("Seal after the runs took every counter: %v", err)
	}
	if got := sl.Reserve(&r2, 0); got != 0 {
		t.Fatalf("Reserve(0) = %d", got)
	}
}

// TestRunConcurrent: goroutines that reserve runs and seal from them next
// to goroutines that seal one at a time never share a counter, and the
// opener takes every datagram once.
func TestRunConcurrent(t *testing.T) {
	const writers, perWriter, run = 4, 640, 64
	k := testKey(AES128GCM, 0, 23)
	sl, op := mustSealer(t, k, 0), mustOpener(t, k)
	ch := make(chan []byte, writers*perWriter)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			var r Run
			for i := range perWriter {
				var d []byte
				var err error
				if w%2 == 0 {
					if r.Left() == 0 {
						sl.Reserve(&r, run)
					}
					d, err = r.Seal(nil, payload(100+i%7))
				} else {
					d, err = sl.Seal(nil, payload(100+i%7))
				}
				if err != nil {
					t.Error(err)
					return
				}
				ch <- d
			}
		})
	}
	wg.Wait()
	close(ch)
	seen := map[uint64]bool{}
	for d := range ch {
		ctr := binary.BigEndian.Uint64(d[4:12])
		if seen[ctr] {
			t.Fatalf("counter %d used twice", ctr)
		}
		seen[ctr] = true
		if _, err := op.Open(nil, d); err != nil {
			t.Fatalf("counter %d: %v", ctr, err)
		}
	}
	if len(seen) != writers*perWriter {
		t.Fatalf("%d datagrams, want %d", len(seen), writers*perWriter)
	}
}

// TestRunAllocationFree: sealing from a run allocates nothing (its nonce
// is its own, not the pool's).
func TestRunAllocationFree(t *testing.T) {
	for _, s := range suites {
		sl := mustSealer(t, testKey(s, 0, 24), 0)
		r := new(Run)
		pt := payload(1400)
		buf := make([]byte, 0, 2048)
		allocs := testing.AllocsPerRun(200, func() {
			if r.Left() == 0 {
				sl.Reserve(r, 64)
			}
			var err error
			if buf, err = r.Seal(buf[:0], pt); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v: a run's seal allocates %.1f times per datagram", s, allocs)
		}
	}
}

// BenchmarkRunSeal is BenchmarkSeal through a Run reserved 64 at a time,
// as a netio sender seals a batch.
func BenchmarkRunSeal(b *testing.B) {
	sl := mustSealer(b, testKey(AES128GCM, 0, 25), 0)
	r := new(Run)
	pt := payload(1400)
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(len(pt)))
	b.ReportAllocs()
	for b.Loop() {
		if r.Left() == 0 {
			sl.Reserve(r, 64)
		}
		buf, _ = r.Seal(buf[:0], pt)
	}
}
