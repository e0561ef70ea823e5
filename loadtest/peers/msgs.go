//go:build linux

package peers

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netem"

	"github.com/mrgw/mrgw/internal/tcpcc"
	"github.com/mrgw/mrgw/units"
)

// MessageSizes is the completion-time scenario's grid, with how many
// messages of each size are timed (each series also stops at its time
// budget).
var MessageSizes = []struct {
	Bytes int
	Count int
}{{1 << 20, 20}, {4 << 20, 10}, {16 << 20, 5}, {64 << 20, 3}}

// Limits of the completion-time scenario.
const (
	msgTimeout   = 30 * time.Second // one message
	seriesBudget = 60 * time.Second // one system and size
)

// msgTimer times messages sent one at a time: send(n) starts a message of
// n bytes and returns when the receiver has all of it, or an error.
type msgTimer struct {
	send  func(ctx context.Context, n int) error
	close func()
	cc    string
	emu   string
}

// streamTimer times length-prefixed messages on one ordered byte stream
// (TCP, a QUIC stream, a kcp session): head-of-line blocking included. stop
// ends its reader goroutine (call it after closing the stream).
func streamTimer(w io.Writer, r io.Reader, maxLen int) (send func(ctx context.Context, n int) error, stop func()) {
	done := make(chan error, 1)
	req := make(chan int, 1)
	go func() {
		buf := make([]byte, 256<<10)
		var hdr [8]byte
		for n := range req {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				done <- err
				return
			}
			left := int(binary.BigEndian.Uint64(hdr[:]))
			if left != n {
				done <- fmt.Errorf("message of %d bytes, want %d", left, n)
				return
			}
			for left > 0 {
				k, err := r.Read(buf[:min(left, len(buf))])
				left -= k
				if err != nil && left > 0 {
					done <- err
					return
				}
			}
			done <- nil
		}
	}()
	payload := make([]byte, maxLen)
	var once sync.Once
	stop = func() { once.Do(func() { close(req) }) }
	send = func(ctx context.Context, n int) error {
		req <- n
		var hdr [8]byte
		binary.BigEndian.PutUint64(hdr[:], uint64(n))
		werr := make(chan error, 1)
		go func() {
			if _, err := w.Write(hdr[:]); err != nil {
				werr <- err
				return
			}
			_, err := w.Write(payload[:n])
			werr <- err
		}()
		select {
		case err := <-done:
			return err
		case err := <-werr:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return send, stop
}

func newTimer(ctx context.Context, p Peer, l Link, o Options, maxLen int) (*msgTimer, error) {
	switch p.System {
	case TCPCubic, TCPBBR:
		te, err := tunemu.New(ctx, l.tunConfig())
		if err != nil {
			return nil, err
		}
		acc := make(chan net.Conn, 1)
		tp, err := dialTCP(ctx, te, p.System[len("tcp-"):], 1, func(c net.Conn) { acc <- c })
		if err != nil {
			te.Close()
			return nil, err
		}
		srv := <-acc
		cc, _ := tcpcc.Info(tp.conns[0])
		send, stop := streamTimer(tp.conns[0], srv, maxLen)
		return &msgTimer{send: send, cc: cc, emu: EmuTUN,
			close: func() { tp.close(); te.Close(); stop() }}, nil
	case QUIC:
		te, err := tunemu.New(ctx, l.tunConfig())
		if err != nil {
			return nil, err
		}
		q, err := dialQUIC(ctx, te)
		if err != nil {
			te.Close()
			return nil, err
		}
		s, err := q.cli.OpenStreamSync(ctx)
		if err == nil {
			_, err = s.Write([]byte{0}) // the peer sees a stream once it carries data
		}
		if err != nil {
			q.close()
			te.Close()
			return nil, err
		}
		rs, err := q.srv.AcceptStream(ctx)
		if err != nil {
			q.close()
			te.Close()
			return nil, err
		}
		var one [1]byte
		io.ReadFull(rs, one[:])
		send, stop := streamTimer(s, rs, maxLen)
		return &msgTimer{send: send, cc: "quic-go", emu: EmuTUN,
			close: func() { q.close(); te.Close(); stop() }}, nil
	case KCP:
		kp, acc, err := dialKCP(ctx, l)
		if err != nil {
			return nil, err
		}
		if _, err := kp.cli.Write([]byte{0}); err != nil {
			kp.close()
			return nil, err
		}
		if err := <-acc; err != nil {
			kp.close()
			return nil, err
		}
		var one [1]byte
		io.ReadFull(kp.srv, one[:])
		send, stop := streamTimer(kp.cli, kp.srv, maxLen)
		return &msgTimer{send: send, cc: "kcp-fast3", emu: EmuUDP, close: func() { kp.close(); stop() }}, nil
	case MRGW, RoCEv2:
		return tunnelTimer(ctx, p.System == RoCEv2, l, o, maxLen)
	}
	return nil, fmt.Errorf("peers: unknown system %q", p.System)
}

// tunnelTimer times WRITEs through two tunnels over emu: a message is
// complete when the receiver reports it placed (EventRecvComplete).
func tunnelTimer(ctx context.Context, rocev2 bool, l Link, o Options, maxLen int) (*msgTimer, error) {
	em, err := netem.New(ctx, l.emuConfig())
	if err != nil {
		return nil, err
	}
	protoA, ccName, err := protocol(rocev2, l, o, false)
	if err != nil {
		em.Close()
		return nil, err
	}
	protoB, _, _ := protocol(rocev2, l, o, true)
	src := make([]byte, maxLen)
	dst := make([]byte, maxLen)
	done := make(chan error, 4)
	connected := make(chan struct{}, 1)
	onA := func(_ time.Duration, ev metaroce.Event) {
		if ev.Kind == metaroce.EventConnected {
			select {
			case connected <- struct{}{}:
			default:
			}
		}
	}
	onB := func(_ time.Duration, ev metaroce.Event) {
		if ev.Kind == metaroce.EventRecvComplete {
			select {
			case done <- ev.Err:
			default:
			}
		}
	}
	p, err := newTunnelPair(ctx, emuNet{em, l.IPMTU()}, protoA, protoB, onA, onB)
	if err != nil {
		em.Close()
		return nil, err
	}
	closeAll := func() { p.close(); em.Close() }
	var regErr error
	if err := p.b.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { regErr = ep.Memory().Register(1, dst) }); err != nil || regErr != nil {
		closeAll()
		return nil, errors.Join(err, regErr)
	}
	c, err := p.a.Connect(ctx)
	if err != nil {
		closeAll()
		return nil, err
	}
	select {
	case <-connected:
	case <-ctx.Done():
		closeAll()
		return nil, ctx.Err()
	}
	send := func(ctx context.Context, n int) error {
		if _, err := p.a.Endpoint().Write(ctx, c, 0, 1, 0, src[:n]); err != nil {
			return err
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return &msgTimer{send: send, cc: ccName, emu: EmuUDP, close: closeAll}, nil
}

// CompletionTime times messages of 1, 4, 16 and 64 MiB sent one at a time
// at 1% loss and the first of Options.RTTs (default 50 ms here) on one
// plane of CapacityBps: TCP (one stream, length-prefixed messages: head-of-
// line blocking), QUIC (one stream), kcp (one session) against mrgw
// WRITEs (complete when placed at the receiver) and the RoCEv2 baseline.
// The first message of each series warms the connection up and is not
// counted. Each message is bounded by 30 s and each series by 60 s; a
// message that misses its bound ends its series and is counted as
// Incomplete. Duration: at most ~4 minutes per system (typically 1-2).
func CompletionTime(ctx context.Context, o Options) ([]report.Row, error) {
	if len(o.RTTs) == 0 {
		o.RTTs = []time.Duration{50 * time.Millisecond}
	}
	if len(o.Losses) == 0 {
		o.Losses = []float64{0.01}
	}
	if len(o.TCPStreams) == 0 {
		o.TCPStreams = []int{1}
	}
	o = o.withDefaults()
	o.MRGWExtraCC = ""
	sizes := slices.Clone(MessageSizes)
	if o.Quick {
		sizes = sizes[:1]
		sizes[0].Count = 3
	}
	l := o.link(1, o.CapacityBps, o.RTTs[0], o.Losses[0])
	ps := o.peers()
	var rows []report.Row
	var sk skipped
	for i, p := range ps {
		if p.System == QUIC {
			p.Streams = 1
		}
		o.progress(i+1, len(ps), fmt.Sprintf("completion-time %s rtt=%v loss=%g", p, l.RTT, l.Loss))
		if needsTUN(p.System) && sk.err != nil {
			continue
		}
		got, err := timeSeries(ctx, p, l, o, sizes)
		if sk.add(err) {
			continue
		}
		if err != nil {
			return finish(rows, fmt.Errorf("peers: completion-time %s: %w", p, err), &sk)
		}
		rows = append(rows, got...)
	}
	// Ratios to mrgw per size.
	for k := range rows {
		for _, m := range rows {
			if m.System == MRGW && m.MessageBytes == rows[k].MessageBytes && rows[k].System != MRGW {
				if m.P50ms > 0 && rows[k].Messages > 0 {
					rows[k].P50Ratio = rows[k].P50ms / m.P50ms
					rows[k].P99Ratio = rows[k].P99ms / m.P99ms
				}
			}
		}
	}
	return finish(rows, nil, &sk)
}

func timeSeries(ctx context.Context, p Peer, l Link, o Options, sizes []struct{ Bytes, Count int }) ([]report.Row, error) {
	maxLen := 0
	for _, s := range sizes {
		maxLen = max(maxLen, s.Bytes)
	}
	mt, err := newTimer(ctx, p, l, o, maxLen)
	if err != nil {
		return nil, err
	}
	defer mt.close()
	// Warm-up message (not counted).
	wctx, cancel := context.WithTimeout(ctx, msgTimeout)
	err = mt.send(wctx, sizes[0].Bytes)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("warm-up message: %w", err)
	}
	var rows []report.Row
	broken := false
	for _, s := range sizes {
		rw := row("peers-completion-time", p, l, Result{CC: mt.cc, Emulator: mt.emu})
		rw.MessageBytes = int64(s.Bytes)
		var ts []time.Duration
		budget := time.Now().Add(seriesBudget)
		for k := 0; k < s.Count && !broken; k++ {
			if time.Now().After(budget) {
				rw.Note = report.JoinNote(rw.Note, fmt.Sprintf("series budget %v reached after %d messages", seriesBudget, len(ts)))
				break
			}
			mctx, cancel := context.WithTimeout(ctx, msgTimeout)
			t0 := time.Now()
			err := mt.send(mctx, s.Bytes)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return rows, ctx.Err()
				}
				rw.Incomplete++
				rw.Note = report.JoinNote(rw.Note, fmt.Sprintf("message not complete within %v (%v); series ended", msgTimeout, err))
				broken = true // the stream still holds its bytes
				break
			}
			ts = append(ts, time.Since(t0))
		}
		if broken && len(ts) == 0 && rw.Incomplete == 0 {
			rw.Incomplete = s.Count
			rw.Note = report.JoinNote(rw.Note, "not run: an earlier message did not complete")
		}
		slices.Sort(ts)
		rw.Messages = len(ts)
		rw.P50ms = float64(report.Quantile(ts, 0.5)) / 1e6
		rw.P99ms = float64(report.Quantile(ts, 0.99)) / 1e6
		var total time.Duration
		for _, t := range ts {
			total += t
		}
		if total > 0 {
			rw.GoodputBps = float64(units.Throughput(float64(len(ts)*s.Bytes), total.Seconds()))
			rw.Fraction = rw.GoodputBps / l.Capacity()
		}
		if p.System == MRGW {
			rw.Paths = o.Paths
		}
		rows = append(rows, rw)
	}
	return rows, nil
}
