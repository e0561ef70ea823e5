//go:build linux

package fleet

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Episodes: an event (a plane verdict, a death, a join) and the gateways
// that must learn of it, with when each did.

// tracker follows events until every gateway that needs them has them.
type tracker struct {
	mu  sync.Mutex
	eps map[string]*episode
}

type episode struct {
	key    string
	t0     time.Time
	mu     sync.Mutex
	need   map[string]bool
	got    map[string]time.Duration
	closed bool
	known  bool // every user knew at t0 (see Row.Known)
	damped int  // users counted at t0 by b's standing down on its paths to them (Row.DampedUsers)
	done   chan struct{}
}

func (t *tracker) init() { t.eps = map[string]*episode{} }

func evKey(kind, subject, plane string) string { return kind + "/" + subject + "/" + plane }

func (t *tracker) open(kind, subject, plane string, need []string, t0 time.Time) *episode {
	ep := &episode{key: evKey(kind, subject, plane), t0: t0, need: map[string]bool{},
		got: map[string]time.Duration{}, done: make(chan struct{})}
	for _, n := range need {
		ep.need[n] = true
	}
	if len(need) == 0 {
		ep.closed = true
		close(ep.done)
		return ep
	}
	t.mu.Lock()
	if old := t.eps[ep.key]; old != nil {
		t.mu.Unlock()
		t.close(old)
		t.mu.Lock()
	}
	t.eps[ep.key] = ep
	t.mu.Unlock()
	return ep
}

func (t *tracker) deliver(kind, subject, plane, who string) {
	at := time.Now()
	t.mu.Lock()
	ep := t.eps[evKey(kind, subject, plane)]
	t.mu.Unlock()
	if ep == nil {
		return
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed || !ep.need[who] {
		return
	}
	delete(ep.need, who)
	ep.got[who] = at.Sub(ep.t0)
	if debug != "" && at.Sub(ep.t0) > time.Second {
		fmt.Fprintf(os.Stderr, "LATE %s by %s after %s\n", ep.key, who, at.Sub(ep.t0))
	}
	if len(ep.need) == 0 {
		ep.closed = true
		close(ep.done)
		t.mu.Lock()
		if t.eps[ep.key] == ep {
			delete(t.eps, ep.key)
		}
		t.mu.Unlock()
	}
}

// close ends an episode: those that did not get it by now missed it.
func (t *tracker) close(ep *episode) {
	if ep == nil {
		return
	}
	t.mu.Lock()
	if t.eps[ep.key] == ep {
		delete(t.eps, ep.key)
	}
	t.mu.Unlock()
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if !ep.closed {
		ep.closed = true
		close(ep.done)
	}
}

func (f *fleet) debugMissed(ep *episode) {
	if debug == "" || ep == nil {
		return
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if len(ep.need) == 0 {
		return
	}
	parts := strings.Split(ep.key, "/")
	b, p := f.node(parts[1]), parts[2]
	for who := range ep.need {
		u := f.node(who)
		if u == nil || b == nil {
			continue
		}
		// What u holds on b's plane and on its own (where b's verdict on
		// its paths to u lands), and what b holds and last said on it.
		hb, okb := u.c.Health(b.name, p)
		hu, oku := u.c.Health(u.name, p)
		bw, bown := b.c.OwnWire(u.name, p)
		bt, okbt := b.c.Health(u.name, p)
		fmt.Fprintf(os.Stderr, "MISSED %s by %s after %s (known %v): u holds (b,p) %s from %s %v; (u,p) %s from %s %v; b wire (u,p) %s %v; b holds (u,p) %s from %s %v\n",
			ep.key, who, time.Since(ep.t0), ep.known, hb.State, hb.From, okb, hu.State, hu.From, oku, bw, bown, bt.State, bt.From, okbt)
	}
}

func (t *tracker) wait(ctx context.Context, ep *episode, limit time.Duration) {
	tm := time.NewTimer(limit)
	defer tm.Stop()
	select {
	case <-ep.done:
	case <-tm.C:
	case <-ctx.Done():
	}
	t.close(ep)
}

// span is the time until the last gateway that needed it had it.
func (ep *episode) span() time.Duration {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	var m time.Duration
	for _, d := range ep.got {
		m = max(m, d)
	}
	return m
}

func (ep *episode) delays() []time.Duration {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	var out []time.Duration
	for _, d := range ep.got {
		out = append(out, d)
	}
	return out
}

// later counts the gateways that had it only after d.
func (ep *episode) later(d time.Duration) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	n := 0
	for _, g := range ep.got {
		if g > d {
			n++
		}
	}
	return n
}

// missed is how many gateways that needed it never had it; a gateway that
// died meanwhile does not count.
func (ep *episode) missed() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.need)
}
