package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
)

var suites = []Suite{AES128GCM, AES256GCM, ChaCha20Poly1305}

// testKey returns a deterministic key for suite s; seed makes different keys.
func testKey(s Suite, epoch uint8, seed byte) Key {
	k := make([]byte, s.KeyLen())
	for i := range k {
		k[i] = seed + byte(i)*31
	}
	return Key{Suite: s, Secret: k, Epoch: epoch}
}

func mustSealer(t testing.TB, k Key, limit uint64) *Sealer {
	t.Helper()
	s, err := NewSealer(k, limit)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustOpener(t testing.TB, k Key) *Opener {
	t.Helper()
	o, err := NewOpener(k)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func payload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*13 + 7)
	}
	return p
}

// referenceAEAD builds the suite's AEAD straight from the standard
// libraries, independently of the package, to check the wire layout.
func referenceAEAD(t *testing.T, k Key) cipher.AEAD {
	t.Helper()
	if k.Suite == ChaCha20Poly1305 {
		a, err := chacha20poly1305.New(k.Secret)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	b, err := aes.NewCipher(k.Secret)
	if err != nil {
		t.Fatal(err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestWireLayout checks every header byte, the AAD and the nonce against the
// documented layout by decrypting with a reference AEAD.
func TestWireLayout(t *testing.T) {
	for _, s := range suites {
		t.Run(s.String(), func(t *testing.T) {
			k := testKey(s, 7, 1)
			sl := mustSealer(t, k, 0)
			ref := referenceAEAD(t, k)
			pt := payload(100)
			for want := uint64(0); want < 3; want++ {
				d, err := sl.Seal(nil, pt)
				if err != nil {
					t.Fatal(err)
				}
				if len(d) != len(pt)+Overhead {
					t.Fatalf("len %d, want %d", len(d), len(pt)+Overhead)
				}
				if d[0] != 1 || d[1] != 7 || d[2] != 0 || d[3] != 0 || binary.BigEndian.Uint64(d[4:12]) != want {
					t.Fatalf("header %x, want type 1, epoch 7, reserved 0, counter %d", d[:12], want)
				}
				var nonce [12]byte
				binary.BigEndian.PutUint64(nonce[4:], want)
				got, err := ref.Open(nil, nonce[:], d[12:], d[:12])
				if err != nil || !bytes.Equal(got, pt) {
					t.Fatalf("reference AEAD cannot open datagram %d: %v", want, err)
				}
				h, err := ParseHeader(d)
				if err != nil || h != (Header{Type: TypeData, Epoch: 7, Counter: want}) {
					t.Fatalf("ParseHeader = %+v, %v", h, err)
				}
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	for _, s := range suites {
		t.Run(s.String(), func(t *testing.T) {
			k := testKey(s, 0, 2)
			sl, op := mustSealer(t, k, 0), mustOpener(t, k)
			for _, n := range []int{0, 1, 1400, 4096, 65000} {
				pt := payload(n)
				prefix := []byte("hdr")
				d, err := sl.Seal(bytes.Clone(prefix), pt)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.HasPrefix(d, prefix) {
					t.Fatal("Seal did not append to dst")
				}
				got, err := op.Open([]byte("x"), d[len(prefix):])
				if err != nil {
					t.Fatalf("%d bytes: %v", n, err)
				}
				if !bytes.Equal(got, append([]byte("x"), pt...)) {
					t.Fatalf("%d bytes: round trip differs", n)
				}
			}
		})
	}
}

func TestInPlace(t *testing.T) {
	for _, s := range suites {
		k := testKey(s, 3, 3)
		sl, op := mustSealer(t, k, 0), mustOpener(t, k)
		pt := payload(1400)
		buf := make([]byte, HeaderLen+len(pt)+TagLen)
		copy(buf[HeaderLen:], pt)
		d, err := sl.Seal(buf[:0], buf[HeaderLen:HeaderLen+len(pt)])
		if err != nil || &d[0] != &buf[0] || len(d) != len(buf) {
			t.Fatalf("%v: in-place seal: %v", s, err)
		}
		got, err := op.Open(d[HeaderLen:HeaderLen], d)
		if err != nil || !bytes.Equal(got, pt) || &got[0] != &buf[HeaderLen] {
			t.Fatalf("%v: in-place open: %v", s, err)
		}
	}
}

// TestTamper flips each bit of a datagram and checks that Open refuses it
// with the error the changed field calls for.
func TestTamper(t *testing.T) {
	for _, s := range suites {
		t.Run(s.String(), func(t *testing.T) {
			k := testKey(s, 9, 4)
			sl := mustSealer(t, k, 0)
			d, err := sl.Seal(nil, payload(40))
			if err != nil {
				t.Fatal(err)
			}
			for i := range d {
				want := ErrAuth // counter, ciphertext and tag
				switch {
				case i == 0 || i == 2 || i == 3:
					want = ErrUnknownType
				case i == 1:
					want = ErrUnknownEpoch
				}
				for bit := range 8 {
					op := mustOpener(t, k) // fresh replay window each time
					bad := bytes.Clone(d)
					bad[i] ^= 1 << bit
					if _, err := op.Open(nil, bad); err != want {
						t.Fatalf("byte %d bit %d flipped: %v, want %v", i, bit, err, want)
					}
				}
			}
			// Truncation at any length.
			op := mustOpener(t, k)
			for n := range len(d) {
				want := ErrAuth
				if n < Overhead {
					want = ErrTooShort
				}
				if _, err := op.Open(nil, d[:n]); err != want {
					t.Fatalf("truncated to %d: %v, want %v", n, err, want)
				}
			}
			if _, err := op.Open(nil, d); err != nil {
				t.Fatalf("the untouched datagram: %v", err)
			}
		})
	}
}

func TestReplay(t *testing.T) {
	k := testKey(AES128GCM, 0, 5)
	sl, op := mustSealer(t, k, 0), mustOpener(t, k)
	var ds [][]byte
	for range 5 {
		d, _ := sl.Seal(nil, payload(10))
		ds = append(ds, d)
	}
	// Out of order is fine; each only once.
	for _, i := range []int{3, 0, 4, 1} {
		if _, err := op.Open(nil, ds[i]); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
	}
	for _, i := range []int{3, 0, 4, 1} {
		if _, err := op.Open(nil, ds[i]); !errors.Is(err, ErrReplayed) {
			t.Fatalf("replayed datagram %d: %v, want ErrReplayed", i, err)
		}
	}
	if _, err := op.Open(nil, ds[2]); err != nil {
		t.Fatalf("datagram 2: %v", err)
	}
}

func TestWrongKey(t *testing.T) {
	for _, s := range suites {
		sl := mustSealer(t, testKey(s, 0, 6), 0)
		op := mustOpener(t, testKey(s, 0, 7))
		d, _ := sl.Seal(nil, payload(64))
		if _, err := op.Open(nil, d); err != ErrAuth {
			t.Fatalf("%v: %v, want ErrAuth", s, err)
		}
	}
	// Same key bytes, other suite.
	k := testKey(AES256GCM, 0, 8)
	sl := mustSealer(t, k, 0)
	k.Suite = ChaCha20Poly1305
	d, _ := sl.Seal(nil, payload(64))
	if _, err := mustOpener(t, k).Open(nil, d); err != ErrAuth {
		t.Fatalf("other suite: %v, want ErrAuth", err)
	}
}

// TestEpochOverlap walks through a rekey: the old epoch stays readable
// alongside the new one until DropPrevious, with separate replay windows.
func TestEpochOverlap(t *testing.T) {
	k1, k2, k3 := testKey(ChaCha20Poly1305, 1, 10), testKey(AES128GCM, 2, 11), testKey(AES256GCM, 3, 12)
	s1, s2, s3 := mustSealer(t, k1, 0), mustSealer(t, k2, 0), mustSealer(t, k3, 0)
	op := mustOpener(t, k1)
	seal := func(s *Sealer) []byte { d, _ := s.Seal(nil, payload(20)); return d }
	open := func(d []byte, want error) {
		t.Helper()
		if _, err := op.Open(nil, d); err != want {
			t.Fatalf("epoch %d counter %d: %v, want %v", d[1], binary.BigEndian.Uint64(d[4:]), err, want)
		}
	}
	a, b := seal(s1), seal(s1) // counters 0, 1 under epoch 1
	open(a, nil)
	open(seal(s2), ErrUnknownEpoch) // not installed yet
	if err := op.Install(k2); err != nil {
		t.Fatal(err)
	}
	if err := op.Install(k2); err == nil {
		t.Fatal("re-installing the current epoch must fail")
	}
	if cur, prev, ok := op.Epochs(); cur != 2 || prev != 1 || !ok {
		t.Fatalf("Epochs = %d, %d, %v", cur, prev, ok)
	}
	c := seal(s2) // counter 1 under epoch 2 (0 was refused above)
	open(c, nil)
	open(b, nil) // late epoch-1 datagram still accepted
	open(a, ErrReplayed)
	open(c, ErrReplayed)
	// A counter used in both epochs is accepted in each: separate windows.
	open(seal(s1), nil) // epoch 1, counter 2
	open(seal(s2), nil) // epoch 2, counter 2
	op.DropPrevious()
	open(seal(s1), ErrUnknownEpoch)
	if _, _, ok := op.Epochs(); ok {
		t.Fatal("previous epoch still reported after DropPrevious")
	}
	// The next rekey pushes epoch 2 to previous.
	if err := op.Install(k3); err != nil {
		t.Fatal(err)
	}
	open(seal(s3), nil)
	open(seal(s2), nil)
	open(seal(s1), ErrUnknownEpoch)
}

func TestKeyExhausted(t *testing.T) {
	k := testKey(AES128GCM, 0, 13)
	sl, op := mustSealer(t, k, 3), mustOpener(t, k)
	for i := range 3 {
		d, err := sl.Seal(nil, payload(8))
		if err != nil {
			t.Fatalf("seal %d: %v", i, err)
		}
		if _, err := op.Open(nil, d); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		dst := []byte("keep")
		d, err := sl.Seal(dst, payload(8))
		if !errors.Is(err, ErrKeyExhausted) || !bytes.Equal(d, dst) {
			t.Fatalf("seal past the limit: %q, %v", d, err)
		}
	}
	if sl.Sent() != 3 || sl.Remaining() != 0 {
		t.Fatalf("Sent %d Remaining %d, want 3 and 0", sl.Sent(), sl.Remaining())
	}
	if d := mustSealer(t, k, 0); d.Remaining() != DefaultLimit {
		t.Fatalf("default limit %d", d.Remaining())
	}
}

func TestSuitesAndKeys(t *testing.T) {
	for _, s := range suites {
		got, err := ParseSuite(s.String())
		if err != nil || got != s {
			t.Fatalf("ParseSuite(%q) = %v, %v", s.String(), got, err)
		}
		if _, err := NewSealer(Key{Suite: s, Secret: make([]byte, s.KeyLen()-1)}, 0); err == nil {
			t.Fatalf("%v accepted a short key", s)
		}
	}
	if _, err := ParseSuite("aes-192-gcm"); err == nil {
		t.Fatal("ParseSuite accepted an unknown name")
	}
	if _, err := NewOpener(Key{Suite: 0, Secret: make([]byte, 16)}); err == nil {
		t.Fatal("NewOpener accepted suite 0")
	}
	for e := ErrTooShort; e < NumErrors; e++ {
		if e.Error() == fmt.Sprintf("seal: error %d", e) {
			t.Errorf("error %d has no message", e)
		}
	}
}

// TestConcurrent seals from several goroutines and opens from several
// others: every counter must be unique and every datagram accepted once.
func TestConcurrent(t *testing.T) {
	const writers, perWriter = 4, 500
	k := testKey(AES128GCM, 0, 14)
	sl, op := mustSealer(t, k, 0), mustOpener(t, k)
	ch := make(chan []byte, writers*perWriter)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range perWriter {
				d, err := sl.Seal(nil, payload(100))
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
	var all [][]byte
	for d := range ch {
		all = append(all, d, d) // each twice: one open must fail
	}
	var accepted, replayed sync.Map
	var openers sync.WaitGroup
	for w := range writers {
		openers.Go(func() {
			for i := w; i < len(all); i += writers {
				ctr := binary.BigEndian.Uint64(all[i][4:12])
				_, err := op.Open(nil, all[i])
				switch err {
				case nil:
					if _, dup := accepted.LoadOrStore(ctr, true); dup {
						t.Errorf("counter %d accepted twice", ctr)
					}
				case ErrReplayed:
					replayed.Store(ctr, true)
				default:
					t.Error(err)
				}
			}
		})
	}
	openers.Wait()
	n := 0
	accepted.Range(func(k, _ any) bool {
		if k.(uint64) >= writers*perWriter {
			t.Errorf("counter %d beyond the number sealed", k)
		}
		n++
		return true
	})
	if n != writers*perWriter {
		t.Fatalf("%d datagrams accepted, want %d", n, writers*perWriter)
	}
}

func TestAllocationFree(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	for _, s := range suites {
		k := testKey(s, 0, 15)
		sl, op := mustSealer(t, k, 0), mustOpener(t, k)
		pt := payload(1400)
		sealed := make([]byte, 0, 2048)
		opened := make([]byte, 0, 2048)
		allocs := testing.AllocsPerRun(200, func() {
			var err error
			if sealed, err = sl.Seal(sealed[:0], pt); err != nil {
				t.Fatal(err)
			}
			if opened, err = op.Open(opened[:0], sealed); err != nil {
				t.Fatal(err)
			}
			if _, err = op.Open(opened[:0], sealed); err != ErrReplayed {
				t.Fatal(err)
			}
			sealed[20] ^= 1
			if _, err = op.Open(opened[:0], sealed); err != ErrAuth {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v: seal+open allocate %.1f times per datagram", s, allocs)
		}
	}
}

// FuzzOpen feeds arbitrary datagrams to an Opener: it must never panic,
// must agree with ParseHeader on malformed headers, and must never
// authenticate anything except the exact datagrams the Sealer produced.
func FuzzOpen(f *testing.F) {
	k := testKey(AES128GCM, 4, 16)
	sl := mustSealer(f, k, 0)
	genuine := map[string]bool{}
	for _, n := range []int{0, 1, 31, 1400} {
		d, _ := sl.Seal(nil, payload(n))
		genuine[string(d)] = true
		f.Add(d)
		bad := bytes.Clone(d)
		bad[len(bad)-1] ^= 0x80
		f.Add(bad)
	}
	f.Add([]byte{})
	f.Add(make([]byte, Overhead))
	f.Add(append([]byte{1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, make([]byte, 16)...))
	f.Add(append([]byte{2, 4, 0, 0}, make([]byte, 40)...))
	f.Fuzz(func(t *testing.T, d []byte) {
		op := mustOpener(t, k)
		orig := bytes.Clone(d)
		dst := make([]byte, 3, 8)
		out, err := op.Open(dst, d)
		if !bytes.Equal(d, orig) {
			t.Fatal("Open modified its input")
		}
		if err == nil {
			if !genuine[string(d)] {
				t.Fatalf("forged datagram authenticated: %x", d)
			}
			if len(out) != 3+len(d)-Overhead {
				t.Fatalf("plaintext length %d", len(out)-3)
			}
			return
		}
		if _, ok := err.(Error); !ok {
			t.Fatalf("error %v is not a seal.Error", err)
		}
		if len(out) != len(dst) {
			t.Fatal("failed Open extended dst")
		}
		if _, herr := ParseHeader(d); herr != nil && herr != err {
			t.Fatalf("ParseHeader says %v, Open says %v", herr, err)
		}
	})
}

func BenchmarkSeal(b *testing.B) {
	for _, s := range suites {
		for _, n := range []int{1400, 4096} {
			b.Run(fmt.Sprintf("%v/%d", s, n), func(b *testing.B) {
				sl := mustSealer(b, testKey(s, 0, 17), 0)
				pt := payload(n)
				out := make([]byte, 0, n+Overhead)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					out, _ = sl.Seal(out[:0], pt)
				}
			})
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	for _, s := range suites {
		for _, n := range []int{1400, 4096} {
			b.Run(fmt.Sprintf("%v/%d", s, n), func(b *testing.B) {
				k := testKey(s, 0, 18)
				sl := mustSealer(b, k, 0)
				// Distinct datagrams, so that every Open passes the replay
				// check; the Opener is renewed (off the clock) after each lap.
				const lap = 512
				ds := make([][]byte, lap)
				for i := range ds {
					ds[i], _ = sl.Seal(nil, payload(n))
				}
				op := mustOpener(b, k)
				out := make([]byte, 0, n)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					var err error
					if out, err = op.Open(out[:0], ds[i]); err != nil {
						b.Fatal(err)
					}
					if i++; i == lap {
						b.StopTimer()
						i, op = 0, mustOpener(b, k)
						b.StartTimer()
					}
				}
			})
		}
	}
}
