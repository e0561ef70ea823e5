package metaroce

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// establish returns a test network with an established connection and the
// server's side of it.
func establish(t testing.TB, cfg Config) (*testNet, *Conn, *Conn) {
	t.Helper()
	n := newTestNet(t, cfg, cfg, 2, 1)
	c, err := n.eps[0].Connect(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !n.run(time.Second, c.Established) {
		t.Fatal("no handshake")
	}
	var s *Conn
	for _, ev := range drain(n.eps[1]) {
		if ev.Kind == EventConnected {
			s = ev.Conn
		}
	}
	drain(n.eps[0])
	if s == nil {
		t.Fatal("server saw no connection")
	}
	return n, c, s
}

// TestBadInputDroppedAndCounted feeds the receiver every kind of bad packet
// and checks that each is dropped and counted, nothing is written, nothing
// panics, and the connection still carries data afterwards. The packets
// are version 1's (TestBadInputV2 has version 2's), so the connection
// speaks version 1.
func TestBadInputDroppedAndCounted(t *testing.T) {
	n, c, s := establish(t, Config{MTU: 1024, Paths: 4, WireVersions: []uint8{Version1}})
	rx := n.eps[1]
	region := make([]byte, 4096)
	if err := rx.Memory().Register(5, region); err != nil {
		t.Fatal(err)
	}
	data := func(mod func(h *DataHeader)) []byte {
		h := DataHeader{Op: OpWrite, Conn: c.ID(), Path: 1, Stream: 0, Seq: 0, MsgSeq: 0, MsgLen: 100, Key: 5, Addr: 0, Timestamp: 1}
		mod(&h)
		b, err := AppendData(make([]byte, 0, 2000), &h, bytes.Repeat([]byte{0xAA}, int(min(h.MsgLen-h.Offset, 1024))))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	meta := RecvMeta{Peer: 0, Entropy: 50000}
	valid := data(func(*DataHeader) {})

	before := rx.Stats
	rx.Receive(n.now, valid[:30], meta) // truncated
	if rx.Stats.Truncated != before.Truncated && rx.Stats.Truncated == 0 {
		t.Fatal("truncated header not counted")
	}
	s0 := s.Stats
	rx.Receive(n.now, valid[:DataHeaderLen+10], meta)                       // truncated payload
	rx.Receive(n.now, append(append([]byte(nil), valid...), 1, 2, 3), meta) // oversized
	if got := s.Stats.Malformed - s0.Malformed; got != 2 {
		t.Fatalf("malformed counted %d times, want 2", got)
	}

	wrongVer := append([]byte(nil), valid...)
	wrongVer[0] = 9
	rx.Receive(n.now, wrongVer, meta)
	if rx.Stats.BadVersion != before.BadVersion+1 || rx.Stats.VersionSent == 0 {
		t.Fatalf("wrong version: BadVersion %d VersionSent %d", rx.Stats.BadVersion, rx.Stats.VersionSent)
	}

	unknown := data(func(h *DataHeader) { h.Conn = c.ID() + 1 })
	rx.Receive(n.now, unknown, meta)
	if rx.Stats.UnknownConn != before.UnknownConn+1 {
		t.Fatal("unknown connection not counted")
	}

	rx.Receive(n.now, data(func(h *DataHeader) { h.Key = 99 }), meta)
	rx.Receive(n.now, data(func(h *DataHeader) { h.Seq, h.MsgSeq, h.Addr = 1, 1, 4000 }), meta)                         // reaches past the region
	rx.Receive(n.now, data(func(h *DataHeader) { h.Seq, h.MsgSeq, h.Op, h.Key, h.Addr = 2, 2, OpSend, 0, 4242 }), meta) // no posted buffer
	var errs []error
	for _, ev := range drain(rx) {
		if ev.Kind == EventPlacementError {
			errs = append(errs, ev.Err)
		}
	}
	want := []error{ErrUnknownKey, ErrOutOfBounds, ErrNoPostedBuffer}
	if len(errs) != len(want) {
		t.Fatalf("placement errors %v, want %v", errs, want)
	}
	for i := range want {
		if !errors.Is(errs[i], want[i]) {
			t.Fatalf("placement error %d = %v, want %v", i, errs[i], want[i])
		}
	}
	if s.Stats.PlacementErrors-s0.PlacementErrors != 3 {
		t.Fatalf("PlacementErrors = %d, want 3", s.Stats.PlacementErrors-s0.PlacementErrors)
	}
	if !bytes.Equal(region, make([]byte, len(region))) {
		t.Fatal("a refused packet wrote into memory")
	}

	// The sender hears of each refusal: messages it sends that are refused
	// complete with the remote error.
	seq, err := c.Write(n.now, 3, 99, 0, []byte("no such key"))
	if err != nil {
		t.Fatal(err)
	}
	var sendErr error
	if !n.run(n.now+time.Second, func() bool {
		for _, ev := range drain(n.eps[0]) {
			if ev.Kind == EventSendComplete && ev.Stream == 3 && ev.Seq == seq {
				sendErr = ev.Err
				return true
			}
		}
		return false
	}) {
		t.Fatal("refused write never completed at the sender")
	}
	if !errors.Is(sendErr, ErrUnknownKey) {
		t.Fatalf("refused write completed with %v, want ErrUnknownKey", sendErr)
	}

	// The connection still works.
	msg := []byte("still healthy")
	if _, err := c.Write(n.now, 4, 5, 100, msg); err != nil {
		t.Fatal(err)
	}
	if !n.run(n.now+time.Second, func() bool { return bytes.Equal(region[100:100+len(msg)], msg) }) {
		t.Fatal("connection broken by bad input")
	}
}

func TestVersionNegotiationRefusesUnknownVersion(t *testing.T) {
	n := newTestNet(t, Config{}, Config{WireVersions: []uint8{Version1, Version2}}, 1, 1)
	// An INIT of version 7 is answered with VERSION listing 1 and 2.
	init, _ := AppendInit(make([]byte, 0, 64), &Handshake{Conn: 5, MTU: 4096, Paths: 1, Timestamp: 1})
	init[0] = 7
	n.eps[1].Receive(0, init, RecvMeta{Peer: 0, Entropy: 1234})
	buf := make([]byte, 0, 100)
	tx, ok := n.eps[1].Poll(0, buf)
	if !ok {
		t.Fatal("no VERSION answer")
	}
	_, vers, err := DecodeVersion(buf[:tx.Len])
	if err != nil || len(vers) != 2 || vers[0] != Version1 || vers[1] != Version2 || !tx.Reply || tx.Entropy != 1234 {
		t.Fatalf("VERSION answer %v %v %+v", vers, err, tx)
	}
	if len(n.eps[1].Conns()) != 0 {
		t.Fatal("a connection was created for an unknown version")
	}
	// A client that hears VERSION without its own version fails.
	c, _ := n.eps[0].Connect(0, 1)
	v, _ := AppendVersion(make([]byte, 0, 64), c.ID(), []uint8{2, 3})
	n.eps[0].Receive(0, v, RecvMeta{Peer: 1})
	var closed error
	for _, ev := range drain(n.eps[0]) {
		if ev.Kind == EventClosed {
			closed = ev.Err
		}
	}
	if !errors.Is(closed, ErrNoCommonVersion) {
		t.Fatalf("client closed with %v, want ErrNoCommonVersion", closed)
	}
}

func TestHandshakeTimeoutAndClose(t *testing.T) {
	n := newTestNet(t, Config{}, Config{}, 1, 1)
	n.black[0] = true
	c, _ := n.eps[0].Connect(0, 1)
	var err error
	if !n.run(10*time.Second, func() bool {
		for _, ev := range drain(n.eps[0]) {
			if ev.Kind == EventClosed {
				err = ev.Err
				return true
			}
		}
		return false
	}) {
		t.Fatal("handshake never gave up")
	}
	if !errors.Is(err, ErrHandshakeTimeout) || !c.Closed() {
		t.Fatalf("closed with %v", err)
	}

	n2, c2, s2 := establish(t, Config{})
	c2.Close(n2.now)
	if !n2.run(n2.now+time.Second, func() bool { return c2.Closed() && s2.Closed() }) {
		t.Fatal("close did not complete on both sides")
	}
	if _, err := c2.Write(n2.now, 0, 1, 0, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// FuzzEndpointReceive throws arbitrary datagrams at an endpoint that has an
// established connection and registered memory: it must never panic.
func FuzzEndpointReceive(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		n, c, _ := establish(t, Config{MTU: 256, Paths: 2})
		_ = n.eps[1].Memory().Register(1, make([]byte, 1024))
		if len(b) >= 12 {
			be.PutUint64(b[4:12], c.ID()) // aim at the live connection
		}
		n.eps[1].Receive(n.now, b, RecvMeta{Peer: 0, Entropy: 1})
		n.eps[0].Receive(n.now, b, RecvMeta{Peer: 1, Entropy: 1})
		n.run(n.now+10*time.Millisecond, func() bool { return false })
	})
}

// TestDeadPeerDetected: when every plane goes black, the connection closes
// with ErrPeerUnreachable after DeadAfter instead of hanging.
func TestDeadPeerDetected(t *testing.T) {
	n, c, _ := establish(t, Config{Paths: 4, DeadAfter: 50 * time.Millisecond})
	if err := n.eps[1].Memory().Register(1, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	for i := range n.black {
		n.black[i] = true
	}
	if _, err := c.Write(n.now, 0, 1, 0, make([]byte, 100000)); err != nil {
		t.Fatal(err)
	}
	var closed, sendErr error
	if !n.run(n.now+10*time.Second, func() bool {
		for _, ev := range drain(n.eps[0]) {
			switch ev.Kind {
			case EventClosed:
				closed = ev.Err
			case EventSendComplete:
				sendErr = ev.Err
			}
		}
		return closed != nil
	}) {
		t.Fatal("connection to a dead peer never closed")
	}
	if !errors.Is(closed, ErrPeerUnreachable) || !errors.Is(sendErr, ErrClosed) {
		t.Fatalf("closed with %v, message failed with %v", closed, sendErr)
	}
}
