package control

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/mrgw/mrgw/tunnel/control/wire"
)

// EventKind says what happened on a session.
type EventKind int

// Event kinds.
const (
	// EventRecvKey: the peer announced Epoch; RecvKey is its key. Delivered
	// before our KeyUpdateAck is sent.
	EventRecvKey EventKind = iota + 1
	// EventSendKey: the peer acknowledged Epoch; we now send with SendKey.
	EventSendKey
	// EventRTT: a Pong arrived; RTT is the sample.
	EventRTT
	// EventPathSetup: the peer announced Paths.
	EventPathSetup
	// EventDrainRequested: the peer asked us to stop opening new flows.
	// Our DrainAck leaves when OnEvent returns.
	EventDrainRequested
	// EventClosed: the session ended; Err says why (ErrClosed, ErrDrained,
	// ErrPeerDead, ...). Always the last event.
	EventClosed
)

func (k EventKind) String() string {
	switch k {
	case EventRecvKey:
		return "recv-key"
	case EventSendKey:
		return "send-key"
	case EventRTT:
		return "rtt"
	case EventPathSetup:
		return "path-setup"
	case EventDrainRequested:
		return "drain-requested"
	case EventClosed:
		return "closed"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one thing that happened on a session; which fields are set
// depends on Kind.
type Event struct {
	Kind    EventKind
	Session *Session
	Epoch   uint32
	SendKey [32]byte // EventSendKey
	RecvKey [32]byte // EventRecvKey
	RTT     time.Duration
	Paths   []wire.Path
	Err     error
}

// rotation is one KeyUpdate in flight.
type rotation struct {
	epoch uint32
	done  chan struct{}
}

// Session is an authenticated control channel to one peer gateway.
type Session struct {
	conn   *quic.Conn
	str    *quic.Stream
	cfg    *Config
	log    *slog.Logger
	peer   PeerInfo
	dialer bool
	ekm    func(label string, context []byte, length int) ([]byte, error)

	wmu sync.Mutex // serializes whole frames onto the stream

	mu          sync.Mutex
	sendEpoch   uint32
	recvEpoch   uint32
	rotating    *rotation
	keyDeadline time.Time
	pathSeq     uint32
	pathWaiters map[uint32]chan []uint16
	peerPaths   []wire.Path
	pingSeq     uint64 // last Ping sent
	pongSeq     uint64 // highest Ping answered
	pingSent    map[uint64]time.Time
	srtt        time.Duration
	draining    bool
	drainAck    chan struct{}

	closeOnce sync.Once
	closeErr  error // set once, under closeOnce
	done      chan struct{}
	wg        sync.WaitGroup
}

func newSession(conn *quic.Conn, str *quic.Stream, cfg *Config, peer PeerInfo, dialer bool, log *slog.Logger) (*Session, error) {
	state := conn.ConnectionState().TLS
	s := &Session{
		conn: conn, str: str, cfg: cfg, peer: peer, dialer: dialer, log: log,
		ekm:         state.ExportKeyingMaterial,
		pathWaiters: make(map[uint32]chan []uint16),
		pingSent:    make(map[uint64]time.Time),
		done:        make(chan struct{}),
		keyDeadline: time.Now().Add(cfg.KeyLifetime),
	}
	// Keys() cannot return an error; the exporter only fails for reasons
	// fixed for the whole connection (not TLS 1.3, handshake unfinished),
	// so one successful export here proves every later one succeeds.
	if _, err := s.ekm(KeyLabel, keyContext(0, 0), 32); err != nil {
		return nil, fmt.Errorf("control: TLS exporter unavailable: %w", err)
	}
	s.wg.Add(2)
	go s.readLoop()
	go s.tickLoop()
	return s, nil
}

// Peer returns what the peer announced in Hello.
func (s *Session) Peer() PeerInfo { return s.peer }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended, or nil while it is running.
func (s *Session) Err() error {
	select {
	case <-s.done:
		return s.closeErr
	default:
		return nil
	}
}

func keyContext(epoch uint32, dir byte) []byte {
	var c [5]byte
	binary.BigEndian.PutUint32(c[:], epoch)
	c[4] = dir
	return c[:]
}

func (s *Session) derive(epoch uint32, dir byte) (k [32]byte) {
	b, err := s.ekm(KeyLabel, keyContext(epoch, dir), len(k))
	if err != nil {
		// Unreachable: checked once in newSession (see there).
		panic("control: TLS exporter failed after a successful check: " + err.Error())
	}
	copy(k[:], b)
	return k
}

// Keys returns the datagram keys of epoch: send for what we send, recv for
// what the peer sends. Both gateways compute the same pair mirrored; every
// epoch and direction gives a distinct key. The data plane's envelope
// carries the low byte of the epoch.
func (s *Session) Keys(epoch uint32) (send, recv [32]byte) {
	sendDir, recvDir := DirListenerToDialer, DirDialerToListener
	if s.dialer {
		sendDir, recvDir = recvDir, sendDir
	}
	return s.derive(epoch, sendDir), s.derive(epoch, recvDir)
}

// Epochs returns the epoch we send with and the newest epoch the peer has
// announced for its sending.
func (s *Session) Epochs() (send, recv uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sendEpoch, s.recvEpoch
}

// RTT returns the smoothed keepalive RTT (RFC 6298 weights), 0 before the
// first Pong.
func (s *Session) RTT() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srtt
}

// Draining reports whether either side has asked to drain: no new flows.
func (s *Session) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// PeerPaths returns the paths the peer announced last.
func (s *Session) PeerPaths() []wire.Path {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.peerPaths)
}

// send writes one frame. A write that cannot finish within the handshake
// timeout means the peer stopped reading: the session is torn down rather
// than left hanging.
func (s *Session) send(m wire.Message) error {
	b, err := wire.Append(nil, m)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.str.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout)); err != nil {
		return err
	}
	if _, err := s.str.Write(b); err != nil {
		err = classify(err)
		s.closeWith(err)
		return err
	}
	return nil
}

// RotateKeys moves our sending key to the next epoch: it announces the epoch
// (KeyUpdate), waits for the peer to install the receive key and acknowledge,
// and returns the epoch we now send with (EventSendKey is also emitted).
// Call it when the data plane's nonce counter nears its limit; it also runs
// by itself every Config.KeyLifetime. If a rotation is already in flight,
// RotateKeys waits for that one instead of starting another.
func (s *Session) RotateKeys(ctx context.Context) (uint32, error) {
	r, err := s.startRotation()
	if err != nil {
		return 0, err
	}
	select {
	case <-r.done:
		return r.epoch, nil
	case <-s.done:
		return 0, s.closeErr
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (s *Session) startRotation() (*rotation, error) {
	s.mu.Lock()
	if r := s.rotating; r != nil {
		s.mu.Unlock()
		return r, nil
	}
	if s.sendEpoch == math.MaxUint32 {
		s.mu.Unlock()
		return nil, ErrEpochExhausted
	}
	r := &rotation{epoch: s.sendEpoch + 1, done: make(chan struct{})}
	s.rotating = r
	s.mu.Unlock()
	// Sent outside s.mu: a write may wait on flow control, and the reader
	// needs s.mu to make progress.
	if err := s.send(wire.KeyUpdate{Epoch: r.epoch}); err != nil {
		return nil, err
	}
	s.log.Debug("control: key update sent", "epoch", r.epoch)
	return r, nil
}

// SetupPaths announces our data-plane paths and returns the ids the peer
// accepted.
func (s *Session) SetupPaths(ctx context.Context, paths []wire.Path) ([]uint16, error) {
	ch := make(chan []uint16, 1)
	s.mu.Lock()
	s.pathSeq++
	seq := s.pathSeq
	s.pathWaiters[seq] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pathWaiters, seq)
		s.mu.Unlock()
	}()
	if err := s.send(wire.PathSetup{Seq: seq, Paths: paths}); err != nil {
		return nil, err
	}
	select {
	case ids := <-ch:
		return ids, nil
	case <-s.done:
		return nil, s.closeErr
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Drain ends the session gracefully: it tells the peer to stop opening new
// flows, waits for its DrainAck, then closes the connection. Session.Err is
// ErrDrained afterwards, on both sides.
func (s *Session) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	if s.drainAck == nil {
		s.drainAck = make(chan struct{})
	}
	ack := s.drainAck
	s.mu.Unlock()
	if err := s.send(wire.Drain{}); err != nil {
		return err
	}
	select {
	case <-ack:
	case <-s.done:
		return s.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
	s.log.Info("control: session drained")
	s.closeWith(fmt.Errorf("%w: by us", ErrDrained))
	s.wg.Wait()
	return nil
}

// Close closes the session at once and waits for its goroutines. It must
// not be called from Config.OnEvent.
func (s *Session) Close() error {
	s.closeWith(fmt.Errorf("%w: by us", ErrClosed))
	s.wg.Wait()
	return nil
}

// closeWith records why the session ends (first reason wins) and closes the
// QUIC connection with the matching code, which tells the peer why.
func (s *Session) closeWith(err error) {
	s.closeOnce.Do(func() {
		s.closeErr = err
		_ = s.conn.CloseWithError(codeFor(err), err.Error())
	})
}

func (s *Session) emit(e Event) {
	if s.cfg.OnEvent != nil {
		e.Session = s
		s.cfg.OnEvent(e)
	}
}

func (s *Session) readLoop() {
	defer s.wg.Done()
	for {
		m, err := wire.Read(s.str)
		if err == nil {
			err = s.handle(m)
		}
		if err != nil {
			err = classify(err)
			s.closeWith(err)
			// Drop a stale keepalive's effect etc.: from here on only the
			// recorded reason matters.
			if !errors.Is(s.closeErr, ErrClosed) && !errors.Is(s.closeErr, ErrDrained) {
				s.log.Warn("control: session ended", "err", s.closeErr)
			} else {
				s.log.Info("control: session ended", "err", s.closeErr)
			}
			close(s.done)
			s.emit(Event{Kind: EventClosed, Err: s.closeErr})
			return
		}
	}
}

// handle processes one message from the peer. An error ends the session.
func (s *Session) handle(m wire.Message) error {
	switch m := m.(type) {
	case wire.Ping:
		return s.send(wire.Pong(m))
	case wire.Pong:
		s.mu.Lock()
		sent, ok := s.pingSent[m.Seq]
		if m.Seq > s.pongSeq && m.Seq <= s.pingSeq {
			s.pongSeq = m.Seq
		}
		for seq := range s.pingSent {
			if seq <= s.pongSeq {
				delete(s.pingSent, seq)
			}
		}
		var rtt time.Duration
		if ok {
			rtt = time.Since(sent)
			if s.srtt == 0 {
				s.srtt = rtt
			} else {
				s.srtt = (7*s.srtt + rtt) / 8
			}
		}
		s.mu.Unlock()
		if ok {
			s.emit(Event{Kind: EventRTT, RTT: rtt})
		}
		return nil
	case wire.KeyUpdate:
		s.mu.Lock()
		want := s.recvEpoch + 1
		ok := m.Epoch == want && s.recvEpoch != math.MaxUint32
		if ok {
			s.recvEpoch = m.Epoch
		}
		s.mu.Unlock()
		if !ok {
			return fmt.Errorf("%w: KeyUpdate to epoch %d, want %d", ErrProtocol, m.Epoch, want)
		}
		_, recv := s.Keys(m.Epoch)
		s.emit(Event{Kind: EventRecvKey, Epoch: m.Epoch, RecvKey: recv})
		s.log.Debug("control: receive key installed", "epoch", m.Epoch)
		return s.send(wire.KeyUpdateAck(m))
	case wire.KeyUpdateAck:
		s.mu.Lock()
		r := s.rotating
		ok := r != nil && r.epoch == m.Epoch
		if ok {
			s.sendEpoch = m.Epoch
			s.rotating = nil
			s.keyDeadline = time.Now().Add(s.cfg.KeyLifetime)
		}
		s.mu.Unlock()
		if !ok {
			return fmt.Errorf("%w: unexpected KeyUpdateAck for epoch %d", ErrProtocol, m.Epoch)
		}
		send, _ := s.Keys(m.Epoch)
		s.emit(Event{Kind: EventSendKey, Epoch: m.Epoch, SendKey: send})
		s.log.Debug("control: sending key switched", "epoch", m.Epoch)
		close(r.done)
		return nil
	case wire.PathSetup:
		ids := make([]uint16, len(m.Paths))
		for i, p := range m.Paths {
			ids[i] = p.ID
		}
		s.mu.Lock()
		s.peerPaths = slices.Clone(m.Paths)
		s.mu.Unlock()
		s.emit(Event{Kind: EventPathSetup, Paths: slices.Clone(m.Paths)})
		return s.send(wire.PathSetupAck{Seq: m.Seq, IDs: ids})
	case wire.PathSetupAck:
		s.mu.Lock()
		ch, ok := s.pathWaiters[m.Seq]
		s.mu.Unlock()
		if !ok {
			// The caller may have given up (context); not a violation.
			return nil
		}
		select {
		case ch <- m.IDs:
		default:
			// A duplicate ack for this seq: the waiter has its answer, and
			// the reader must never block on a misbehaving peer.
		}
		return nil
	case wire.Drain:
		s.mu.Lock()
		s.draining = true
		s.mu.Unlock()
		s.log.Info("control: peer requested drain")
		s.emit(Event{Kind: EventDrainRequested})
		return s.send(wire.DrainAck{})
	case wire.DrainAck:
		s.mu.Lock()
		ack := s.drainAck
		s.drainAck = nil
		s.mu.Unlock()
		if ack == nil {
			return fmt.Errorf("%w: DrainAck without Drain", ErrProtocol)
		}
		close(ack)
		return nil
	default:
		return fmt.Errorf("%w: unexpected %v after Hello", ErrProtocol, m.Type())
	}
}

// tickLoop sends keepalives, declares the peer dead after KeepaliveMisses
// unanswered pings, and rotates keys when KeyLifetime passes.
func (s *Session) tickLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.KeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			s.mu.Lock()
			missed := s.pingSeq - s.pongSeq
			rotate := s.cfg.KeyLifetime > 0 && s.rotating == nil && !now.Before(s.keyDeadline)
			if missed < uint64(s.cfg.KeepaliveMisses) {
				s.pingSeq++
				s.pingSent[s.pingSeq] = now
			}
			seq := s.pingSeq
			s.mu.Unlock()
			if missed >= uint64(s.cfg.KeepaliveMisses) {
				err := fmt.Errorf("%w: %d keepalives unanswered (interval %v)", ErrPeerDead, missed, s.cfg.KeepaliveInterval)
				s.log.Warn("control: peer dead", "missed", missed)
				s.closeWith(err)
				return
			}
			if s.send(wire.Ping{Seq: seq}) != nil {
				return
			}
			if rotate {
				if _, err := s.startRotation(); err != nil {
					s.log.Warn("control: timed key rotation failed", "err", err)
				}
			}
		}
	}
}
