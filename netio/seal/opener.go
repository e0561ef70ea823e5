package seal

import (
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mrgw/mrgw/netio/replay"
)

// Opener authenticates and decrypts one direction's datagrams. It keeps the
// current epoch and, after a rekey, the previous one until DropPrevious. It
// is safe for concurrent use: epoch lookup is lock-free, and only the replay
// check of one epoch takes that epoch's lock.
type Opener struct {
	mu     sync.Mutex               // serializes Install and DropPrevious
	epochs atomic.Pointer[epochSet] // replaced, never modified
}

// epochSet is an immutable snapshot of the keys an Opener accepts.
type epochSet struct {
	cur, prev *epochState // prev may be nil
}

type epochState struct {
	epoch uint8
	aead  cipher.AEAD

	mu     sync.Mutex
	filter replay.Filter
}

// NewOpener returns an Opener that accepts datagrams sealed under key.
func NewOpener(key Key) (*Opener, error) {
	st, err := newEpochState(key)
	if err != nil {
		return nil, err
	}
	o := &Opener{}
	o.epochs.Store(&epochSet{cur: st})
	return o, nil
}

func newEpochState(key Key) (*epochState, error) {
	aead, err := key.Suite.newAEAD(key.Secret)
	if err != nil {
		return nil, err
	}
	return &epochState{epoch: key.Epoch, aead: aead}, nil
}

// Install makes key the current epoch; the current one becomes the previous
// (still accepted) and the previous one is forgotten. The new epoch must
// differ from the current one: re-installing an epoch would give its
// counters a fresh replay window.
func (o *Opener) Install(key Key) error {
	st, err := newEpochState(key)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.epochs.Load()
	if old.cur.epoch == key.Epoch {
		return fmt.Errorf("seal: epoch %d is already current", key.Epoch)
	}
	o.epochs.Store(&epochSet{cur: st, prev: old.cur})
	return nil
}

// DropPrevious ends the overlap of a rekey: datagrams of the previous epoch
// are refused with ErrUnknownEpoch from now on.
func (o *Opener) DropPrevious() {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.epochs.Load()
	o.epochs.Store(&epochSet{cur: old.cur})
}

// Epochs returns the current epoch and, if there is one, the previous epoch.
func (o *Opener) Epochs() (cur uint8, prev uint8, hasPrev bool) {
	s := o.epochs.Load()
	if s.prev != nil {
		return s.cur.epoch, s.prev.epoch, true
	}
	return s.cur.epoch, 0, false
}

// Open authenticates datagram, checks it against the replay window of its
// epoch, and appends the inner packet to dst. It allocates nothing when dst
// has len(datagram)-Overhead bytes of spare capacity. To open in place, call
// Open(datagram[HeaderLen:HeaderLen], datagram).
//
// Errors are of type Error. On error dst is returned unchanged in length,
// but its spare capacity may have been written to.
func (o *Opener) Open(dst, datagram []byte) ([]byte, error) {
	if len(datagram) < Overhead {
		return dst, ErrTooShort
	}
	if datagram[0] != TypeData || datagram[2] != 0 || datagram[3] != 0 {
		return dst, ErrUnknownType
	}
	set := o.epochs.Load()
	st := set.cur
	if datagram[1] != st.epoch {
		if st = set.prev; st == nil || datagram[1] != st.epoch {
			return dst, ErrUnknownEpoch
		}
	}
	ctr := binary.BigEndian.Uint64(datagram[4:HeaderLen])
	nonce := getNonce(ctr)
	out, err := st.aead.Open(dst, nonce[:], datagram[HeaderLen:], datagram[:HeaderLen])
	nonces.Put(nonce)
	if err != nil {
		return dst, ErrAuth
	}
	// The replay window moves only for authentic datagrams, so forged
	// counters cannot push genuine ones out of it.
	st.mu.Lock()
	fresh := st.filter.Check(ctr)
	st.mu.Unlock()
	if !fresh {
		return dst, ErrReplayed
	}
	return out, nil
}
