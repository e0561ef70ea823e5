//go:build linux

package datapath

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"github.com/mrgw/mrgw/units"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
)

// The baselines: raw batched UDP, and raw UDP with the AEAD envelope of
// every mrgw datagram (netio/seal, same suite) sealed by the sender and
// opened by the receiver: what any encrypted tunnel must at least spend,
// its floor. Both send the largest datagram the link MTU takes, in
// batches of 64 (one sendmmsg, GSO where the kernel has it) from one
// socket in site A to one in site B, and the receiver reads batches (GRO)
// and takes each datagram where the socket left it (udp.Conn.
// ReadBatchBorrow, as netio does): raw UDP touches no payload byte in user
// space, the floor's AEAD makes one pass over each on each side.

// socketPair opens the sender in site A at addr[0] and the receiver in
// site B at addr[1], on l.
func socketPair(l *link, opts udp.Options, addr [2]netip.Addr) (tx, rx *udp.Conn, err error) {
	oa, ob := opts, opts
	oa.ListenUDP, ob.ListenUDP = l.listenUDP(0), l.listenUDP(1)
	if tx, err = udp.Listen(netip.AddrPortFrom(addr[0], 0), oa); err != nil {
		return nil, nil, err
	}
	if rx, err = udp.Listen(netip.AddrPortFrom(addr[1], 0), ob); err != nil {
		tx.Close()
		return nil, nil, err
	}
	return tx, rx, nil
}

// floorAEAD is the envelope the floor applies: one key, as one direction
// of an mrgw tunnel has.
type floorAEAD struct {
	s *seal.Sealer
	o *seal.Opener
}

func newFloorAEAD(suite seal.Suite) (*floorAEAD, error) {
	key := seal.Key{Suite: suite, Secret: make([]byte, suite.KeyLen())}
	if _, err := crand.Read(key.Secret); err != nil {
		return nil, err
	}
	s, err := seal.NewSealer(key, 0)
	if err != nil {
		return nil, err
	}
	o, err := seal.NewOpener(key)
	if err != nil {
		return nil, err
	}
	return &floorAEAD{s: s, o: o}, nil
}

// RawUDP measures raw batched UDP on l: datagrams of the largest payload
// the link MTU takes, for d after a warm-up of d/5.
func RawUDP(ctx context.Context, l *link, opts udp.Options, d time.Duration) (Result, error) {
	tx, rx, err := socketPair(l, opts, l.addr)
	if err != nil {
		return Result{}, err
	}
	defer tx.Close()
	defer rx.Close()
	return blast(ctx, tx, rx, l.mtu-28, d, nil)
}

// RawUDPAEAD is RawUDP with every datagram sealed by the sender and opened
// by the receiver (suite's AEAD, netio/seal's envelope); the goodput is
// the plaintext.
func RawUDPAEAD(ctx context.Context, l *link, opts udp.Options, suite seal.Suite, d time.Duration) (Result, error) {
	a, err := newFloorAEAD(suite)
	if err != nil {
		return Result{}, err
	}
	tx, rx, err := socketPair(l, opts, l.addr)
	if err != nil {
		return Result{}, err
	}
	defer tx.Close()
	defer rx.Close()
	return blast(ctx, tx, rx, l.mtu-28, d, a)
}

// blastWindow bounds the bytes in flight between sender and receiver: a
// sender that outruns its receiver spends CPU (and, for the floor, a seal)
// on datagrams the receiving socket or a TUN queue then drops, which would
// count against the system; mrgw's window keeps it from doing so, and the
// baselines get the same discipline. 1 MiB is within every socket buffer
// here (4 MiB) and, in GSO super-datagrams, within a TUN device's queue.
const blastWindow = 1 << 20

// blastResync is how long the sender waits for the receiver to make room
// before it takes what is missing as lost and goes on (a datagram that
// arrives later still counts as received).
const blastResync = 50 * time.Millisecond

// blast sends datagrams of size bytes (UDP payload) from tx to rx for d
// after a warm-up of d/5, at most blastWindow bytes ahead of what rx has
// read, and returns the goodput the receiver got (with aead: the plaintext
// it opened) and the process's CPU meanwhile.
func blast(ctx context.Context, tx, rx *udp.Conn, size int, d time.Duration, aead *floorAEAD) (Result, error) {
	const batch = 64
	var got, bad, rxDgrams atomic.Uint64
	room := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		msgs := make([]udp.Message, batch)
		own := make([][]byte, batch)
		for i := range msgs {
			own[i] = make([]byte, size+64)
		}
		for {
			for i := range msgs {
				msgs[i].Buf = own[i]
			}
			n, err := rx.ReadBatchBorrow(msgs)
			if err != nil {
				return // closed
			}
			var b uint64
			for i := range msgs[:n] {
				m := &msgs[i]
				if aead == nil {
					b += uint64(m.N)
					continue
				}
				// Opened from where the socket left it into this
				// message's own buffer, as netio opens a sealed peer's
				// datagram.
				pt, err := aead.o.Open(own[i][:0], m.Buf[:m.N])
				if err != nil {
					bad.Add(1)
					continue
				}
				b += uint64(len(pt))
			}
			got.Add(b)
			rxDgrams.Add(uint64(n))
			select {
			case room <- struct{}{}:
			default:
			}
		}
	}()
	pt := size
	if aead != nil {
		pt = size - seal.Overhead
	}
	src := make([]byte, pt)
	var run seal.Run
	msgs := make([]udp.Message, batch)
	bufs := make([][]byte, batch)
	for i := range msgs {
		bufs[i] = make([]byte, size)
		msgs[i] = udp.Message{Buf: bufs[i], N: size, Addr: rx.LocalAddr()}
	}
	warm := time.Now().Add(d / 5)
	var m0 meter
	var b0 uint64
	started := false
	end := warm.Add(d)
	giveUp := end.Add(10*d + 5*time.Second)
	window := uint64(max(blastWindow/size, batch))
	var sent, lost, sent0, lost0 uint64
	resync := time.NewTimer(time.Hour)
	defer resync.Stop()
	fail := func(err error) (Result, error) {
		rx.Close()
		wg.Wait()
		return Result{}, err
	}
	for {
		now := time.Now()
		if !started && now.After(warm) {
			m0, b0, started = sample(), got.Load(), true
		}
		// The window ends at end once something has arrived in it: on a
		// busy machine the receiver can be kept off the CPU for the whole
		// of a short window, which says nothing about the datapath. A
		// receiver that never gets anything still ends the run (giveUp).
		if ctx.Err() != nil || now.After(end) && (got.Load() != b0 || now.After(giveUp)) {
			break
		}
		if !started {
			sent0, lost0 = sent, lost
		}
		if sent-lost-rxDgrams.Load() > window {
			resync.Reset(blastResync)
			select {
			case <-room:
			case <-resync.C:
				// What has not arrived by now is lost.
				lost = sent - rxDgrams.Load()
			case <-ctx.Done():
			}
			continue
		}
		if aead != nil {
			// The batch's counters reserved at once, as mrgw's senders
			// take them (netio.RunSealer): the floor seals the cheapest
			// way the envelope allows.
			aead.s.Reserve(&run, len(msgs))
			for i := range msgs {
				out, err := run.Seal(bufs[i][:0], src)
				if err != nil {
					return fail(err)
				}
				msgs[i].Buf, msgs[i].N = out, len(out)
			}
		}
		n, err := tx.WriteBatch(msgs)
		if err != nil && !errors.Is(err, syscall.ENOBUFS) {
			return fail(err)
		}
		sent += uint64(n)
	}
	m1, b1 := sample(), got.Load()
	rx.Close()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	secs := m1.wall.Sub(m0.wall).Seconds()
	r := Result{
		bps: float64(units.Throughput(float64(b1-b0), secs)), cpu: (m1.cpu - m0.cpu).Seconds() / secs, sys: (m1.sys - m0.sys).Seconds() / secs,
		gso: tx.Stats().GSO, gro: rx.Stats().GRO, sent: sent - sent0, lost: lost - lost0,
	}
	if b1 == b0 {
		return r, errors.New("nothing arrived during the measurement")
	}
	if k := bad.Load(); k > 0 && aead != nil {
		return r, fmt.Errorf("%d datagrams failed to open", k)
	}
	return r, nil
}
