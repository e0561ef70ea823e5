package metaroce

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/script"

	"github.com/mrgw/mrgw/units"
)

// Scenario scripts, in the spirit of raft's testdata: each file under
// testdata/scenarios drives two endpoints, a (the initiator) and b (the
// responder), through a scripted network in which nothing moves unless the
// script says so, and compares every command's output with the output
// recorded in the file. `go test ./metaroce -run TestScenarios -rewrite`
// records the outputs anew; read the diff before committing it.
//
// A script is a list of commands, each followed by a line "----" and its
// expected output, then a blank line. Lines starting with # are comments;
// a comment line "# rules: x, y" names the rules of PROTOCOL.md the script
// tests (TestScenarioRulesCovered checks every rule has one). Commands:
//
//	config [a|b] key=value...   before anything else (see scenario.config);
//	                            wire=1+2 lets the side speak version 2 too
//	                            (the scripts speak version 1 by default)
//	connect                     a connects to b; shows the datagrams sent
//	establish                   connect and run the handshake to the end
//	write len=N [stream=S]      a WRITEs N bytes to b's region (key 1);
//	                            with from=b, b WRITEs to a's (unchecked)
//	send len=N tag=T [stream=S] a SENDs N bytes to b's buffer posted as T
//	post tag=T len=N            b posts a receive buffer
//	deliver [#id...|all]        hand datagrams on the wire to their
//	                            receiver, each when it is due (sent + owd)
//	settle                      deliver until the wire is empty
//	deliver-ce #id...           deliver marked ECN congestion-experienced
//	duplicate #id...            put a copy of a datagram on the wire
//	drop [#id...|all]           take datagrams off the wire
//	cut path=P                  black-hole a's path P as it is now: every
//	                            datagram from or to its current port is lost;
//	                            with "forever", every datagram a sends on it
//	tick DURATION               let time pass, running every timer on time
//	                            (what is on the wire stays there)
//	run DURATION                let time pass as tick, and deliver what is
//	                            on the wire when it is due
//	wire                        list the datagrams on the wire
//	conns a|b                   the endpoint's connections and pacing rates
//	paths a|b                   each path's state, port and bytes in flight
//	stats a|b FIELD...          ConnStats fields
//	check-memory                b's region holds what a wrote
//
// Any command takes -q: it then counts the datagrams sent and the events
// (but path events) instead of showing them.
//
// After every command the endpoints are polled as a driver would, and what
// they sent and the events they reported are shown, with the time.
var rewrite = flag.Bool("rewrite", false, "record the scenario outputs anew")

type wireDgram struct {
	id   int
	from int
	sent time.Duration
	data []byte
	meta RecvMeta
	desc string
}

type scenario struct {
	t       *testing.T
	cfg     [2]Config
	owd     time.Duration
	eps     [2]*Endpoint
	conn    [2]*Conn
	now     time.Duration
	wire    []*wireDgram
	nextID  int
	cut     map[uint16]bool
	cutPath map[int]bool // a's paths cut whatever their port
	region  []byte
	written []byte // what a wrote, at its region offsets
	woff    int
	out     strings.Builder
	scratch []byte
	quiet   bool // -q: count datagrams and events instead of showing them
	nq      [2]int
}

var sides = [2]string{"a", "b"}

func newScenario(t *testing.T) *scenario {
	s := &scenario{t: t, owd: 5 * time.Millisecond, cut: map[uint16]bool{}, cutPath: map[int]bool{}, scratch: make([]byte, 0, 70000)}
	path := pathmgrScenarioConfig()
	for i := range s.cfg {
		// Wire version 1 unless a script says "config wire=...": the
		// recorded datagram ids of the version-1 scripts would shift
		// under version 2's descriptor-only DATA.
		s.cfg[i] = Config{Paths: 2, MTU: 256, CC: cc.NewFixed(1<<20, 0), Path: path,
			MaxAckDelay: 2 * time.Millisecond, HandshakeRetries: 4, Seed: uint64(11 + i),
			WireVersions: []uint8{Version1}}
	}
	s.cfg[1].Listen = true
	return s
}

func (s *scenario) started() bool { return s.eps[0] != nil }

func (s *scenario) start() {
	if s.started() {
		return
	}
	for i := range s.eps {
		ep, err := NewEndpoint(s.cfg[i], NewMemory())
		if err != nil {
			s.t.Fatal(err)
		}
		s.eps[i] = ep
	}
	s.region = make([]byte, 1<<20)
	s.written = make([]byte, 1<<20)
	if err := s.eps[1].Memory().Register(1, s.region); err != nil {
		s.t.Fatal(err)
	}
	if err := s.eps[0].Memory().Register(1, make([]byte, 1<<20)); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scenario) printf(format string, args ...any) { fmt.Fprintf(&s.out, format, args...) }

// pump polls both endpoints until neither has anything to send, putting
// what they send on the wire, and shows it with the events.
func (s *scenario) pump() {
	for {
		s.events()
		sent := false
		for i, ep := range s.eps {
			tx, ok := ep.Poll(s.now, s.scratch)
			if !ok {
				continue
			}
			sent = true
			data := append([]byte(nil), s.scratch[:tx.Len]...)
			port := tx.Entropy
			s.nextID++
			d := &wireDgram{id: s.nextID, from: i, sent: s.now, data: data, meta: RecvMeta{Peer: PeerID(i), Entropy: port}}
			if tx.Reply {
				d.meta.Entropy = listenPort
			}
			d.desc = describe(data, tx)
			note := ""
			if s.cut[port] || (i == 0 && !tx.Reply && tx.Conn != nil && s.cutPath[tx.Path]) {
				note = " (cut: lost)"
			} else {
				s.wire = append(s.wire, d)
			}
			if s.quiet {
				s.nq[0]++
			} else {
				s.printf("%v: #%d %s>%s %s%s\n", s.now, d.id, sides[i], sides[1-i], d.desc, note)
			}
		}
		if !sent {
			s.events()
			return
		}
	}
}

// events shows and records what the endpoints reported.
func (s *scenario) events() {
	for i, ep := range s.eps {
		if ep == nil {
			continue
		}
		for {
			ev, ok := ep.PollEvent()
			if !ok {
				break
			}
			if ev.Kind == EventConnected {
				s.conn[i] = ev.Conn
			}
			if s.quiet && ev.Kind != EventPath {
				s.nq[1]++
			} else {
				s.printf("%v: %s: %s\n", s.now, sides[i], describeEvent(ev))
			}
		}
	}
}

// advance lets time pass to at, running every timer when it is due.
func (s *scenario) advance(at time.Duration) {
	for {
		next := time.Duration(-1)
		for _, ep := range s.eps {
			if d := ep.NextTimeout(); d >= 0 && (next < 0 || d < next) {
				next = d
			}
		}
		if next < 0 || next > at {
			break
		}
		if next > s.now {
			s.now = next
		}
		for _, ep := range s.eps {
			if d := ep.NextTimeout(); d >= 0 && d <= s.now {
				ep.HandleTimeout(s.now)
			}
		}
		s.pump()
	}
	if at > s.now {
		s.now = at
	}
}

// take removes the datagrams named by args (#id... or all) from the wire.
func (s *scenario) take(args []string) []*wireDgram {
	if len(args) == 1 && args[0] == "all" {
		w := s.wire
		s.wire = nil
		return w
	}
	var out []*wireDgram
	for _, a := range args {
		id, err := strconv.Atoi(strings.TrimPrefix(a, "#"))
		if err != nil {
			s.t.Fatalf("bad datagram %q", a)
		}
		i := slices.IndexFunc(s.wire, func(d *wireDgram) bool { return d.id == id })
		if i < 0 {
			s.t.Fatalf("datagram #%d is not on the wire", id)
		}
		out = append(out, s.wire[i])
		s.wire = slices.Delete(s.wire, i, i+1)
	}
	return out
}

func (s *scenario) deliver(ds []*wireDgram) {
	for _, d := range ds {
		s.advance(d.sent + s.owd)
		if s.cut[d.meta.Entropy] {
			s.printf("%v: #%d lost (cut)\n", s.now, d.id)
			continue
		}
		s.eps[1-d.from].Receive(s.now, d.data, d.meta)
		s.pump()
	}
}

func kv(t *testing.T, args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			t.Fatalf("argument %q is not key=value", a)
		}
		m[k] = v
	}
	return m
}

func atoi(t *testing.T, v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("bad number %q", v)
	}
	return n
}

func dur(t *testing.T, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("bad duration %q", v)
	}
	return d
}

// config sets configuration keys of a, b or both (before the start).
func (s *scenario) config(args []string) {
	if s.started() {
		s.t.Fatal("config after the endpoints started")
	}
	who := []int{0, 1}
	if len(args) > 0 && (args[0] == "a" || args[0] == "b") {
		who = []int{int(args[0][0] - 'a')}
		args = args[1:]
	}
	for k, v := range kv(s.t, args) {
		if k == "owd" {
			s.owd = dur(s.t, v)
			continue
		}
		for _, i := range who {
			c := &s.cfg[i]
			switch k {
			case "paths":
				c.Paths = atoi(s.t, v)
			case "mtu":
				c.MTU = atoi(s.t, v)
			case "ackevery":
				c.AckEvery = atoi(s.t, v)
			case "maxackdelay":
				c.MaxAckDelay = dur(s.t, v)
			case "window":
				c.CC = cc.NewFixed(atoi(s.t, v), 0)
			case "retries":
				c.HandshakeRetries = atoi(s.t, v)
			case "maxahead":
				c.MaxMessagesAhead = atoi(s.t, v)
			case "listen":
				c.Listen = v == "true"
			case "capacity":
				c.ReceiveCapacity = units.BitRate(atoi(s.t, v))
			case "downafter":
				c.Path.DownAfter = atoi(s.t, v)
			case "upafter":
				c.Path.UpAfter = atoi(s.t, v)
			case "wire": // the wire versions spoken: 1, 2 or 1+2
				c.WireVersions = nil
				for _, w := range strings.Split(v, "+") {
					c.WireVersions = append(c.WireVersions, uint8(atoi(s.t, w)))
				}
			default:
				s.t.Fatalf("unknown config key %q", k)
			}
		}
	}
}

func (s *scenario) mustConn(i int) *Conn {
	if s.conn[i] == nil {
		s.t.Fatalf("%s has no connection", sides[i])
	}
	return s.conn[i]
}

func (s *scenario) run(cmd string, args []string) {
	t := s.t
	if cmd != "config" {
		s.start()
	}
	switch cmd {
	case "config":
		s.config(args)
	case "connect":
		c, err := s.eps[0].Connect(s.now, 1)
		if err != nil {
			t.Fatal(err)
		}
		s.conn[0] = c
		s.pump()
	case "establish":
		c, err := s.eps[0].Connect(s.now, 1)
		if err != nil {
			t.Fatal(err)
		}
		s.conn[0] = c
		s.pump()
		for len(s.wire) > 0 {
			s.deliver(s.take([]string{"all"}))
		}
		if !c.Established() || s.conn[1] == nil {
			t.Fatal("the handshake did not complete")
		}
	case "write", "send":
		s.write(cmd, args)
	case "post":
		o := kv(t, args)
		if err := s.mustConn(1).PostRecv(uint64(atoi(t, o["tag"])), make([]byte, atoi(t, o["len"]))); err != nil {
			s.printf("error: %v\n", err)
		}
	case "deliver":
		s.deliver(s.take(args))
	case "deliver-ce":
		ds := s.take(args)
		for _, d := range ds {
			d.meta.CE = true
		}
		s.deliver(ds)
	case "duplicate":
		for _, d := range s.take(args) {
			c := *d
			s.nextID++
			c.id = s.nextID
			s.wire = append(s.wire, d, &c)
			s.printf("#%d is a copy of #%d\n", c.id, d.id)
		}
	case "settle":
		for n := 0; len(s.wire) > 0; n++ {
			if n > 1000 {
				t.Fatal("the wire does not settle")
			}
			s.deliver(s.take([]string{"all"}))
		}
	case "drop":
		ds := s.take(args)
		for _, d := range ds {
			if !s.quiet {
				s.printf("dropped #%d\n", d.id)
			}
		}
		if s.quiet {
			s.printf("dropped %d datagrams\n", len(ds))
		}
	case "cut":
		forever := len(args) == 2 && args[1] == "forever"
		if forever {
			args = args[:1]
		}
		p := atoi(t, kv(t, args)["path"])
		if forever {
			s.cutPath[p] = true
			s.printf("path %d cut, whatever its port\n", p)
			break
		}
		port := s.mustConn(0).Paths().Paths[p].Entropy
		s.cut[port] = true
		s.printf("path %d port %d cut\n", p, port)
	case "tick":
		s.advance(s.now + dur(t, args[0]))
		s.printf("now %v\n", s.now)
	case "run":
		until := s.now + dur(t, args[0])
		for len(s.wire) > 0 && s.wire[0].sent+s.owd <= until {
			d := s.wire[0]
			s.wire = s.wire[1:]
			s.deliver([]*wireDgram{d})
		}
		s.advance(until)
		s.printf("now %v\n", s.now)
	case "wire":
		for _, d := range s.wire {
			s.printf("#%d %s>%s %s (sent %v)\n", d.id, sides[d.from], sides[1-d.from], d.desc, d.sent)
		}
	case "paths":
		c := s.mustConn(int(args[0][0] - 'a'))
		for i := range c.Paths().Paths {
			p := &c.Paths().Paths[i]
			s.printf("path %d %s port %d inflight %d timeouts %d\n", i, p.State, p.Entropy, p.InflightBytes, p.Timeouts)
		}
	case "conns":
		for k, c := range s.eps[int(args[0][0]-'a')].Conns() {
			s.printf("conn %d established %v pacing %.0f B/s\n", k, c.Established(), c.Controller().PacingRate())
		}
	case "stats":
		c := s.mustConn(int(args[0][0] - 'a'))
		st := fmt.Sprintf("%+v", c.Stats)
		for _, f := range args[1:] {
			m := regexp.MustCompile(`\b` + f + `:(\d+)`).FindStringSubmatch(st)
			if m == nil {
				t.Fatalf("no ConnStats field %q", f)
			}
			s.printf("%s %s\n", f, m[1])
		}
	case "check-memory":
		if slices.Equal(s.region[:s.woff], s.written[:s.woff]) {
			s.printf("region matches %d bytes written\n", s.woff)
		} else {
			s.printf("region DIFFERS from what was written\n")
		}
	default:
		t.Fatalf("unknown command %q", cmd)
	}
}

// write queues a WRITE or SEND (the write and send commands).
func (s *scenario) write(cmd string, args []string) {
	t := s.t
	o := kv(t, args)
	n := atoi(t, o["len"])
	stream := 0
	if v, ok := o["stream"]; ok {
		stream = atoi(t, v)
	}
	data := make([]byte, n)
	for j := range data {
		data[j] = byte(s.woff + j*7 + 1)
	}
	c := s.mustConn(0)
	var seq uint64
	var err error
	if o["from"] == "b" { // to a's region, unchecked
		seq, err = s.mustConn(1).Write(s.now, uint32(stream), 1, 0, data)
	} else if cmd == "write" {
		copy(s.written[s.woff:], data)
		seq, err = c.Write(s.now, uint32(stream), 1, uint64(s.woff), data)
		s.woff += n
	} else {
		seq, err = c.Send(s.now, uint32(stream), uint64(atoi(t, o["tag"])), data)
	}
	if err != nil {
		s.printf("error: %v\n", err)
		return
	}
	s.printf("msg %d/%d\n", stream, seq)
	s.pump()
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := newScenario(t)
			script.Run(t, f, *rewrite, func(cmd string) string {
				fields := strings.Fields(cmd)
				s.out.Reset()
				s.quiet, s.nq = false, [2]int{}
				if i := slices.Index(fields, "-q"); i > 0 {
					s.quiet = true
					fields = slices.Delete(fields, i, i+1)
				}
				s.run(fields[0], fields[1:])
				if s.quiet {
					s.printf("(%d datagrams sent, %d events; now %v)\n", s.nq[0], s.nq[1], s.now)
				}
				got := strings.TrimRight(s.out.String(), "\n")
				if got == "" {
					got = "ok"
				}
				return got
			})
		})
	}
}

// TestScenarioRulesCovered checks that every rule PROTOCOL.md §2–§4 names
// (the "Rules ..." line that ends each section) is named by a scenario.
func TestScenarioRulesCovered(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	rules, err := script.DocRules(text, "\n## 2.", "\n## 5.")
	if err != nil {
		t.Fatalf("PROTOCOL.md: %v", err)
	}
	v2rules, err := script.DocRules(text, "\n## 12.", "")
	if err != nil {
		t.Fatalf("PROTOCOL.md: %v", err)
	}
	if len(rules) < 20 {
		t.Fatalf("found %d rules in PROTOCOL.md §2–§4, expected the full list", len(rules))
	}
	named := map[string]string{}
	files, _ := filepath.Glob("testdata/scenarios/*.txt")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range script.NamedRules(string(b), "# rules:") {
			named[name] = filepath.Base(f)
		}
	}
	for _, r := range rules {
		if named[r] == "" {
			t.Errorf("rule %q of PROTOCOL.md has no scenario naming it", r)
		}
	}
	for r, f := range named {
		if !slices.Contains(rules, r) && !slices.Contains(v2rules, r) {
			t.Errorf("%s names rule %q, which PROTOCOL.md §2–§4 and §12 do not have", f, r)
		}
	}
}
