//go:build linux

package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/ecn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var loop4 = netip.MustParseAddrPort("127.0.0.1:0")
var loop6 = netip.MustParseAddrPort("[::1]:0")

// open listens on local, skipping the test when ::1 is missing, and gives
// the socket a receive buffer big enough that a test's whole burst fits:
// loopback drops nothing then, so tests can demand every datagram.
func open(t testing.TB, local netip.AddrPort, opts Options) *Conn {
	t.Helper()
	c, err := Listen(local, opts)
	if err != nil {
		if local.Addr().Is6() {
			t.Skipf("IPv6 loopback ::1 unavailable on this machine: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc, _ := c.udp.SyscallConn()
	rc.Control(func(fd uintptr) {
		// SO_RCVBUFFORCE ignores rmem_max (we run as root); fall back to
		// the capped option otherwise.
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<20)
		}
	})
	return c
}

// datagram builds payload i of length n: an 8-byte sequence number, then a
// pattern that depends on both, so any mix-up shows.
func datagram(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + j*3)
	}
	if n >= 8 {
		binary.BigEndian.PutUint64(b, uint64(i))
	}
	return b
}

// workload is a mix that exercises the packer: runs of equal sizes with a
// short tail, single odd sizes, a size change mid-run, and ECN changes.
func workload(dst netip.AddrPort) []Message {
	var msgs []Message
	add := func(n int, cp ecn.Codepoint) {
		b := datagram(len(msgs), n)
		msgs = append(msgs, Message{Buf: b, N: n, Addr: dst, ECN: cp})
	}
	for range 40 {
		add(1400, 0)
	}
	add(700, 0) // short tail of the run above
	for range 10 {
		add(1200, ecn.CE)
	}
	for _, n := range []int{100, 1500, 9000, 64, 1400, 33} {
		add(n, ecn.ECT1)
	}
	for range 130 { // longer than one GSO send
		add(500, 0)
	}
	for range 5 {
		add(1400, ecn.ECT0)
	}
	return msgs
}

// receive reads until want datagrams arrived (or a deadline passes) and
// returns them keyed by sequence number.
func receive(t *testing.T, c *Conn, want int, bufSize, batch int) map[uint64]Message {
	t.Helper()
	got := map[uint64]Message{}
	msgs := make([]Message, batch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, bufSize)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for calls := 0; len(got) < want && calls < 10*want; calls++ {
		n, err := c.ReadBatch(msgs)
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", len(got), want, err)
		}
		for _, m := range msgs[:n] {
			if m.N < 8 {
				t.Fatalf("datagram of %d bytes", m.N)
			}
			seq := binary.BigEndian.Uint64(m.Buf)
			if _, dup := got[seq]; dup {
				t.Fatalf("datagram %d received twice", seq)
			}
			m.Buf = bytes.Clone(m.Buf[:m.N])
			got[seq] = m
		}
	}
	return got
}

// TestRoundTrip sends the mixed workload with every combination of GSO and
// GRO, over IPv4 and IPv6, and checks each datagram byte for byte, with
// its sender and its ECN codepoint.
func TestRoundTrip(t *testing.T) {
	for _, local := range []netip.AddrPort{loop4, loop6} {
		for _, gso := range []bool{false, true} {
			for _, gro := range []bool{false, true} {
				name := fmt.Sprintf("%v/gso=%v/gro=%v", local.Addr(), gso, gro)
				t.Run(name, func(t *testing.T) {
					tx := open(t, local, Options{DisableGSO: !gso})
					rx := open(t, local, Options{DisableGRO: !gro})
					if gso && !tx.Stats().GSO || gro && !rx.Stats().GRO {
						t.Skip("the kernel does not offer UDP GSO/GRO")
					}
					msgs := workload(rx.LocalAddr())
					n, err := tx.WriteBatch(msgs)
					if err != nil || n != len(msgs) {
						t.Fatalf("WriteBatch = %d, %v; want %d", n, err, len(msgs))
					}
					got := receive(t, rx, len(msgs), 9000, 16)
					for i, m := range msgs {
						g, ok := got[uint64(i)]
						if !ok {
							t.Fatalf("datagram %d lost", i)
						}
						if !bytes.Equal(g.Buf, m.Buf[:m.N]) {
							t.Fatalf("datagram %d: %d bytes differ from the %d sent", i, len(g.Buf), m.N)
						}
						if g.Addr != tx.LocalAddr() {
							t.Fatalf("datagram %d from %v, want %v", i, g.Addr, tx.LocalAddr())
						}
						if want := resolveECN(m.ECN, ecn.ECT0); g.ECN != want {
							t.Fatalf("datagram %d: ECN %v, want %v", i, g.ECN, want)
						}
					}
					ts, rs := tx.Stats(), rx.Stats()
					if ts.DatagramsOut != uint64(len(msgs)) || rs.DatagramsIn != uint64(len(msgs)) || ts.BytesOut != rs.BytesIn {
						t.Fatalf("stats: out %d/%dB in %d/%dB", ts.DatagramsOut, ts.BytesOut, rs.DatagramsIn, rs.BytesIn)
					}
					if rs.CEIn != 10 {
						t.Fatalf("CEIn %d, want 10", rs.CEIn)
					}
					if gso != (ts.GSOSends > 0) {
						t.Fatalf("GSO %v but %d GSO sends", gso, ts.GSOSends)
					}
					// Loopback hands a GSO send to a GRO socket whole.
					if gso && gro && rs.GROReads == 0 {
						t.Fatal("GSO to a GRO socket produced no GRO reads")
					}
					if !gro && rs.GROReads != 0 {
						t.Fatal("GRO reads with GRO off")
					}
				})
			}
		}
	}
}

// TestNotECTOption checks the Conn default: Not-ECT when asked for, and a
// per-message codepoint still wins.
func TestNotECTOption(t *testing.T) {
	tx := open(t, loop4, Options{NotECT: true})
	rx := open(t, loop4, Options{})
	msgs := []Message{
		{Buf: datagram(0, 100), N: 100, Addr: rx.LocalAddr()},
		{Buf: datagram(1, 100), N: 100, Addr: rx.LocalAddr(), ECN: ecn.ECT1},
	}
	if _, err := tx.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	got := receive(t, rx, 2, 2048, 4)
	if got[0].ECN != ecn.NotECT || got[1].ECN != ecn.ECT1 {
		t.Fatalf("ECN %v, %v; want Not-ECT, ECT(1)", got[0].ECN, got[1].ECN)
	}
}

// TestGROSplitAcrossCalls reads a 40-segment GRO buffer two messages at a
// time: the rest must come out of later calls, in order, with no syscall
// losing any of it.
func TestGROSplitAcrossCalls(t *testing.T) {
	tx := open(t, loop4, Options{})
	rx := open(t, loop4, Options{})
	if !tx.Stats().GSO || !rx.Stats().GRO {
		t.Skip("the kernel does not offer UDP GSO/GRO")
	}
	var msgs []Message
	for i := range 40 {
		msgs = append(msgs, Message{Buf: datagram(i, 1000), N: 1000, Addr: rx.LocalAddr()})
	}
	if _, err := tx.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	got := receive(t, rx, len(msgs), 1000, 2)
	for i := range msgs {
		if !bytes.Equal(got[uint64(i)].Buf, msgs[i].Buf) {
			t.Fatalf("datagram %d differs", i)
		}
	}
	if s := rx.Stats(); s.GROReads == 0 {
		t.Fatalf("no GRO read: %+v", s)
	}
}

// TestGSOFallback makes the kernel refuse GSO (a socket with SO_NO_CHECK
// may not send UDP_SEGMENT: EINVAL) and checks that WriteBatch turns GSO
// off, counts it once, and still delivers every datagram.
func TestGSOFallback(t *testing.T) {
	tx := open(t, loop4, Options{})
	rx := open(t, loop4, Options{})
	if !tx.Stats().GSO {
		t.Skip("the kernel does not offer UDP GSO")
	}
	rc, _ := tx.udp.SyscallConn()
	var serr error
	rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) })
	if serr != nil {
		t.Skipf("SO_NO_CHECK: %v", serr)
	}
	msgs := workload(rx.LocalAddr())
	n, err := tx.WriteBatch(msgs)
	if err != nil || n != len(msgs) {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	s := tx.Stats()
	if s.GSO || s.GSOFallbacks != 1 || s.GSOSends != 0 || s.DatagramsOut != uint64(len(msgs)) {
		t.Fatalf("after fallback: %+v", s)
	}
	got := receive(t, rx, len(msgs), 9000, 32)
	for i, m := range msgs {
		if !bytes.Equal(got[uint64(i)].Buf, m.Buf[:m.N]) {
			t.Fatalf("datagram %d differs", i)
		}
	}
	// Later batches go out without GSO and without further fallbacks.
	if _, err := tx.WriteBatch(msgs[:3]); err != nil {
		t.Fatal(err)
	}
	if s := tx.Stats(); s.GSOFallbacks != 1 || s.GSOSends != 0 {
		t.Fatalf("second batch: %+v", s)
	}
	receive(t, rx, 3, 2048, 4)
}

func TestTruncated(t *testing.T) {
	for _, gro := range []bool{false, true} {
		tx := open(t, loop4, Options{})
		rx := open(t, loop4, Options{DisableGRO: !gro})
		msgs := []Message{{Buf: datagram(0, 1000), N: 1000, Addr: rx.LocalAddr()}}
		if _, err := tx.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
		in := []Message{{Buf: make([]byte, 100)}}
		rx.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := rx.ReadBatch(in)
		if err != nil || n != 1 {
			t.Fatal(n, err)
		}
		if !bytes.Equal(in[0].Buf[:min(in[0].N, 100)], msgs[0].Buf[:100]) || rx.Stats().Truncated != 1 {
			t.Fatalf("gro=%v: N %d, truncated %d", gro, in[0].N, rx.Stats().Truncated)
		}
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	c := open(t, loop4, Options{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.ReadBatch([]Message{{Buf: make([]byte, 10)}})
		errc <- err
	}()
	// Close may run before the goroutine blocks; either way it must return.
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadBatch still blocked after Close")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestListenAddresses(t *testing.T) {
	c := open(t, loop4, Options{})
	if a := c.LocalAddr(); !a.Addr().Is4() || a.Port() == 0 {
		t.Fatalf("LocalAddr %v: want 127.0.0.1 and an ephemeral port", a)
	}
	d := open(t, loop4, Options{})
	if c.LocalAddr().Port() == d.LocalAddr().Port() {
		t.Fatal("two paths got the same source port")
	}
	if _, err := Listen(c.LocalAddr(), Options{}); err == nil {
		t.Fatal("listening twice on one port succeeded")
	}
}

// TestConcurrentWriters has several goroutines share one Conn, as several
// senders share one path.
func TestConcurrentWriters(t *testing.T) {
	tx := open(t, loop4, Options{})
	rx := open(t, loop4, Options{})
	const writers, per = 4, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			msgs := make([]Message, per)
			for i := range msgs {
				seq := w*per + i
				msgs[i] = Message{Buf: datagram(seq, 1200), N: 1200, Addr: rx.LocalAddr()}
			}
			if _, err := tx.WriteBatch(msgs); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := receive(t, rx, writers*per, 2048, 8)
	if len(got) != writers*per {
		t.Fatalf("%d of %d", len(got), writers*per)
	}
}

// TestWriteBatchAllocationFree checks that steady-state sends allocate
// nothing, with and without GSO.
func TestWriteBatchAllocationFree(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	for _, gso := range []bool{false, true} {
		tx := open(t, loop4, Options{DisableGSO: !gso})
		rx := open(t, loop4, Options{})
		msgs := make([]Message, 32)
		for i := range msgs {
			msgs[i] = Message{Buf: datagram(i, 1400), N: 1400, Addr: rx.LocalAddr()}
		}
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := tx.WriteBatch(msgs); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("gso=%v: WriteBatch allocates %.1f times per batch", gso, allocs)
		}
	}
}

// TestReadBatchAllocationFree checks that steady-state receives allocate
// nothing, with and without GRO, over IPv4 and IPv6: ReadBatch uses its own
// recvmmsg with preallocated headers and decodes the sender's address
// without a net.UDPAddr.
func TestReadBatchAllocationFree(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool (in x/net's sendmmsg) drops items at random under the race detector")
	}
	for _, local := range []netip.AddrPort{loop4, netip.MustParseAddrPort("[::1]:0")} {
		for _, gro := range []bool{false, true} {
			tx, err := Listen(local, Options{DisableGSO: true})
			if err != nil {
				if local.Addr().Is6() {
					t.Logf("no IPv6 loopback: %v", err)
					continue
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { tx.Close() })
			rx := open(t, local, Options{DisableGRO: !gro, ReadBuffer: 1 << 20})
			out := make([]Message, 16)
			for i := range out {
				out[i] = Message{Buf: datagram(i, 1400), N: 1400, Addr: rx.LocalAddr()}
			}
			in := make([]Message, 16)
			for i := range in {
				in[i].Buf = make([]byte, 2048)
			}
			var got int
			allocs := testing.AllocsPerRun(20, func() {
				// Loopback delivers within sendmmsg, so the reads below
				// find every datagram queued and never wait.
				if _, err := tx.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				for n := 0; n < len(out); {
					k, err := rx.ReadBatch(in[:len(out)-n])
					if err != nil {
						t.Fatal(err)
					}
					for _, m := range in[:k] {
						if m.Addr != tx.LocalAddr() || m.N != 1400 {
							t.Fatalf("got %d bytes from %v, want 1400 from %v", m.N, m.Addr, tx.LocalAddr())
						}
					}
					n += k
					got += k
				}
			})
			if allocs != 0 {
				t.Errorf("%v gro=%v: a batch of %d sent and received allocates %.1f times", local.Addr(), gro, len(out), allocs)
			}
			if got == 0 {
				t.Fatal("nothing received")
			}
		}
	}
}

// TestReadBatchBorrow: with GRO, coalesced datagrams are handed out where
// the Conn holds them, byte-exact and in order, and a Conn without GRO
// still reads into the caller's buffers.
func TestReadBatchBorrow(t *testing.T) {
	for _, gro := range []bool{true, false} {
		tx := open(t, loop4, Options{})
		rx := open(t, loop4, Options{DisableGRO: !gro})
		if gro && (!tx.Stats().GSO || !rx.Stats().GRO) {
			t.Log("no GSO/GRO here")
			continue
		}
		out := make([]Message, 20)
		for i := range out {
			out[i] = Message{Buf: datagram(i, 1000), N: 1000, Addr: rx.LocalAddr()}
		}
		if _, err := tx.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		in := make([]Message, 8)
		bufs := make([][]byte, len(in))
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		borrowed := 0
		for got := 0; got < len(out); {
			for i := range in {
				in[i].Buf = bufs[i]
			}
			n, err := rx.ReadBatchBorrow(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range in[:n] {
				if !bytes.Equal(m.Buf[:m.N], out[got].Buf) {
					t.Fatalf("gro=%v: datagram %d differs", gro, got)
				}
				if m.Addr != tx.LocalAddr() {
					t.Fatalf("gro=%v: from %v, want %v", gro, m.Addr, tx.LocalAddr())
				}
				if !slices.ContainsFunc(bufs, func(b []byte) bool { return &b[0] == &m.Buf[0] }) {
					borrowed++
				}
				got++
			}
		}
		t.Logf("gro=%v: %d of %d datagrams lent, %d coalesced reads", gro, borrowed, len(out), rx.Stats().GROReads)
		if gro && rx.Stats().GROReads > 0 && borrowed == 0 {
			t.Error("coalesced datagrams were copied, not lent")
		}
		if !gro && borrowed != 0 {
			t.Errorf("%d datagrams lent without GRO", borrowed)
		}
	}
}

// FuzzPlanGSO checks the packer's invariants on arbitrary size sequences:
// groups cover the messages in order, and each group is exactly what the
// kernel would cut back into the same datagrams.
func FuzzPlanGSO(f *testing.F) {
	f.Add([]byte{14, 14, 14, 7, 0, 3, 3, 200}, uint8(128), uint16(maxGSOBytes))
	f.Add([]byte{1, 1, 1, 1, 1}, uint8(2), uint16(3))
	f.Add([]byte{0, 0, 5, 5, 5, 0}, uint8(1), uint16(100))
	a := netip.MustParseAddrPort("192.0.2.1:1")
	b := netip.MustParseAddrPort("192.0.2.2:1")
	f.Fuzz(func(t *testing.T, spec []byte, maxSegs uint8, maxBytes uint16) {
		msgs := make([]Message, 0, len(spec))
		for _, s := range spec {
			m := Message{N: int(s&0x1f) * 50, Addr: a, ECN: ecn.Codepoint(s >> 5 & 3)}
			if s&0x80 != 0 {
				m.Addr = b
			}
			msgs = append(msgs, m)
		}
		groups := planGSO(nil, msgs, int(maxSegs), int(maxBytes), ecn.ECT0)
		next := 0
		for _, g := range groups {
			if g.start != next || g.count < 1 {
				t.Fatalf("group %+v does not follow message %d", g, next)
			}
			next += g.count
			run := msgs[g.start : g.start+g.count]
			if g.count == 1 {
				continue
			}
			if int(maxSegs) < g.count || g.bytes > int(maxBytes) || g.segSize != run[0].N || g.segSize == 0 {
				t.Fatalf("group %+v breaks a limit", g)
			}
			for i, m := range run {
				last := i == len(run)-1
				if m.Addr != run[0].Addr || resolveECN(m.ECN, ecn.ECT0) != g.ecn ||
					m.N == 0 || m.N > g.segSize || (!last && m.N != g.segSize) {
					t.Fatalf("group %+v: member %d (%d bytes) cannot be a segment", g, i, m.N)
				}
			}
		}
		if next != len(msgs) {
			t.Fatalf("groups cover %d of %d messages", next, len(msgs))
		}
	})
}
