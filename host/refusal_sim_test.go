//go:build linux

package host

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/metaroce"
)

// simOpenFlow registers the host at both simulated gateways (one-way
// delays of 0.5 ms: datagrams keep their order, so a refusal reaches the
// host before the acknowledgement that follows it) and opens a flow
// through one of them.
func simOpenFlow(t *testing.T, cfg Config) (*simWorld, *Flow) {
	t.Helper()
	w := newSimWorld(t, cfg, func(*rand.Rand) time.Duration { return 500 * time.Microsecond })
	w.run(200 * time.Millisecond)
	if n := w.h.readyCount(); n != 2 {
		t.Fatalf("%d gateways ready, want 2", n)
	}
	f := &Flow{h: w.h, id: 42, dstRegion: "us", dstEndpoint: "dst", openRes: make(chan error, 1), lostAt: -1}
	w.h.o.flows[f.id] = f
	f.tryOpen(w.now)
	w.run(w.now + 50*time.Millisecond)
	if f.state != flowOpen {
		t.Fatalf("flow state %d, want open", f.state)
	}
	return w, f
}

func (w *simWorld) opens() int {
	n := 0
	for _, g := range w.gws {
		n += len(g.opens)
	}
	return n
}

// runUntilFailed advances simulated time until the flow fails or end.
func (w *simWorld) runUntilFailed(f *Flow, end time.Duration) {
	for w.now < end && f.state != flowFailed {
		w.run(w.now + 10*time.Millisecond)
	}
}

// TestGoneDestinationFailsAfterGoneAfter: the route of an open flow is
// lost and every gateway then answers its OPEN with unknown endpoint (the
// receiver exited). The flow fails with ErrEndpointGone, naming the
// destination, once that has lasted GoneAfter, and long before FailAfter.
// Before, it re-opened with backoff for FailAfter (30 s) and ended with
// "flow has no route for 30s: flow refused: unknown endpoint".
func TestGoneDestinationFailsAfterGoneAfter(t *testing.T) {
	w, f := simOpenFlow(t, Config{})
	cfg := w.h.cfg
	for _, g := range w.gws {
		g.refuseOpen = flowctl.CodeUnknownEndpoint
	}
	w.gws[f.gw.idx].send(t, w.now, &flowctl.Msg{Type: flowctl.Reset, Flow: f.id, Code: flowctl.CodeRouteLost})
	lost := w.now
	w.runUntilFailed(f, lost+cfg.FailAfter+time.Second)
	if f.state != flowFailed {
		t.Fatalf("flow state %d %v after the destination went away, want failed", f.state, w.now-lost)
	}
	took := w.now - lost
	t.Logf("failed %v after the route was lost, %d OPENs: %v", took, w.opens(), f.err)
	if !errors.Is(f.err, ErrEndpointGone) {
		t.Fatalf("flow error %v, want ErrEndpointGone", f.err)
	}
	var fe *flowctl.Error
	if !errors.As(f.err, &fe) || fe.Code != flowctl.CodeUnknownEndpoint {
		t.Fatalf("flow error %v does not carry the refusal", f.err)
	}
	if want := "us/dst is not registered at any gateway of us"; !strings.Contains(f.err.Error(), want) {
		t.Fatalf("flow error %q does not say %q", f.err, want)
	}
	if took < cfg.GoneAfter || took > cfg.GoneAfter+cfg.ReconnectMax+100*time.Millisecond {
		t.Fatalf("failed %v after the route was lost, want GoneAfter %v to GoneAfter+ReconnectMax", took, cfg.GoneAfter)
	}
}

// TestDestinationBackWithinGoneAfterKeepsFlow: the destination is unknown
// for less than GoneAfter (its gateway restarted and it registers again):
// the flow re-opens and every message is DONE.
func TestDestinationBackWithinGoneAfterKeepsFlow(t *testing.T) {
	w, f := simOpenFlow(t, Config{})
	for _, g := range w.gws {
		g.refuseOpen = flowctl.CodeUnknownEndpoint
	}
	w.gws[f.gw.idx].send(t, w.now, &flowctl.Msg{Type: flowctl.Reset, Flow: f.id, Code: flowctl.CodeRouteLost})
	w.run(w.now + w.h.cfg.GoneAfter/2)
	if f.state == flowFailed {
		t.Fatalf("flow failed within GoneAfter/2: %v", f.err)
	}
	for _, g := range w.gws {
		g.refuseOpen = 0
	}
	p := &Pending{done: make(chan struct{})}
	f.enqueue(w.now, &seg{op: metaroce.OpWrite, key: 1, data: make([]byte, 1000), pend: p})
	p.sealed = true
	w.run(w.now + w.h.cfg.ReconnectMax + time.Second)
	if f.state != flowOpen {
		t.Fatalf("flow state %d (%v), want open again", f.state, f.err)
	}
	if err := p.Err(); err != nil || f.doneBelow != f.nextSeq {
		t.Fatalf("message: %v, DONE below %d of %d", err, f.doneBelow, f.nextSeq)
	}
}

// TestRefusedMessageFailsFlowAtOnce: the destination refuses a message
// (its memory key is unknown: the receiver deregistered it) and resets the
// flow. The flow fails at once with ErrMessageRefused, naming the
// destination and saying what to check, without re-opening.
func TestRefusedMessageFailsFlowAtOnce(t *testing.T) {
	w, f := simOpenFlow(t, Config{})
	for _, g := range w.gws {
		g.resetData = true
	}
	p := &Pending{done: make(chan struct{})}
	f.enqueue(w.now, &seg{op: metaroce.OpWrite, key: 9, data: make([]byte, 1000), pend: p})
	p.sealed = true
	w.runUntilFailed(f, w.now+time.Second)
	if f.state != flowFailed {
		t.Fatalf("flow state %d, want failed", f.state)
	}
	t.Log(f.err)
	if n := w.opens(); n != 1 {
		t.Fatalf("%d OPENs, want 1: a refused message re-opened the flow", n)
	}
	var fe *flowctl.Error
	if !errors.Is(f.err, ErrMessageRefused) || !errors.As(f.err, &fe) || fe.Code != flowctl.CodeBadRequest {
		t.Fatalf("flow error %v, want ErrMessageRefused wrapping the bad-request RESET", f.err)
	}
	for _, want := range []string{"us/dst refused the flow", "check the memory key"} {
		if !strings.Contains(f.err.Error(), want) {
			t.Fatalf("flow error %q does not say %q", f.err, want)
		}
	}
	if !errors.Is(p.Err(), ErrMessageRefused) {
		t.Fatalf("message error %v, want ErrMessageRefused", p.Err())
	}
}

// TestHopRefusalReroutes: a gateway refuses a message on its hop as not
// relayed (what a gateway answers for data on a stream it no longer
// relays, as in a failover), or, from a gateway of an earlier release, as
// an unknown memory key. That is not the destination's word: the flow
// re-opens through the other gateway and the message is DONE.
func TestHopRefusalReroutes(t *testing.T) {
	for _, code := range []metaroce.ErrorCode{metaroce.ErrCodeNotRelayed, metaroce.ErrCodeUnknownKey} {
		t.Run(code.Err().Error(), func(t *testing.T) {
			w, f := simOpenFlow(t, Config{})
			w.gws[f.gw.idx].refuseData = code
			p := &Pending{done: make(chan struct{})}
			f.enqueue(w.now, &seg{op: metaroce.OpWrite, key: 1, data: make([]byte, 1000), pend: p})
			p.sealed = true
			w.run(w.now + time.Second)
			if f.state != flowOpen || p.Err() != nil || f.doneBelow != f.nextSeq {
				t.Fatalf("flow state %d (%v), message %v, DONE below %d of %d: want re-routed and DONE", f.state, f.err, p.Err(), f.doneBelow, f.nextSeq)
			}
			if n := w.opens(); n != 2 {
				t.Fatalf("%d OPENs, want 2 (re-opened through the other gateway)", n)
			}
		})
	}
}
