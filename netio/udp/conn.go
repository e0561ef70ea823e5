//go:build linux

// Package udp is the per-path socket layer of the tunnel: one Conn is one
// local UDP port, and that port is the path's ECMP entropy (docs/PROTOCOL.md).
// A new path, or a path whose entropy is re-rolled, is a new Conn.
//
// The API is batch-first, after wireguard-go's conn package: ReadBatch and
// WriteBatch move many datagrams per system call. ReadBatch is this
// package's own recvmmsg (mmsg.go), with every header and address buffer
// allocated once, so that a steady-state receive allocates nothing;
// WriteBatch is sendmmsg through golang.org/x/net/ipv4 and ipv6, which
// does not allocate either. Every outgoing datagram carries an ECN
// codepoint (ECT(0) unless told otherwise) and every received datagram
// reports its ECN bits, through internal/ecn, because ECN marks are the
// congestion signal the controllers run on.
//
// Where the kernel offers them, UDP segmentation offload is used in both
// directions: WriteBatch coalesces runs of equal-sized datagrams to the same
// destination into one UDP_SEGMENT send, and ReadBatch splits UDP_GRO
// super-datagrams back into single datagrams. Both are probed when the
// Conn opens; if a GSO send fails at run time the Conn turns GSO off for
// good, counts the fallback and resends without it.
//
// A Conn is safe for concurrent use; concurrent ReadBatch calls (or
// WriteBatch calls) are serialized. It is Linux only. It knows nothing of
// encryption (netio/seal) or of paths' state (pathmgr).
//
// It imports only internal/ecn from mrgw (internal/layering checks it).
package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/internal/sockbuf"
)

// Message is one datagram. On ReadBatch the Conn fills Buf[:N] with the
// payload and sets N, Addr (the sender) and ECN (the codepoint it arrived
// with). On WriteBatch the Conn sends Buf[:N] to Addr with codepoint ECN,
// where ECN's zero value, NotECT, stands for the Conn's default
// (Options.ECN).
type Message struct {
	Buf  []byte
	N    int
	Addr netip.AddrPort
	ECN  ecn.Codepoint
}

// Options configure a Conn. The zero value is the production default.
type Options struct {
	// ECN is the codepoint of outgoing datagrams whose Message.ECN is
	// NotECT. Zero means ECT(0).
	ECN ecn.Codepoint
	// NotECT sends datagrams that name no codepoint as Not-ECT instead, as
	// a baseline that does not take part in ECN.
	NotECT bool
	// DisableGSO and DisableGRO turn the offloads off even where the
	// kernel has them.
	DisableGSO bool
	DisableGRO bool
	// BatchSize is the most datagrams (or GSO super-datagrams) per
	// recvmmsg/sendmmsg. Zero means DefaultBatchSize.
	BatchSize int
	// GROBuffers is how many 64 KiB buffers a GRO-enabled Conn reads into
	// per recvmmsg; each may hold up to 64 coalesced datagrams. Zero means
	// DefaultGROBuffers. Memory per Conn is GROBuffers × 64 KiB.
	GROBuffers int
	// ReadBuffer and WriteBuffer ask for SO_RCVBUF and SO_SNDBUF of this
	// many bytes when non-zero: past net.core.rmem_max and wmem_max where
	// the process has CAP_NET_ADMIN, else as much as those allow
	// (internal/sockbuf). Stats says what was granted.
	ReadBuffer, WriteBuffer int
	// ListenUDP, if set, opens the socket in place of net.ListenUDP, with
	// the same arguments. A load test uses it to open every path socket
	// inside a network namespace (loadtest/tunemu), since an endpoint
	// opens path sockets on demand on goroutines of its own.
	ListenUDP func(network string, laddr *net.UDPAddr) (*net.UDPConn, error)
	// DontFragment sets IP_MTU_DISCOVER (IPV6_MTU_DISCOVER) to
	// IP_PMTUDISC_PROBE: every datagram leaves with DF set and the kernel
	// never fragments it, whatever its path MTU cache says, so that
	// packetization-layer path MTU discovery (metaroce.PMTUSearch) sees
	// sizes that do not fit as losses; a datagram larger than the
	// interface's MTU fails with EMSGSIZE (IsTooBig).
	DontFragment bool
}

// IsTooBig reports whether a send failed because the datagram was larger
// than the local stack would send (EMSGSIZE).
func IsTooBig(err error) bool { return errors.Is(err, unix.EMSGSIZE) }

// Defaults for Options.
const (
	DefaultBatchSize  = 64
	DefaultGROBuffers = 4
	groBufSize        = 1 << 16 // the largest UDP payload, rounded up
	// groShrinkAfter is how many GRO reads in a row that filled at most
	// half of the buffers take one away.
	groShrinkAfter = 16
	// maxIovecs bounds the payload pieces of one sendmmsg (the kernel
	// allows 1024 per message; one per datagram here).
	maxIovecs = 1024
)

// Stats are a Conn's counters since it opened.
type Stats struct {
	DatagramsIn, BytesIn   uint64 // single datagrams received (after GRO split) and their payload bytes
	DatagramsOut, BytesOut uint64 // single datagrams sent (before GSO split) and their payload bytes
	CEIn                   uint64 // datagrams received marked CE
	Truncated              uint64 // datagrams longer than the buffer given for them
	GSOSends               uint64 // sendmsgs that carried more than one segment
	GROReads               uint64 // received buffers that held more than one datagram
	GSOFallbacks           uint64 // times a GSO send failed and GSO was turned off
	GSO, GRO               bool   // whether each offload is in use now
	// ReadBuffer and WriteBuffer are the socket buffers the kernel
	// granted, in the bytes Options asks in (half what SO_RCVBUF and
	// SO_SNDBUF read back: the kernel doubles a request for its
	// bookkeeping); 0 if not known.
	ReadBuffer, WriteBuffer int
}

// Conn is one path's UDP socket. Create it with Listen.
type Conn struct {
	udp   *net.UDPConn
	batch interface { // *ipv4.PacketConn or *ipv6.PacketConn: sendmmsg
		WriteBatch(ms []ipv4.Message, flags int) (int, error)
	}
	local   netip.AddrPort
	v6      bool          // IPv6 socket: send IPV6_TCLASS cmsgs
	defECN  ecn.Codepoint // resolved Options.ECN
	gso     atomic.Bool
	gro     bool
	batchSz int
	// rbuf, wbuf: the socket buffers granted (Stats.ReadBuffer, WriteBuffer).
	rbuf, wbuf int

	rmu   sync.Mutex // guards the read state below
	rd    *mmsgReader
	rbufv [][]byte // the buffers of one read
	rbufs [][]byte // GRO buffers, nil without GRO
	// quietReads counts the GRO reads in a row that filled at most half
	// of rbufs.
	quietReads int
	pending    []pendingBuf // undelivered rest of the last GRO read, in order

	wmu    sync.Mutex // guards the write state below
	wmsgs  []ipv4.Message
	waddrs []net.UDPAddr
	wips   [][16]byte
	woob   [][]byte
	iovs   [][]byte
	groups []sendGroup

	stats struct {
		datagramsIn, bytesIn, datagramsOut, bytesOut atomic.Uint64
		ceIn, truncated, gsoSends, groReads          atomic.Uint64
		gsoFallbacks                                 atomic.Uint64
	}
	closeOnce sync.Once
	closeErr  error
}

// pendingBuf is the undelivered rest of a GRO buffer.
type pendingBuf struct {
	buf     []byte // remaining payload
	segSize int
	addr    netip.AddrPort
	ecn     ecn.Codepoint
}

// Listen opens a Conn on local. Port 0 picks an ephemeral port: a fresh
// ECMP entropy. An IPv4 address (including 0.0.0.0) opens an IPv4 socket,
// an IPv6 address (including ::) an IPv6-only socket.
func Listen(local netip.AddrPort, opts Options) (*Conn, error) {
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	network := "udp4"
	if local.Addr().Is6() {
		network = "udp6"
	}
	listen := net.ListenUDP
	if opts.ListenUDP != nil {
		listen = opts.ListenUDP
	}
	uc, err := listen(network, net.UDPAddrFromAddrPort(local))
	if err != nil {
		return nil, fmt.Errorf("udp: listen %v: %w", local, err)
	}
	c, err := newConn(uc, network == "udp6", opts)
	if err != nil {
		uc.Close()
		return nil, err
	}
	return c, nil
}

func newConn(uc *net.UDPConn, v6 bool, opts Options) (*Conn, error) {
	c := &Conn{
		udp:     uc,
		local:   uc.LocalAddr().(*net.UDPAddr).AddrPort(),
		v6:      v6,
		defECN:  ecn.ECT0,
		batchSz: opts.BatchSize,
	}
	if opts.ECN != ecn.NotECT {
		c.defECN = opts.ECN
	}
	if opts.NotECT {
		c.defECN = ecn.NotECT
	}
	if c.batchSz <= 0 {
		c.batchSz = DefaultBatchSize
	}
	if v6 {
		c.batch = ipv6.NewPacketConn(uc)
	} else {
		c.batch = ipv4.NewPacketConn(uc)
	}
	if opts.ReadBuffer > 0 {
		if err := sockbuf.SetRead(uc, opts.ReadBuffer); err != nil {
			return nil, fmt.Errorf("udp: SO_RCVBUF: %w", err)
		}
	}
	if opts.WriteBuffer > 0 {
		if err := sockbuf.SetWrite(uc, opts.WriteBuffer); err != nil {
			return nil, fmt.Errorf("udp: SO_SNDBUF: %w", err)
		}
	}
	c.rbuf, c.wbuf = sockbuf.Granted(uc)
	if err := ecn.EnableReceive(uc); err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	if opts.DontFragment {
		if err := setDontFragment(uc, v6); err != nil {
			return nil, fmt.Errorf("udp: IP_MTU_DISCOVER: %w", err)
		}
	}
	gso, gro := probeOffloads(uc, !opts.DisableGSO, !opts.DisableGRO)
	c.gso.Store(gso)
	c.gro = gro

	// Read side: with GRO the kernel hands over up to 64 KiB per message,
	// so reads go through the Conn's own buffers and are split into the
	// caller's; without GRO they land straight in the caller's buffers.
	nr := c.batchSz
	if gro {
		nr = opts.GROBuffers
		if nr <= 0 {
			nr = DefaultGROBuffers
		}
		// One buffer to start with; a read that fills every buffer with
		// datagrams already waiting when it was made (a backlog) adds
		// one, up to nr, and groShrinkAfter reads in a row that fill at
		// most half of them take one away: a socket that receives a
		// datagram at a time holds 64 KiB, not nr times that.
		c.rbufs = make([][]byte, 1, nr)
		c.rbufs[0] = make([]byte, groBufSize)
		c.pending = make([]pendingBuf, 0, nr)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	c.rd = newMmsgReader(rc, nr, ecn.RecvSpace)
	c.rbufv = make([][]byte, nr)

	// Write side: one sendmsg per group, its payload gathered from the
	// caller's buffers by iovecs, so GSO costs no copy.
	c.wmsgs = make([]ipv4.Message, c.batchSz)
	c.waddrs = make([]net.UDPAddr, c.batchSz)
	c.wips = make([][16]byte, c.batchSz)
	c.woob = make([][]byte, c.batchSz)
	woob := make([]byte, c.batchSz*ecn.SendSpace)
	for i := range c.wmsgs {
		c.woob[i] = woob[i*ecn.SendSpace : i*ecn.SendSpace : (i+1)*ecn.SendSpace]
		c.wmsgs[i].Addr = &c.waddrs[i]
	}
	c.iovs = make([][]byte, max(c.batchSz, maxIovecs))
	c.groups = make([]sendGroup, 0, c.batchSz)
	return c, nil
}

// probeOffloads reports which offloads the kernel grants this socket.
// GSO: getsockopt(UDP_SEGMENT) exists exactly on kernels that support it.
// GRO: setsockopt(UDP_GRO) switches it on.
func probeOffloads(uc *net.UDPConn, wantGSO, wantGRO bool) (gso, gro bool) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return false, false
	}
	rc.Control(func(fd uintptr) {
		if wantGSO {
			_, err := unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
			gso = err == nil
		}
		if wantGRO {
			gro = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) == nil
		}
	})
	return gso, gro
}

// LocalAddr returns the bound address; its port is the path's entropy.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// SetReadDeadline bounds a blocked ReadBatch, as net.Conn's does.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.udp.SetReadDeadline(t) }

// Close closes the socket; blocked calls return net.ErrClosed.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.udp.Close() })
	return c.closeErr
}

// Stats returns a snapshot of the counters.
func (c *Conn) Stats() Stats {
	s := &c.stats
	return Stats{
		DatagramsIn: s.datagramsIn.Load(), BytesIn: s.bytesIn.Load(),
		DatagramsOut: s.datagramsOut.Load(), BytesOut: s.bytesOut.Load(),
		CEIn: s.ceIn.Load(), Truncated: s.truncated.Load(),
		GSOSends: s.gsoSends.Load(), GROReads: s.groReads.Load(),
		GSOFallbacks: s.gsoFallbacks.Load(),
		GSO:          c.gso.Load(), GRO: c.gro,
		ReadBuffer: c.rbuf, WriteBuffer: c.wbuf,
	}
}

// ReadBatch blocks until at least one datagram is available and fills
// msgs[:n] with up to len(msgs) datagrams, each in its Message's Buf (which
// should hold the largest datagram expected; longer ones are truncated and
// counted). GRO super-datagrams are split, one datagram per Message; what
// does not fit is delivered by the next call.
func (c *Conn) ReadBatch(msgs []Message) (int, error) { return c.read(msgs, false) }

// ReadBatchBorrow is ReadBatch without the copy that splits GRO
// super-datagrams: a datagram that arrived coalesced is left in the Conn's
// own buffer, and its Message's Buf is set to it (N bytes; Buf's capacity
// ends with the datagram). Such a Buf is valid only until the next read on
// this Conn, and the caller must put its own buffer back before reusing
// the Message. Where a datagram has to be transformed anyway (decrypted),
// the transformation can then read it where it lies instead of after a
// copy.
func (c *Conn) ReadBatchBorrow(msgs []Message) (int, error) { return c.read(msgs, true) }

func (c *Conn) read(msgs []Message, borrow bool) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.gro {
		return c.readGRO(msgs, borrow)
	}
	return c.readPlain(msgs)
}

// readPlain reads straight into the callers' buffers.
func (c *Conn) readPlain(msgs []Message) (int, error) {
	nr := min(len(msgs), len(c.rbufv))
	bufs := c.rbufv[:nr]
	for i := range bufs {
		bufs[i] = msgs[i].Buf
	}
	n, err := c.rd.read(bufs)
	clear(bufs) // do not keep the caller's buffers alive
	if err != nil {
		return 0, err
	}
	var bytes, ce uint64
	for i := range n {
		size, from, oob, trunc := c.rd.datagram(i)
		ctl, _ := ecn.ParseControl(oob)
		msgs[i].N = min(size, len(msgs[i].Buf))
		msgs[i].Addr = from
		msgs[i].ECN = ctl.ECN
		if trunc {
			c.stats.truncated.Add(1)
		}
		bytes += uint64(msgs[i].N)
		if ctl.ECN == ecn.CE {
			ce++
		}
	}
	c.countIn(uint64(n), bytes, ce)
	return n, nil
}

// readGRO serves msgs from pending GRO buffers, reading more only when none
// are left; borrow hands out slices of them instead of copying.
func (c *Conn) readGRO(msgs []Message, borrow bool) (int, error) {
	if len(c.pending) == 0 {
		if k := len(c.rbufs) - 1; c.quietReads >= groShrinkAfter && k > 0 {
			c.rbufs[k] = nil
			c.rbufs = c.rbufs[:k]
		}
		n, err := c.rd.read(c.rbufs)
		if err != nil {
			return 0, err
		}
		switch {
		case n == len(c.rbufs) && n < cap(c.rbufs) && !c.rd.waited:
			c.rbufs = append(c.rbufs, make([]byte, groBufSize))
			c.quietReads = 0
		case 2*n <= len(c.rbufs):
			c.quietReads++
		default:
			c.quietReads = 0
		}
		for i := range n {
			size, from, oob, _ := c.rd.datagram(i)
			size = min(size, len(c.rbufs[i]))
			ctl, _ := ecn.ParseControl(oob)
			seg := ctl.GROSize
			if seg <= 0 || seg >= size {
				seg = size // a single datagram
			} else {
				c.stats.groReads.Add(1)
			}
			c.pending = append(c.pending, pendingBuf{
				buf: c.rbufs[i][:size], segSize: seg,
				addr: from, ecn: ctl.ECN,
			})
		}
	}
	var n int
	var bytes, ce uint64
	for n < len(msgs) && len(c.pending) > 0 {
		p := &c.pending[0]
		seg := min(p.segSize, len(p.buf))
		m := &msgs[n]
		if borrow {
			m.Buf, m.N = p.buf[:seg:seg], seg
		} else if m.N = copy(m.Buf, p.buf[:seg]); m.N < seg {
			c.stats.truncated.Add(1)
		}
		m.Addr, m.ECN = p.addr, p.ecn
		bytes += uint64(seg)
		if p.ecn == ecn.CE {
			ce++
		}
		n++
		if p.buf = p.buf[seg:]; len(p.buf) == 0 || seg == 0 {
			// Shift rather than reslice, so pending keeps its backing array.
			copy(c.pending, c.pending[1:])
			c.pending = c.pending[:len(c.pending)-1]
		}
	}
	c.countIn(uint64(n), bytes, ce)
	return n, nil
}

func (c *Conn) countIn(n, bytes, ce uint64) {
	c.stats.datagramsIn.Add(n)
	c.stats.bytesIn.Add(bytes)
	if ce > 0 {
		c.stats.ceIn.Add(ce)
	}
}

// WriteBatch sends msgs in order and returns how many were sent. With GSO,
// runs of consecutive messages to one destination with one size and one
// codepoint leave as one super-datagram (see planGSO); the receiver still
// sees separate datagrams. If a GSO send fails with an error that says the
// kernel or device cannot segment it, GSO is turned off for this Conn and
// the messages are resent one by one.
func (c *Conn) WriteBatch(msgs []Message) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	sent := 0
	for sent < len(msgs) {
		gso := c.gso.Load()
		maxSegs := 1
		if gso {
			maxSegs = maxGSOSegments
		}
		// Plan only as far ahead as one sendmmsg can go.
		rest := msgs[sent:]
		rest = rest[:min(len(rest), c.batchSz*maxSegs)]
		c.groups = planGSO(c.groups[:0], rest, maxSegs, maxGSOBytes, c.defECN)
		groups := c.groups[:min(len(c.groups), c.batchSz)]
		n, err := c.send(rest, groups)
		for _, g := range groups[:n] {
			sent += g.count
		}
		if err == nil {
			continue
		}
		if gso && n < len(groups) && groups[n].count > 1 && gsoUnsupported(err) {
			c.gso.Store(false)
			c.stats.gsoFallbacks.Add(1)
			continue
		}
		return sent, fmt.Errorf("udp: send to %v: %w", msgs[sent].Addr, err)
	}
	return sent, nil
}

// send builds one sendmmsg from groups (indices into msgs) and returns how
// many groups the kernel took.
func (c *Conn) send(msgs []Message, groups []sendGroup) (int, error) {
	iovs := c.iovs[:0]
	wm := c.wmsgs[:len(groups)]
	for i, g := range groups {
		// Once the iovec pool is full, send what is packed so far; the
		// caller loops for the rest.
		if len(iovs)+g.count > cap(iovs) {
			wm = wm[:i]
			groups = groups[:i]
			break
		}
		first := len(iovs)
		for _, m := range msgs[g.start : g.start+g.count] {
			iovs = append(iovs, m.Buf[:m.N])
		}
		wm[i].Buffers = iovs[first:len(iovs):len(iovs)]
		c.setAddr(i, msgs[g.start].Addr)
		oob := ecn.AppendECN(c.woob[i][:0], c.v6, g.ecn)
		if g.count > 1 {
			oob = ecn.AppendGSO(oob, uint16(g.segSize))
		}
		wm[i].OOB = oob
	}
	n := 0
	var err error
	for n < len(wm) {
		var k int
		k, err = c.batch.WriteBatch(wm[n:], 0)
		if k > 0 {
			n += k
		}
		if err != nil {
			break
		}
		if k == 0 { // cannot happen without an error; do not spin
			err = errors.New("sendmmsg sent nothing")
			break
		}
	}
	for _, g := range groups[:n] {
		c.stats.datagramsOut.Add(uint64(g.count))
		c.stats.bytesOut.Add(uint64(g.bytes))
		if g.count > 1 {
			c.stats.gsoSends.Add(1)
		}
	}
	clear(iovs) // do not keep the caller's buffers alive
	for i := range wm {
		wm[i].Buffers = nil
	}
	return n, err
}

// setAddr points write message i at a, reusing its net.UDPAddr and IP
// array so that steady-state sends allocate nothing.
func (c *Conn) setAddr(i int, a netip.AddrPort) {
	ua := &c.waddrs[i]
	ip := a.Addr()
	if c.v6 {
		c.wips[i] = ip.As16()
		ua.IP = c.wips[i][:]
	} else {
		b := ip.Unmap().As4()
		copy(c.wips[i][:4], b[:])
		ua.IP = c.wips[i][:4]
	}
	ua.Port = int(a.Port())
	ua.Zone = ""
}

// gsoUnsupported reports whether a failed GSO send should be retried
// without GSO: EIO (the device cannot checksum-offload segments), EINVAL
// (the kernel rejects the segment size or the socket's settings), and
// ENOPROTOOPT / EOPNOTSUPP (no UDP_SEGMENT at all).
func gsoUnsupported(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EOPNOTSUPP)
}

// setDontFragment sets IP_PMTUDISC_PROBE (see Options.DontFragment).
func setDontFragment(uc *net.UDPConn, v6 bool) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if v6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
	})
	if err != nil {
		return err
	}
	return serr
}

// dontFragment reads the socket's IP_MTU_DISCOVER mode (tests).
func dontFragment(uc *net.UDPConn, v6 bool) (int, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var v int
	var serr error
	err = rc.Control(func(fd uintptr) {
		if v6 {
			v, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER)
			return
		}
		v, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER)
	})
	if err != nil {
		return 0, err
	}
	return v, serr
}
