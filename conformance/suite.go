package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/mrgw/mrgw/internal/ecn"
)

// Verdict is the outcome of one case.
type Verdict string

// Verdicts.
const (
	Pass Verdict = "pass"
	Fail Verdict = "fail"
	NA   Verdict = "n/a"
)

// Result is one case's verdict. Its JSON field names are a published
// interface (scripts read `mrgw conformance --json`): fields are only added.
type Result struct {
	Case    string  `json:"case"`
	Section string  `json:"section"`
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail"`
}

// Options configures a run of the suite.
type Options struct {
	// Cases selects cases by id; empty runs them all.
	Cases []string
	// Timeout is how long to wait for an answer the spec requires (default 1s).
	Timeout time.Duration
	// Quiet is how long to watch for an answer the spec forbids (default 150ms).
	Quiet time.Duration
	// MTU and Paths are offered in every INIT (defaults 1024 and 4).
	MTU, Paths int
	// Seed seeds connection ids and data patterns (0: from the clock).
	Seed uint64
	// Progress, if set, receives one verdict line per case as it ends.
	Progress io.Writer
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Quiet <= 0 {
		o.Quiet = 150 * time.Millisecond
	}
	if o.MTU == 0 {
		o.MTU = 1024
	}
	if o.Paths == 0 {
		o.Paths = 4
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
}

// caseDef is one case of the suite.
type caseDef struct {
	id, section string
	run         func(s *session) error
}

// naError marks a case as not applicable to the target.
type naError struct{ why string }

func (e naError) Error() string { return e.why }

func notApplicable(format string, args ...any) error { return naError{fmt.Sprintf(format, args...)} }

// CaseIDs returns the ids of every case, in the order they run.
func CaseIDs() []string {
	ids := []string{vectorCase}
	for _, c := range cases() {
		ids = append(ids, c.id)
	}
	return ids
}

const vectorCase = "wire-golden-vectors"

// Run drives the implementation listening on target through every case and
// returns one Result per case. The error is non-nil only when the suite
// itself could not run (bad options, its own codec disagreeing with the
// golden vectors, ctx cancelled); failing cases are Results, not errors.
func Run(ctx context.Context, target netip.AddrPort, opts Options) ([]Result, error) {
	opts.defaults()
	if !target.IsValid() || target.Port() == 0 {
		return nil, fmt.Errorf("conformance: invalid target %v", target)
	}
	if opts.MTU < 256 || opts.MTU > 65000 || opts.Paths < 1 || opts.Paths > 1024 {
		return nil, fmt.Errorf("conformance: MTU %d or paths %d out of range", opts.MTU, opts.Paths)
	}
	all := cases()
	if len(opts.Cases) > 0 {
		known := CaseIDs()
		for _, id := range opts.Cases {
			if !slices.Contains(known, id) {
				return nil, fmt.Errorf("conformance: unknown case %q", id)
			}
		}
	}
	want := func(id string) bool { return len(opts.Cases) == 0 || slices.Contains(opts.Cases, id) }
	r := &runner{ctx: ctx, target: netip.AddrPortFrom(target.Addr().Unmap(), target.Port()), opts: opts,
		rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5eed))}
	var results []Result
	emit := func(res Result) {
		results = append(results, res)
		if opts.Progress != nil {
			fmt.Fprintln(opts.Progress, verdictLine(res))
		}
	}
	// The suite's own codec must match the golden vectors before it can
	// judge anyone else's bytes.
	bad, n, err := checkVectors(goldenJSON)
	if err == nil {
		var bad2 []string
		var n2 int
		bad2, n2, err = checkVectorsV2(goldenV2JSON)
		bad, n = append(bad, bad2...), n+n2
	}
	if err != nil || len(bad) > 0 {
		detail := fmt.Sprint(err)
		if err == nil {
			detail = fmt.Sprintf("%d mismatches: %v", len(bad), bad)
		}
		emit(Result{vectorCase, "§1-8 §12", Fail, detail})
		return results, fmt.Errorf("conformance: suite codec disagrees with the golden vectors: %s", detail)
	}
	if want(vectorCase) {
		emit(Result{vectorCase, "§1-8 §12", Pass, fmt.Sprintf("suite codec matches all %d golden vectors", n)})
	}
	for _, c := range all {
		if !want(c.id) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return results, err
		}
		emit(r.runCase(c))
	}
	return results, nil
}

func verdictLine(r Result) string {
	v := map[Verdict]string{Pass: "PASS", Fail: "FAIL", NA: "N/A "}[r.Verdict]
	return fmt.Sprintf("%s %-28s %-6s %s", v, r.Case, r.Section, r.Detail)
}

// runner is one run of the suite against one target.
type runner struct {
	ctx    context.Context
	target netip.AddrPort
	opts   Options
	rng    *rand.Rand
	next   uint64 // region allocator
	// silent is set once an INIT got no answer of any kind: later cases
	// fail at once instead of each waiting out the handshake.
	silent bool
}

// area returns n bytes of region RegionKey that no other case of this run
// is using now. Cases never assume an area's content: they read it first.
func (r *runner) area(n int) uint64 {
	n = (n + 63) &^ 63
	limit := uint64(RegionSize - 64<<10) // the top is kept for out-of-bounds cases
	if r.next+uint64(n) > limit {
		r.next = 0
	}
	a := r.next
	r.next += uint64(n)
	return a
}

func (r *runner) pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.rng.Uint32())
	}
	return b
}

func (r *runner) runCase(c caseDef) (res Result) {
	res = Result{Case: c.id, Section: c.section}
	s := &session{r: r}
	defer func() {
		if p := recover(); p != nil {
			res.Verdict, res.Detail = Fail, fmt.Sprintf("suite panic: %v", p)
		}
		for _, cl := range s.clients {
			cl.shutdown()
		}
	}()
	err := c.run(s)
	if err == nil {
		for _, cl := range s.clients {
			if len(cl.violations) > 0 {
				err = fmt.Errorf("protocol violation: %s", cl.violations[0])
				break
			}
		}
	}
	var na naError
	switch {
	case err == nil:
		res.Verdict, res.Detail = Pass, s.detail
	case errors.As(err, &na):
		res.Verdict, res.Detail = NA, na.why
	default:
		res.Verdict, res.Detail = Fail, err.Error()
	}
	return res
}

// session is the state of one case: its connections.
type session struct {
	r       *runner
	clients []*client
	detail  string
}

func (s *session) passf(format string, args ...any) { s.detail = fmt.Sprintf(format, args...) }

// rxd is one datagram received by the suite.
type rxd struct {
	sock int
	b    []byte
	from netip.AddrPort
}

type txPath struct {
	sock        int
	next, floor uint64
	acked       map[uint64]bool
	given       map[uint64]bool // abandoned (below our ack floor)
}

type rxPath struct {
	cum, largest uint64
	any          bool
	got          map[uint64]bool
	lastTS       uint64
	count        uint64
}

type partial struct {
	buf  []byte
	got  map[uint64]bool
	left int
}

// client is one connection of the suite to the target, with its sockets.
type client struct {
	r      *runner
	target netip.AddrPort
	socks  []*net.UDPConn
	in     chan rxd
	done   chan struct{}
	wg     sync.WaitGroup
	closed bool

	id     uint64
	mtu    int
	paths  []*txPath
	accept *hsPkt

	streamNext map[uint32]uint64
	nextReq    uint32

	// what the target sent
	acks       []*ackPkt
	errs       []*errorPkt
	versions   []*versionPkt
	closes     []*closePkt
	accepts    []*hsPkt
	probeAcks  []*probePkt
	reports    []*Report // COMPLETE reports in the order the target sent them
	reads      map[uint32]*Report
	others     []string // other packets for this connection, described
	strangers  []rxd    // packets for other connection ids
	violations []string

	// wire version: offered in the INIT (bit i = version i+1; 0 = 1
	// only) and chosen by the ACCEPT; per-message descriptor state of
	// version 2 (wirev2.go), and the target's orphans dropped
	offer, wire uint8
	sentDesc    map[[2]uint64]*v2desc
	rxDesc      map[[2]uint64]*v2desc
	orphans     int

	// receiver state for the target's DATA (its reports)
	rx      map[uint16]*rxPath
	msgs    map[uint64]*partial
	done2   map[uint64][]byte
	nextRep uint64
}

func (s *session) newClient() (*client, error) {
	r := s.r
	c := &client{r: r, target: r.target, in: make(chan rxd, 4096), done: make(chan struct{}),
		streamNext: map[uint32]uint64{}, reads: map[uint32]*Report{}, rx: map[uint16]*rxPath{},
		msgs: map[uint64]*partial{}, done2: map[uint64][]byte{},
		sentDesc: map[[2]uint64]*v2desc{}, rxDesc: map[[2]uint64]*v2desc{}}
	for c.id == 0 {
		c.id = r.rng.Uint64()
	}
	s.clients = append(s.clients, c)
	if _, err := c.newSocket(); err != nil {
		return nil, err
	}
	return c, nil
}

// newSocket opens one more local UDP socket (one more entropy value).
func (c *client) newSocket() (int, error) {
	local := netip.IPv4Unspecified()
	if c.target.Addr().Is6() {
		local = netip.IPv6Unspecified()
	}
	if c.target.Addr().IsLoopback() {
		local = c.target.Addr()
	}
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return 0, fmt.Errorf("suite socket: %w", err)
	}
	i := len(c.socks)
	c.socks = append(c.socks, pc)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			b := make([]byte, 1<<16)
			n, from, err := pc.ReadFromUDPAddrPort(b)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			select {
			case c.in <- rxd{sock: i, b: b[:n], from: netip.AddrPortFrom(from.Addr().Unmap(), from.Port())}:
			case <-c.done:
				return
			}
		}
	}()
	return i, nil
}

func (c *client) port(sock int) uint16 { return uint16(c.socks[sock].LocalAddr().(*net.UDPAddr).Port) }

// shutdown closes the connection politely (CLOSE, briefly waiting for the
// answer) and stops the sockets.
func (c *client) shutdown() {
	if c.closed {
		return
	}
	if c.accept != nil {
		c.sendRaw(0, (&closePkt{Conn: c.id}).encode(), ecn.NotECT)
		c.pump(c.r.opts.Quiet, func() bool { return c.closeAcked() })
	}
	c.closed = true
	close(c.done)
	for _, s := range c.socks {
		s.Close()
	}
	c.wg.Wait()
}

func (c *client) closeAcked() bool {
	for _, x := range c.closes {
		if x.Ack {
			return true
		}
	}
	return false
}

func (c *client) ts() uint64 { return uint64(time.Since(startTime)) + 1 }

var startTime = time.Now()

// sendRaw sends b from socket sock with ECN codepoint cp.
func (c *client) sendRaw(sock int, b []byte, cp ecn.Codepoint) {
	var oob []byte
	if cp != ecn.NotECT {
		oob = ecn.AppendECN(nil, c.target.Addr().Is6(), cp)
	}
	if _, _, err := c.socks[sock].WriteMsgUDPAddrPort(b, oob, c.target); err != nil {
		c.violations = append(c.violations, fmt.Sprintf("suite could not send: %v", err))
	}
}

// initTries is how many times connect sends its INIT before it gives up:
// a lost INIT or ACCEPT is retried, a target that answers none of them is
// silent. The count, not a clock, bounds a run against a silent target
// (with runner.silent); TestSilentTargetFailsFast counts it.
const initTries = 3

// connect opens the connection: INIT (repeated up to initTries times)
// until ACCEPT, then one socket per negotiated path.
func (c *client) connect() error {
	o := c.r.opts
	if c.r.silent {
		return fmt.Errorf("target %v answered no INIT earlier in this run; not trying again", c.target)
	}
	init := (&hsPkt{Type: tInit, Conn: c.id, MTU: uint16(o.MTU), Paths: uint16(o.Paths), Offer: c.offer})
	for try := 0; try < initTries && len(c.accepts) == 0; try++ {
		init.TS = c.ts()
		nv, nc := len(c.versions), len(c.closes)
		c.sendRaw(0, init.encode(), ecn.NotECT)
		c.pump(o.Timeout, func() bool { return len(c.accepts) > 0 || len(c.closes) > nc || len(c.versions) > nv })
	}
	if len(c.accepts) == 0 {
		if len(c.closes) == 0 && len(c.versions) == 0 && len(c.strangers) == 0 {
			c.r.silent = true
		}
		return fmt.Errorf("no ACCEPT for INIT(conn %#x, MTU %d, paths %d) within %v (closes %d, versions %d)",
			c.id, o.MTU, o.Paths, initTries*o.Timeout, len(c.closes), len(c.versions))
	}
	a := c.accepts[0]
	if a.MTU < 256 {
		return fmt.Errorf("ACCEPT MTU %d below 256", a.MTU)
	}
	if a.Paths < 1 {
		return fmt.Errorf("ACCEPT with 0 paths")
	}
	c.accept = a
	c.wire = max(a.Choice, 1)
	if offered := c.offer; (offered == 0 && c.wire != 1) || (offered != 0 && (c.wire > 8 || offered&(1<<(c.wire-1)) == 0)) {
		return fmt.Errorf("ACCEPT chose wire version %d, which the INIT (offer %#b) did not offer", c.wire, c.offer)
	}
	c.mtu = min(o.MTU, int(a.MTU))
	n := min(o.Paths, int(a.Paths))
	for i := 0; i < n; i++ {
		p := &txPath{acked: map[uint64]bool{}, given: map[uint64]bool{}}
		if i > 0 {
			s, err := c.newSocket()
			if err != nil {
				return err
			}
			p.sock = s
		}
		c.paths = append(c.paths, p)
	}
	return nil
}

// pump handles received datagrams until cond holds or timeout passes.
func (c *client) pump(timeout time.Duration, cond func() bool) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for !cond() {
		select {
		case d := <-c.in:
			c.handle(d)
		case <-t.C:
			return cond()
		case <-c.r.ctx.Done():
			return cond()
		}
	}
	return true
}

// settle handles everything that arrives during d.
func (c *client) settle(d time.Duration) { c.pump(d, func() bool { return false }) }

func (c *client) violate(format string, args ...any) {
	if len(c.violations) < 16 {
		c.violations = append(c.violations, fmt.Sprintf(format, args...))
	}
}

// handle decodes one datagram from the target and records it.
func (c *client) handle(d rxd) {
	b := d.b
	if len(b) < hdrLen {
		c.violate("%d-byte datagram from %v", len(b), d.from)
		return
	}
	conn := be.Uint64(b[4:])
	if b[0] == 0 && b[1] == tVersion {
		v, err := decodeVersion(b)
		if err != nil {
			c.violate("malformed VERSION: %v", err)
			return
		}
		v.sock = d.sock
		c.versions = append(c.versions, v)
		return
	}
	if b[0] == 2 && b[1] == tData && c.wire == 2 {
		if len(b) >= data2HdrLen && be.Uint32(b[8:]) != uint32(c.id) {
			if len(c.strangers) < 64 {
				c.strangers = append(c.strangers, d)
			}
			return
		}
		c.onData2(b, d)
		return
	}
	if b[0] != 1 {
		c.violate("datagram of version %d from the target", b[0])
		return
	}
	if b[1] == tData && c.wire == 2 {
		c.violate("version-1 DATA on a connection that agreed version 2")
		return
	}
	if conn != c.id {
		if len(c.strangers) < 64 {
			c.strangers = append(c.strangers, d)
		}
		return
	}
	switch b[1] {
	case tAck:
		a, err := decodeAck(b)
		if err != nil {
			c.violate("malformed ACK: %v", err)
			return
		}
		a.sock, a.arrivalNo = d.sock, len(c.acks)
		c.onAck(a)
	case tAccept, tInit:
		h, err := decodeHandshake(b)
		if err != nil {
			c.violate("malformed %s: %v", typeName(b[1]), err)
			return
		}
		h.sock = d.sock
		if h.Type == tAccept {
			c.accepts = append(c.accepts, h)
		} else {
			c.others = append(c.others, "INIT")
		}
	case tClose:
		x, err := decodeClose(b)
		if err != nil {
			c.violate("malformed CLOSE: %v", err)
			return
		}
		x.sock = d.sock
		c.closes = append(c.closes, x)
		if !x.Ack { // answer it, so the target can finish
			c.sendRaw(d.sock, (&closePkt{Conn: c.id, Ack: true}).encode(), ecn.NotECT)
		}
	case tError:
		e, err := decodeError(b)
		if err != nil {
			c.violate("malformed ERROR: %v", err)
			return
		}
		e.sock = d.sock
		c.errs = append(c.errs, e)
	case tProbe, tProbeAck:
		p, err := decodeProbe(b)
		if err != nil {
			c.violate("malformed %s: %v", typeName(b[1]), err)
			return
		}
		p.sock = d.sock
		if p.Type == tProbe {
			pa := &probePkt{Type: tProbeAck, Conn: c.id, Path: p.Path, TS: p.TS}
			if _, err := c.socks[d.sock].WriteToUDPAddrPort(pa.encode(), d.from); err != nil {
				c.violate("suite could not answer PROBE: %v", err)
			}
		} else {
			c.probeAcks = append(c.probeAcks, p)
		}
	case tData:
		x, err := decodeData(b)
		if err != nil {
			c.violate("malformed DATA: %v", err)
			return
		}
		c.onData(x, d)
	default:
		c.violate("unknown packet type %d", b[1])
	}
}

// onAck checks an ACK against what was sent on its path and records it.
func (c *client) onAck(a *ackPkt) {
	c.acks = append(c.acks, a)
	if int(a.Path) >= len(c.paths) {
		c.violate("ACK for path %d of %d", a.Path, len(c.paths))
		return
	}
	p := c.paths[a.Path]
	if a.Largest >= p.next || a.Cum > p.next {
		c.violate("ACK on path %d claims cum %d / largest %d, but only sequences below %d were sent", a.Path, a.Cum, a.Largest, p.next)
		return
	}
	for s := p.floor; s <= a.Largest && s < p.next; s++ {
		if a.acked(s) {
			p.acked[s] = true
		}
	}
	for s := p.floor; s < a.Cum; s++ {
		p.acked[s] = true
	}
}

// onData acknowledges a DATA from the target and reassembles its reports.
func (c *client) onData(x *dataPkt, d rxd) {
	r := c.rx[x.Path]
	if r == nil {
		r = &rxPath{got: map[uint64]bool{}}
		c.rx[x.Path] = r
	}
	if floor := x.Seq - uint64(x.FloorGap); floor > r.cum {
		r.cum = floor
	}
	if !r.got[x.Seq] && x.Seq >= r.cum {
		r.got[x.Seq] = true
		r.count++
		if !r.any || x.Seq > r.largest {
			r.largest, r.lastTS = x.Seq, x.Timestamp
		}
		r.any = true
	}
	for r.got[r.cum] {
		delete(r.got, r.cum)
		r.cum++
	}
	a := &ackPkt{Conn: c.id, Path: x.Path, Cum: r.cum, Largest: r.largest, EchoTS: r.lastTS, RX: r.count}
	for s := a.base(); r.any && s <= r.largest && s-a.base() < sackBits; s++ {
		if r.got[s] {
			a.setBit(s)
		}
	}
	a.Streams = []streamEntry{{CtlStream, c.nextRep}}
	if _, err := c.socks[0].WriteToUDPAddrPort(a.encode(), d.from); err != nil {
		c.violate("suite could not ACK: %v", err)
	}
	if x.Stream != CtlStream || x.Op != opSend {
		c.violate("target sent DATA op %d on stream %#x; the contract has it SEND only on stream %#x", x.Op, x.Stream, CtlStream)
		return
	}
	if x.descOnly {
		return
	}
	if x.MsgSeq < c.nextRep || c.done2[x.MsgSeq] != nil {
		return
	}
	if x.MsgLen > 1<<16 || len(c.msgs) > 1024 {
		c.violate("report message %d of %d bytes", x.MsgSeq, x.MsgLen)
		return
	}
	m := c.msgs[x.MsgSeq]
	if m == nil {
		n := int((x.MsgLen + uint64(c.mtu) - 1) / uint64(c.mtu))
		m = &partial{buf: make([]byte, x.MsgLen), got: map[uint64]bool{}, left: max(n, 1)}
		c.msgs[x.MsgSeq] = m
	}
	if uint64(len(m.buf)) != x.MsgLen {
		c.violate("report message %d changed length", x.MsgSeq)
		return
	}
	if !m.got[x.Offset] {
		m.got[x.Offset] = true
		copy(m.buf[x.Offset:], x.Payload)
		m.left--
	}
	if m.left > 0 {
		return
	}
	delete(c.msgs, x.MsgSeq)
	c.done2[x.MsgSeq] = m.buf
	for {
		b, ok := c.done2[c.nextRep]
		if !ok {
			return
		}
		delete(c.done2, c.nextRep)
		c.nextRep++
		rep, err := DecodeReport(b)
		if err != nil {
			c.violate("report message: %v", err)
			continue
		}
		switch rep.Kind {
		case RepComplete:
			c.reports = append(c.reports, rep)
		case RepRead:
			c.reads[rep.Stream] = rep
		default:
			c.violate("report of unknown kind %d", rep.Kind)
		}
	}
}
