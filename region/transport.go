package region

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/mrgw/mrgw/internal/ratelog"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"golang.org/x/net/ipv4"
)

// Why a gossip datagram was dropped before memberlist saw it: the values
// of [Stats.DatagramsDropped]' keys (and of a metric's reason label).
const (
	// DropTooShort: shorter than the smallest gossip packet.
	DropTooShort = "too_short"
	// DropTooLong: longer than any gateway sends (maxDatagram).
	DropTooLong = "too_long"
	// DropFormat: the first byte is no encryption version (no message
	// type when gossip is not encrypted).
	DropFormat = "format"
	// DropDecrypt: no key of the keyring authenticates it.
	DropDecrypt = "decrypt"
	// DropRate: from an address that is neither a member nor recently
	// authenticated, beyond the budget such addresses get.
	DropRate = "rate"
	// DropQueueFull: authenticated, but memberlist's packet queue was full.
	DropQueueFull = "queue_full"
	// DropSocketOverflow: dropped by the kernel because the socket's
	// receive buffer was full, before this gateway could look at it. Any
	// such drop may have been valid gossip: it means the reader does not
	// keep up.
	DropSocketOverflow = "socket_overflow"
)

// DropReasons lists every drop reason, in a fixed order.
var DropReasons = []string{DropTooShort, DropTooLong, DropFormat, DropDecrypt, DropRate, DropQueueFull, DropSocketOverflow}

// Why this gateway refused another's gossip: the keys of [Stats.Refused]
// (and of a metric's reason label). Each refusal is logged at warn, at
// most one line per reason every [refusalLogEvery].
const (
	// RefuseStreamLimit: too many gossip streams open at once, in all or
	// from one address; the connection was closed unread.
	RefuseStreamLimit = "stream_limit"
	// RefuseStreamTimeout: a stream's first message did not arrive in
	// time.
	RefuseStreamTimeout = "stream_timeout"
	// RefuseStreamSize: a stream's first message was larger than any
	// gateway sends.
	RefuseStreamSize = "stream_size"
	// RefuseKeyring: a stream (a join or a state exchange) that no
	// installed key decrypts: a gateway with another keyring.
	RefuseKeyring = "keyring"
	// RefuseUnencrypted: a clear stream while this gateway encrypts: a
	// gateway without a keyring, or not a gateway at all.
	RefuseUnencrypted = "unencrypted"
	// RefuseNotGateway: a member whose metadata is not a gateway's.
	RefuseNotGateway = "not_gateway"
	// RefuseNameConflict: a member claiming a name another member has.
	RefuseNameConflict = "name_conflict"
)

// RefuseReasons lists every refusal reason, in a fixed order.
var RefuseReasons = []string{RefuseStreamLimit, RefuseStreamTimeout, RefuseStreamSize, RefuseKeyring,
	RefuseUnencrypted, RefuseNotGateway, RefuseNameConflict}

// Limits of the guarded transport. A gateway's own gossip stays far
// inside every one of them.
const (
	// maxDatagram bounds the datagrams read: memberlist never sends more
	// than its UDPBufferSize (1400 bytes, which New keeps) plus encryption
	// (29 bytes), a checksum (5) and a label (at most 257, none here).
	// Longer ones are junk (DropTooLong). Small buffers also keep the race
	// detector's cost per read, which is by buffer size, low enough for
	// the flood tests to mean something.
	maxDatagram = 4096
	// udpBufferSize is memberlist's UDPBufferSize (the largest packet it
	// builds); with every overhead it stays under maxDatagram.
	udpBufferSize = 1400
	// readBatch datagrams are read per system call; memberReadBatch on a
	// member's own socket, which carries one member's gossip only (its
	// buffers are per member: 32 × 4 KiB each made 16 MiB per gateway at
	// 128 gateways, 64 MiB at 512 member sockets).
	readBatch       = 32
	memberReadBatch = 4
	// udpRecvBuf is asked of the kernel for the socket's receive buffer
	// (it grants at most net.core.rmem_max); a larger buffer rides out a
	// longer pause of the reader.
	udpRecvBuf = 8 << 20
	// packetQueue bounds the authenticated datagrams waiting for
	// memberlist; beyond it they are dropped (DropQueueFull), never
	// queued behind one another without bound.
	packetQueue = 1024
	// An address that is neither a member nor has sent an authenticated
	// datagram in the last trustTTL gets untrustedPerIP datagrams a
	// second, and all such addresses together untrustedTotal: enough for
	// a gateway to introduce itself, too few for junk to cost much.
	untrustedPerIP = 50
	untrustedTotal = 2000
	trustTTL       = 2 * time.Minute
	maxTrusted     = 4096
	// Streams: at most maxStreams open at once, maxStreamsPerIP from one
	// address; the first message must arrive within the stream timeout
	// and be at most maxStreamMessage bytes (a gateway's state exchange
	// is a few hundred kilobytes at the health table's default bound).
	maxStreams       = 64
	maxStreamsPerIP  = 16
	maxStreamMessage = 4 << 20
	maxStreamWait    = 10 * time.Second
	// Members get sockets of their own (openMemberSocket), at most
	// maxMemberSockets (beyond, they share the port's socket), each with
	// a smaller buffer: only one member's gossip lands in it.
	maxMemberSockets = 512
	memberRecvBuf    = 1 << 20
	// refusalLogEvery: at most one warn line per drop or refusal reason
	// per interval, with the count of those suppressed.
	refusalLogEvery = 10 * time.Second
)

// memberlist's wire constants (net.go, security.go of v0.7.0).
const (
	mlEncryptMsg = 10 // messageType encryptMsg
	mlMaxMsgType = 13 // errMsg, the highest type a clear packet starts with
	mlNonceSize  = 12
	mlTagSize    = 16
	// version, nonce, tag and at least one byte of message.
	mlMinEncrypted = 1 + mlNonceSize + mlTagSize + 1
)

// guardTransport is memberlist's transport (UDP packets, TCP streams) with
// a guard in front: every datagram is checked in the goroutine that reads
// the socket (authenticated with the keyring when gossip is encrypted) and
// junk is dropped and counted there, so that it never queues in front of
// real probes; streams are bounded in number and time, and with a keyring
// their first message is authenticated before memberlist sees it.
//
// memberlist's own NetTransport hands every datagram, junk included, one
// at a time to memberlist's packet goroutine, which decrypts, fails and
// logs each. A flood of junk then fills the socket's receive buffer and the
// kernel drops the probes and acks among it: the flooded gateway is
// declared dead while it runs.
type guardTransport struct {
	log   *slog.Logger
	warns *ratelog.Logger

	tcp      *net.TCPListener
	udp      *net.UDPConn // the gossip port: everything but known members
	bindAddr netip.Addr
	port     int

	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	closed   atomic.Bool
	wg       sync.WaitGroup

	// keys authenticate datagrams and streams: nil when gossip is not
	// encrypted. Replaced whole on every keyring change.
	keys atomic.Pointer[[]cipher.AEAD]
	// members are the gossip addresses of the members memberlist knows:
	// their datagrams are never rate-limited (they are still
	// authenticated). memberSocks are their own sockets (see
	// openMemberSocket).
	membersMu   sync.Mutex
	members     atomic.Pointer[map[netip.AddrPort]struct{}]
	memberSocks map[netip.AddrPort]*udpReader
	byName      map[string]netip.AddrPort

	streamWait time.Duration
	streamMu   sync.Mutex
	streams    int
	streamsBy  map[netip.Addr]int

	noLimit atomic.Bool // tests: no rate limit, decrypt every datagram

	accepted       atomic.Uint64
	acceptedMember atomic.Uint64 // of accepted, read from a member's own socket
	// Bytes on the wire: datagrams (every one read, junk included) and
	// streams, both ways.
	pktSent, pktRecv, strSent, strRecv atomic.Uint64
	dropped                            [len(dropIndex)]atomic.Uint64
	dropLog                            [len(dropIndex)]logGate
	refused                            [len(refuseIndex)]atomic.Uint64
}

// Indexes of the reasons in guardTransport's counters.
var (
	dropIndex   = [...]string{DropTooShort, DropTooLong, DropFormat, DropDecrypt, DropRate, DropQueueFull, DropSocketOverflow}
	refuseIndex = [...]string{RefuseStreamLimit, RefuseStreamTimeout, RefuseStreamSize, RefuseKeyring,
		RefuseUnencrypted, RefuseNotGateway, RefuseNameConflict}
)

const (
	dTooShort = iota
	dTooLong
	dFormat
	dDecrypt
	dRate
	dQueueFull
	dSocketOverflow
)

const (
	rStreamLimit = iota
	rStreamTimeout
	rStreamSize
	rKeyring
	rUnencrypted
	rNotGateway
	rNameConflict
)

var _ memberlist.NodeAwareTransport = (*guardTransport)(nil)

// A compile-time check that memberlist's largest packet fits.
var _ [maxDatagram - (udpBufferSize + 29 + 5 + 257) - 1]struct{}

// newGuardTransport listens on bind (TCP and UDP on one port; port 0
// picks a free one) and starts reading. keys is the keyring, nil when
// gossip is not encrypted; streamWait bounds the wait for a stream's first
// message.
func newGuardTransport(bind netip.AddrPort, keys [][]byte, streamWait time.Duration, logger *slog.Logger) (*guardTransport, error) {
	t := &guardTransport{
		log:        logger,
		warns:      ratelog.New(logger, refusalLogEvery),
		packetCh:   make(chan *memberlist.Packet, packetQueue),
		streamCh:   make(chan net.Conn),
		done:       make(chan struct{}),
		streamWait: min(streamWait, maxStreamWait),
		streamsBy:  map[netip.Addr]int{},
		bindAddr:   bind.Addr(),

		memberSocks: map[netip.AddrPort]*udpReader{},
		byName:      map[string]netip.AddrPort{},
	}
	if t.streamWait <= 0 {
		t.streamWait = maxStreamWait
	}
	if keys != nil {
		if err := t.setKeys(keys); err != nil {
			return nil, err
		}
	}
	t.members.Store(&map[netip.AddrPort]struct{}{})
	var err error
	if t.tcp, t.udp, err = listenGossip(bind); err != nil {
		return nil, err
	}
	t.port = t.tcp.Addr().(*net.TCPAddr).Port
	main := t.newReader(t.udp, udpRecvBuf, false)
	t.wg.Add(2)
	go main.loop()
	go t.acceptLoop()
	return t, nil
}

// newReader prepares a socket for reading: its receive buffer (best
// effort: the kernel caps it at net.core.rmem_max) and the kernel's count
// of what it dropped.
func (t *guardTransport) newReader(c *net.UDPConn, rcvbuf int, member bool) *udpReader {
	for size := rcvbuf; size >= 64<<10; size /= 2 {
		if c.SetReadBuffer(size) == nil {
			break
		}
	}
	enableOverflowCount(c)
	r := &udpReader{t: t, conn: c, batch: ipv4.NewPacketConn(c), member: member}
	if !member {
		r.trusted = map[netip.AddrPort]time.Time{}
		r.windowBy = map[netip.Addr]int{}
	}
	return r
}

// listenGossip binds TCP and UDP on one port; with port 0 it retries when
// the port the kernel gave TCP is taken for UDP.
func listenGossip(bind netip.AddrPort) (*net.TCPListener, *net.UDPConn, error) {
	for attempt := 1; ; attempt++ {
		tcp, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(bind))
		if err != nil {
			return nil, nil, err
		}
		port := tcp.Addr().(*net.TCPAddr).Port
		// SO_REUSEPORT so that members' own sockets can share the port
		// (TCP, without it, still stops a second gateway on one port).
		lc := net.ListenConfig{Control: reusePort}
		pc, err := lc.ListenPacket(context.Background(), "udp", netip.AddrPortFrom(bind.Addr(), uint16(port)).String())
		if err == nil {
			return tcp, pc.(*net.UDPConn), nil
		}
		_ = tcp.Close()
		if bind.Port() != 0 || attempt == 10 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, err
		}
	}
}

// setKeys replaces the keys datagrams and streams are authenticated with.
func (t *guardTransport) setKeys(keys [][]byte) error {
	aeads := make([]cipher.AEAD, 0, len(keys))
	for _, k := range keys {
		block, err := aes.NewCipher(k)
		if err != nil {
			return fmt.Errorf("region: gossip key: %w", err)
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			return fmt.Errorf("region: gossip key: %w", err)
		}
		aeads = append(aeads, gcm)
	}
	t.keys.Store(&aeads)
	return nil
}

// setMember records that member name's gossip address is addr (or, with
// present false, that it is gone), and opens (closes) the member's own
// socket. self is this gateway. A member that comes back at another
// address gives up the old one.
func (t *guardTransport) setMember(name string, addr netip.AddrPort, present, self bool) {
	if !addr.IsValid() {
		return
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	t.membersMu.Lock()
	defer t.membersMu.Unlock()
	if t.closed.Load() {
		return
	}
	if prev, ok := t.byName[name]; ok && prev != addr {
		t.setMemberLocked(prev, false, self)
	}
	if present {
		t.byName[name] = addr
	} else {
		delete(t.byName, name)
	}
	t.setMemberLocked(addr, present, self)
}

func (t *guardTransport) setMemberLocked(addr netip.AddrPort, present, self bool) {
	old := *t.members.Load()
	if _, ok := old[addr]; ok != present {
		m := make(map[netip.AddrPort]struct{}, len(old)+1)
		for a := range old {
			m[a] = struct{}{}
		}
		if present {
			m[addr] = struct{}{}
		} else {
			delete(m, addr)
		}
		t.members.Store(&m)
	}
	if self {
		return
	}
	r, open := t.memberSocks[addr]
	switch {
	case present && !open && len(t.memberSocks) < maxMemberSockets:
		r, err := t.openMemberSocket(addr)
		if err != nil {
			t.warns.Warn("member-socket", "gossip from a member shares the flooded port: no socket of its own",
				"member", addr.String(), "err", err)
			return
		}
		t.memberSocks[addr] = r
		t.wg.Add(1)
		go r.loop()
	case !present && open:
		delete(t.memberSocks, addr)
		_ = r.conn.Close()
	}
}

// openMemberSocket opens a socket on the gossip port connected to a
// member's gossip address. Linux delivers a datagram to the connected
// socket whose remote address matches its source before the port's
// listening socket, so a member's probes and acks never queue behind junk
// sent to the port: a flood fills the listening socket's buffer, not
// this one (unless it comes from the member's own address, spoofed: then
// that member alone is muffled, and the others still vouch for this
// gateway).
func (t *guardTransport) openMemberSocket(addr netip.AddrPort) (*udpReader, error) {
	if !memberSockets {
		return nil, errors.New("not supported on this system")
	}
	if t.bindAddr.Is4() != addr.Addr().Is4() && !t.bindAddr.IsUnspecified() {
		return nil, errors.New("address family differs from the gossip bind address")
	}
	d := net.Dialer{
		LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(t.bindAddr, uint16(t.port))),
		Control:   reusePort,
	}
	c, err := d.Dial("udp", addr.String())
	if err != nil {
		return nil, err
	}
	return t.newReader(c.(*net.UDPConn), memberRecvBuf, true), nil
}

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *guardTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if port == 0 {
		port = t.port
	}
	if ip == "" {
		return t.tcp.Addr().(*net.TCPAddr).IP, port, nil
	}
	a := net.ParseIP(ip)
	if a == nil {
		return nil, 0, fmt.Errorf("region: advertise address %q is not an IP", ip)
	}
	if a4 := a.To4(); a4 != nil {
		a = a4
	}
	return a, port, nil
}

// WriteTo implements memberlist.Transport.
func (t *guardTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *guardTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	ap, err := netip.ParseAddrPort(a.Addr)
	if err != nil {
		ua, rerr := net.ResolveUDPAddr("udp", a.Addr)
		if rerr != nil {
			return time.Time{}, rerr
		}
		ap = ua.AddrPort()
	}
	n, err := t.udp.WriteToUDPAddrPort(b, ap)
	t.pktSent.Add(uint64(n))
	return time.Now(), err
}

// PacketCh implements memberlist.Transport.
func (t *guardTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport.
func (t *guardTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: c, sent: &t.strSent, recv: &t.strRecv}, nil
}

// countConn counts a stream's bytes.
type countConn struct {
	net.Conn
	sent, recv *atomic.Uint64
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.recv.Add(uint64(n))
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.Add(uint64(n))
	return n, err
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *guardTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// StreamCh implements memberlist.Transport.
func (t *guardTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown implements memberlist.Transport.
func (t *guardTransport) Shutdown() error {
	if t.closed.Swap(true) {
		return nil
	}
	close(t.done)
	_ = t.tcp.Close()
	_ = t.udp.Close()
	t.membersMu.Lock()
	for a, r := range t.memberSocks {
		_ = r.conn.Close()
		delete(t.memberSocks, a)
	}
	t.membersMu.Unlock()
	t.wg.Wait()
	return nil
}

// udpReader is one socket's reading goroutine and the state only it
// touches: the gossip port's listening socket, or a member's own.
type udpReader struct {
	t        *guardTransport
	conn     *net.UDPConn
	batch    *ipv4.PacketConn // conn, read a batch at a time
	member   bool             // a member's own socket
	scratch  []byte           // decryption output, discarded
	overflow uint32           // last SO_RXQ_OVFL value seen

	// The listening socket only.
	trusted   map[netip.AddrPort]time.Time // authenticated lately, by source
	window    time.Time                    // start of the current rate window
	windowAll int                          // untrusted datagrams let through in it
	windowBy  map[netip.Addr]int           // the same per source address
}

// loop reads the socket a batch at a time and checks every datagram
// before it is queued for memberlist.
func (r *udpReader) loop() {
	t := r.t
	defer t.wg.Done()
	batch := readBatch
	if r.member {
		batch = memberReadBatch
	}
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, maxDatagram)}
		msgs[i].OOB = make([]byte, overflowOOBSize)
	}
	var errPause time.Duration
	for {
		n, err := r.batch.ReadBatch(msgs, 0)
		now := time.Now()
		if err != nil {
			if t.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				continue // a member's socket, after an ICMP error
			}
			t.warns.Warn("read", "reading gossip datagrams", "err", err)
			// A persistent error must not spin a core.
			errPause = min(max(2*errPause, time.Millisecond), time.Second)
			select {
			case <-t.done:
				return
			case <-time.After(errPause):
			}
			continue
		}
		errPause = 0
		if n > 0 {
			if v, ok := parseOverflow(msgs[n-1].OOB[:msgs[n-1].NN]); ok {
				if d := v - r.overflow; d > 0 {
					total := t.dropped[dSocketOverflow].Add(uint64(d))
					t.warns.Warn(DropSocketOverflow, "gossip datagrams dropped by the kernel: the receive buffer was full",
						"reason", DropSocketOverflow, "member_socket", r.member, "total", total)
				}
				r.overflow = v
			}
		}
		for i := range n {
			r.handle(&msgs[i], now)
		}
	}
}

// handle checks one datagram and queues it for memberlist or drops it.
func (r *udpReader) handle(m *ipv4.Message, now time.Time) {
	t := r.t
	from, ok := m.Addr.(*net.UDPAddr)
	if !ok {
		return
	}
	src := from.AddrPort()
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	t.pktRecv.Add(uint64(m.N))
	b := m.Buffers[0][:m.N]
	d := -1
	if m.Flags&msgTrunc != 0 || m.N >= maxDatagram {
		d = dTooLong
	} else {
		d = r.check(b, src, now)
	}
	if d >= 0 {
		t.drop(d, src, now)
		return
	}
	p := &memberlist.Packet{Buf: slices.Clone(b), From: &net.UDPAddr{IP: slices.Clone(from.IP), Port: from.Port, Zone: from.Zone}, Timestamp: now}
	select {
	case t.packetCh <- p:
		t.accepted.Add(1)
		if r.member {
			t.acceptedMember.Add(1)
		}
	default:
		t.drop(dQueueFull, src, now)
	}
}

// check returns the drop reason of datagram b from src, or -1 to accept it.
func (r *udpReader) check(b []byte, src netip.AddrPort, now time.Time) int {
	keys := r.t.keys.Load()
	if keys == nil {
		// Clear gossip cannot be authenticated: check the shape and
		// limit strangers.
		switch {
		case len(b) < 1:
			return dTooShort
		case b[0] > mlMaxMsgType || b[0] == mlEncryptMsg:
			return dFormat
		case !r.isTrusted(src, now) && !r.spend(src.Addr(), now):
			return dRate
		}
		return -1
	}
	switch {
	case len(b) < mlMinEncrypted:
		return dTooShort
	case b[0] > 1: // memberlist's encryption versions are 0 and 1
		return dFormat
	case !r.isTrusted(src, now) && !r.spend(src.Addr(), now):
		return dRate
	}
	nonce, sealed := b[1:1+mlNonceSize], b[1+mlNonceSize:]
	for _, k := range *keys {
		var err error
		if r.scratch, err = k.Open(r.scratch[:0], nonce, sealed, nil); err == nil {
			r.trust(src, now)
			return -1
		}
	}
	return dDecrypt
}

func (r *udpReader) isTrusted(src netip.AddrPort, now time.Time) bool {
	if r.member || r.t.noLimit.Load() {
		return true
	}
	if _, ok := (*r.t.members.Load())[src]; ok {
		return true
	}
	at, ok := r.trusted[src]
	return ok && now.Sub(at) < trustTTL
}

// trust records that src just sent an authenticated datagram.
func (r *udpReader) trust(src netip.AddrPort, now time.Time) {
	if r.member {
		return
	}
	if at, ok := r.trusted[src]; ok {
		if now.Sub(at) > time.Second {
			r.trusted[src] = now
		}
		return
	}
	if len(r.trusted) >= maxTrusted {
		for a, at := range r.trusted {
			if now.Sub(at) >= trustTTL {
				delete(r.trusted, a)
			}
		}
		if len(r.trusted) >= maxTrusted {
			return
		}
	}
	r.trusted[src] = now
}

// spend takes one datagram from the budgets of untrusted sources; false
// when the datagram is over budget.
func (r *udpReader) spend(ip netip.Addr, now time.Time) bool {
	if now.Sub(r.window) >= time.Second || now.Before(r.window) {
		r.window, r.windowAll = now, 0
		clear(r.windowBy)
	}
	if r.windowAll >= untrustedTotal {
		return false
	}
	n := r.windowBy[ip]
	if n >= untrustedPerIP {
		return false
	}
	r.windowBy[ip] = n + 1
	r.windowAll++
	return true
}

func (t *guardTransport) drop(d int, src netip.AddrPort, now time.Time) {
	total := t.dropped[d].Add(1)
	// The flood path: one atomic load when no line is due.
	g := &t.dropLog[d]
	next := g.next.Load()
	if now.UnixNano() < next || !g.next.CompareAndSwap(next, now.Add(refusalLogEvery).UnixNano()) {
		g.suppressed.Add(1)
		return
	}
	args := []any{"reason", dropIndex[d], "from", src.String(), "total", total}
	if n := g.suppressed.Swap(0); n > 0 {
		args = append(args, "suppressed", n)
	}
	t.log.Warn("dropping gossip datagrams", args...)
}

// logGate lets one line through per interval; the lines it holds back are
// counted and reported with the next.
type logGate struct {
	next       atomic.Int64 // unix nanoseconds
	suppressed atomic.Uint64
}

// refuse counts and logs (rate-limited, at warn) a refusal.
func (t *guardTransport) refuse(r int, from string, msg string, args ...any) {
	total := t.refused[r].Add(1)
	reason := refuseIndex[r]
	if ok, n := t.warns.Allow("refuse:" + reason); ok {
		args = append(args, "reason", reason, "from", from, "total", total)
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		t.log.Warn(msg, args...)
	}
}

func (t *guardTransport) acceptLoop() {
	defer t.wg.Done()
	var pause time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closed.Load() {
				return
			}
			t.warns.Warn("accept", "accepting a gossip stream", "err", err)
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			select {
			case <-t.done:
				return
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		ip := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		if !t.openStream(ip) {
			_ = conn.Close()
			t.refuse(rStreamLimit, ip.String(), "refused a gossip stream: too many open",
				"limit", maxStreams, "per_address", maxStreamsPerIP)
			continue
		}
		t.wg.Add(1)
		go t.serveStream(&streamConn{TCPConn: conn, t: t, ip: ip})
	}
}

func (t *guardTransport) openStream(ip netip.Addr) bool {
	t.streamMu.Lock()
	defer t.streamMu.Unlock()
	if t.streams >= maxStreams || t.streamsBy[ip] >= maxStreamsPerIP {
		return false
	}
	t.streams++
	t.streamsBy[ip]++
	return true
}

func (t *guardTransport) closeStream(ip netip.Addr) {
	t.streamMu.Lock()
	defer t.streamMu.Unlock()
	t.streams--
	if t.streamsBy[ip]--; t.streamsBy[ip] <= 0 {
		delete(t.streamsBy, ip)
	}
}

// serveStream authenticates a stream's first message when gossip is
// encrypted, then hands the stream to memberlist. A stream no key
// decrypts, or a clear one, is counted and logged but still handed over:
// memberlist answers it with an error, which is how the other gateway
// learns why it was refused.
func (t *guardTransport) serveStream(c *streamConn) {
	defer t.wg.Done()
	if keys := t.keys.Load(); keys != nil {
		_ = c.SetDeadline(time.Now().Add(t.streamWait))
		first, r, err := readFirstMessage(c.TCPConn, *keys)
		t.strRecv.Add(uint64(len(first)))
		switch {
		case r == rStreamTimeout || r == rStreamSize:
			t.refuse(r, c.ip.String(), "refused a gossip stream", "err", err)
			_ = c.Close()
			return
		case r == rKeyring:
			t.refuse(r, c.ip.String(), "refused gossip from a gateway with another keyring: no installed key decrypts its stream")
		case r == rUnencrypted:
			t.refuse(r, c.ip.String(), "refused a clear gossip stream: this gateway encrypts gossip (is the other one missing gossip.keyring?)")
		case err != nil: // closed before saying anything
			_ = c.Close()
			return
		}
		c.first = first
		_ = c.SetDeadline(time.Time{}) // memberlist sets its own
	}
	select {
	case t.streamCh <- c:
	case <-t.done:
		_ = c.Close()
	}
}

// readFirstMessage reads a stream's first message (memberlist's
// encryptMsg: type, big-endian length, then the sealed payload, whose
// additional data is the 5-byte header) and tries the keys on it. It
// returns the bytes read, to be replayed to memberlist, and a refusal
// reason or -1.
func readFirstMessage(r io.Reader, keys []cipher.AEAD) ([]byte, int, error) {
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return nil, timeoutReason(err), err
	}
	if hdr[0] != mlEncryptMsg {
		return hdr[:1], rUnencrypted, nil
	}
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		return nil, timeoutReason(err), err
	}
	size := binary.BigEndian.Uint32(hdr[1:])
	if size > maxStreamMessage {
		return nil, rStreamSize, fmt.Errorf("first message of %d bytes, limit %d", size, maxStreamMessage)
	}
	msg := make([]byte, 5+int(size))
	copy(msg, hdr)
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return nil, timeoutReason(err), err
	}
	body := msg[5:]
	if len(body) < mlMinEncrypted || body[0] > 1 {
		return msg, rKeyring, nil
	}
	for _, k := range keys {
		if _, err := k.Open(nil, body[1:1+mlNonceSize], body[1+mlNonceSize:], hdr); err == nil {
			return msg, -1, nil
		}
	}
	return msg, rKeyring, nil
}

// timeoutReason: a stream that stalls is refused; one closed early (a port
// scan) is only closed.
func timeoutReason(err error) int {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return rStreamTimeout
	}
	return -1
}

// streamConn is an accepted stream: what the guard read first is replayed
// to memberlist, and closing it frees its place under the stream limits.
type streamConn struct {
	*net.TCPConn
	t     *guardTransport
	ip    netip.Addr
	first []byte
	once  sync.Once
}

func (c *streamConn) Read(b []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(b, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	n, err := c.TCPConn.Read(b)
	c.t.strRecv.Add(uint64(n))
	return n, err
}

func (c *streamConn) Write(b []byte) (int, error) {
	n, err := c.TCPConn.Write(b)
	c.t.strSent.Add(uint64(n))
	return n, err
}

func (c *streamConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(func() { c.t.closeStream(c.ip) })
	return err
}

// memberSocketCount is how many members have a socket of their own.
func (t *guardTransport) memberSocketCount() int {
	t.membersMu.Lock()
	defer t.membersMu.Unlock()
	return len(t.memberSocks)
}

// stats returns the guard's counters, every reason present.
func (t *guardTransport) stats() (accepted uint64, dropped, refused map[string]uint64) {
	dropped = make(map[string]uint64, len(dropIndex))
	for i, r := range dropIndex {
		dropped[r] = t.dropped[i].Load()
	}
	refused = make(map[string]uint64, len(refuseIndex))
	for i, r := range refuseIndex {
		refused[r] = t.refused[i].Load()
	}
	return t.accepted.Load(), dropped, refused
}
