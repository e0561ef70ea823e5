package region

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/internal/ratelog"
	"github.com/mrgw/mrgw/internal/sockbuf"

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
	// (it grants at most net.core.rmem_max unless the process has
	// CAP_NET_ADMIN: newReader); a larger buffer rides out a
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

// newReader prepares a socket for reading: its receive buffer (past
// net.core.rmem_max with CAP_NET_ADMIN, else best effort: the kernel caps
// it there; internal/sockbuf) and the kernel's count of what it dropped.
func (t *guardTransport) newReader(c *net.UDPConn, rcvbuf int, member bool) *udpReader {
	for size := rcvbuf; size >= 64<<10; size /= 2 {
		if sockbuf.SetRead(c, size) == nil {
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
