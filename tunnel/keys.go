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

// keyOwner is what a keyring needs from the data plane it seals for: a
// Tunnel with its own endpoint, or a Peer attached to a shared one.
type keyOwner interface {
	logger() *slog.Logger
	session() *control.Session
	goTracked(f func(ctx context.Context)) bool
}

// keyring is the tunnel's netio.Sealer: the current sending key and the
// peer's receive keys, swapped as the control session rotates them.
type keyring struct {
	t          keyOwner
	suite      seal.Suite
	rekeyAfter uint64

	send     atomic.Pointer[seal.Sealer]
	open     *seal.Opener
	rotating atomic.Bool // a rotation is in flight for the current sealer

	sendEpoch           atomic.Uint32
	rotations, recvKeys atomic.Uint64
}

func newKeyring(t keyOwner, sess *control.Session, suite seal.Suite, rekeyAfter uint64) (*keyring, error) {
	k := &keyring{t: t, suite: suite, rekeyAfter: rekeyAfter}
	sendEpoch, recvEpoch := sess.Epochs()
	sendKey, _ := sess.Keys(sendEpoch)
	s, err := seal.NewSealer(k.key(sendEpoch, sendKey), 2*rekeyAfter)
	if err != nil {
		return nil, err
	}
	k.send.Store(s)
	k.sendEpoch.Store(sendEpoch)
	// Accept the previous receive epoch too: datagrams sealed just before
	// the peer's last switch may still be in flight.
	first := recvEpoch
	if recvEpoch > 0 {
		first = recvEpoch - 1
	}
	_, rk := sess.Keys(first)
	if k.open, err = seal.NewOpener(k.key(first, rk)); err != nil {
		return nil, err
	}
	if first != recvEpoch {
		_, rk = sess.Keys(recvEpoch)
		if err := k.open.Install(k.key(recvEpoch, rk)); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// key turns the control channel's 32-byte secret into the suite's key; the
// envelope carries the low byte of the epoch.
func (k *keyring) key(epoch uint32, secret [32]byte) seal.Key {
	return seal.Key{Suite: k.suite, Secret: secret[:k.suite.KeyLen()], Epoch: uint8(epoch)}
}

// keyGate hands a session's key events to its keyring. The owner registers
// with the Router before the keyring reads the session's epochs (so that no
// rotation is missed), and events that arrive before the keyring exists are
// held and applied, in order, once it does.
type keyGate struct {
	mu      sync.Mutex
	keys    *keyring
	pending []control.Event
}

// handle applies a key event, or holds it until set.
func (g *keyGate) handle(ev control.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.keys == nil {
		if len(g.pending) < 64 { // a few rotations at most; bounded regardless
			g.pending = append(g.pending, ev)
		}
		return
	}
	g.keys.apply(ev)
}

// set installs the keyring and applies the events held so far (those for
// epochs it already read from the session are skipped by the installs).
func (g *keyGate) set(k *keyring) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keys = k
	for _, ev := range g.pending {
		k.apply(ev)
	}
	g.pending = nil
}

func (k *keyring) apply(ev control.Event) {
	switch ev.Kind {
	case control.EventRecvKey:
		k.installRecv(ev.Epoch, ev.RecvKey)
	case control.EventSendKey:
		k.installSend(ev.Epoch, ev.SendKey)
	}
}

// installRecv makes the peer's new epoch acceptable (the previous one stays
// acceptable until the next rotation replaces it).
func (k *keyring) installRecv(epoch uint32, secret [32]byte) {
	cur, prev, hasPrev := k.open.Epochs()
	if cur == uint8(epoch) || (hasPrev && prev == uint8(epoch)) {
		// Already installed (when the keyring was built): installing it
		// again would give its counters a fresh replay window.
		return
	}
	if err := k.open.Install(k.key(epoch, secret)); err != nil {
		k.t.logger().Warn("tunnel: cannot install receive key", "epoch", epoch, "err", err)
		return
	}
	k.recvKeys.Add(1)
	k.t.logger().Debug("tunnel: receive key installed", "epoch", epoch)
}

// installSend switches our sending key: the peer has acknowledged epoch, so
// it can open what we seal under it.
func (k *keyring) installSend(epoch uint32, secret [32]byte) {
	if epoch <= k.sendEpoch.Load() {
		// Already sealing under it (read when the keyring was built): a
		// new Sealer would restart its counter, reusing nonces.
		return
	}
	s, err := seal.NewSealer(k.key(epoch, secret), 2*k.rekeyAfter)
	if err != nil {
		k.t.logger().Warn("tunnel: cannot install send key", "epoch", epoch, "err", err)
		return
	}
	k.send.Store(s)
	k.sendEpoch.Store(epoch)
	k.rotating.Store(false)
	k.rotations.Add(1)
	k.t.logger().Debug("tunnel: send key switched", "epoch", epoch)
}

// Prefix implements netio.Sealer.
func (k *keyring) Prefix() int { return seal.HeaderLen }

// Overhead implements netio.Sealer.
func (k *keyring) Overhead() int { return seal.Overhead }

// Seal implements netio.Sealer. It starts a rotation once the current key
// has sealed RekeyAfter datagrams.
func (k *keyring) Seal(dst, plaintext []byte) ([]byte, error) {
	s := k.send.Load()
	out, err := s.Seal(dst, plaintext)
	if s.Sent() >= k.rekeyAfter && k.rotating.CompareAndSwap(false, true) {
		k.startRotation()
	}
	return out, err
}

// Reserve implements netio.RunSealer: a sender's batch takes its counters
// from the current key at once. A rotation that lands meanwhile leaves the
// rest of the batch under the previous key, which the peer still opens.
func (k *keyring) Reserve(r *seal.Run, n int) int {
	s := k.send.Load()
	got := s.Reserve(r, n)
	if s.Sent() >= k.rekeyAfter && k.rotating.CompareAndSwap(false, true) {
		k.startRotation()
	}
	return got
}

func (k *keyring) startRotation() {
	started := k.t.goTracked(func(ctx context.Context) {
		if _, err := k.t.session().RotateKeys(ctx); err != nil {
			k.t.logger().Warn("tunnel: key rotation failed", "err", err)
			k.rotating.Store(false) // let the next datagram try again
		}
	})
	if !started {
		k.rotating.Store(false)
	}
}

// Open implements netio.Sealer.
func (k *keyring) Open(dst, datagram []byte) ([]byte, error) { return k.open.Open(dst, datagram) }
