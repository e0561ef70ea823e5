//go:build linux

package tunnel

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/tunnel/control"
)

// link is what a Tunnel and an attached Peer share: the control session to
// one peer gateway, the keyring that seals with its keys and follows its
// rotations, the goroutines rotations run on, and the peer's drain request.
// It is the keyOwner of its keyring and the controlHandler its Router
// calls.
type link struct {
	log    *slog.Logger
	sess   *control.Session
	router *Router
	keys   *keyring
	gate   keyGate // delivers key events to keys

	mu     sync.Mutex // guards closed (and, in a Tunnel, its own fields)
	closed bool
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc

	draining atomic.Bool
}

// open registers the link for sess's control events and builds its
// keyring. A zero suite is AES-128-GCM, a zero rekeyAfter
// DefaultRekeyAfter. On error nothing stays registered.
func (l *link) open(sess *control.Session, router *Router, log *slog.Logger, suite seal.Suite, rekeyAfter uint64) error {
	if suite == 0 {
		suite = seal.AES128GCM
	}
	if rekeyAfter == 0 {
		rekeyAfter = DefaultRekeyAfter
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l.log, l.sess, l.router = log.With("peer", sess.Peer().Name), sess, router
	l.ctx, l.cancel = context.WithCancel(context.Background())
	// Register for control events before reading the epochs, so that a
	// rotation racing with the set-up is seen either here or as an event.
	if router != nil {
		router.add(sess, l)
	}
	k, err := newKeyring(l, sess, suite, rekeyAfter)
	if err != nil {
		l.abort()
		return err
	}
	l.keys = k
	l.gate.set(k)
	return nil
}

// abort undoes open after a later step of the set-up failed.
func (l *link) abort() {
	l.cancel()
	if l.router != nil {
		l.router.remove(l.sess)
	}
}

// shut stops rotations in progress and unregisters the link; it reports
// false if it had already been shut.
func (l *link) shut() bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	if l.router != nil {
		l.router.remove(l.sess)
	}
	return true
}

func (l *link) logger() *slog.Logger      { return l.log }
func (l *link) session() *control.Session { return l.sess }

// goTracked runs f on a goroutine that shut waits for, unless shut.
func (l *link) goTracked(f func(ctx context.Context)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f(l.ctx)
	}()
	return true
}

// Session returns the control session.
func (l *link) Session() *control.Session { return l.sess }

// Draining reports whether either side has asked to drain.
func (l *link) Draining() bool { return l.draining.Load() || l.sess.Draining() }

// HandleControlEvent feeds one event of the session in; use it when no
// Router is configured.
func (l *link) HandleControlEvent(ev control.Event) {
	switch ev.Kind {
	case control.EventRecvKey, control.EventSendKey:
		l.gate.handle(ev)
	case control.EventDrainRequested:
		l.draining.Store(true)
		l.log.Info("tunnel: peer requested drain")
	case control.EventClosed:
		l.log.Info("tunnel: control session ended", "err", ev.Err)
	}
}
