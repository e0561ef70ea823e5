//go:build linux

// Package relayscript_test drives the gateway relay through scenario
// scripts (internal/script's format, as metaroce's and cc's): each file
// under testdata/ starts a lab of in-process gateways over loopback
// (loadtest/lab: two regions, the link emulator between them), hosts of
// both regions, and flows between them, acts on them (writes, a gateway
// killed or drained, a receiver that stops reading or exits) and prints
// what the relay's rules say must come out: credits, refusal codes,
// completions, and every message delivered once, in order, byte for byte.
// `go test ./gateway/relayscript -rewrite` records the outputs anew; read
// the diff before committing it.
//
// The gateways run on real sockets and real time, so nothing printed
// depends on timing: every wait is for progress (a message placed, a
// completion, a counter) bounded by a failure deadline, and a script
// makes the states it looks at stable before it looks (a receiver that
// does not read holds its DONEs back, so messages stay pending). A comment
// line "# rules: x, y" names the rules of docs/GATEWAY.md the script
// checks (TestRelayScenarioRulesCovered). Commands:
//
//	lab [gateways=N[,M]] [credit=B] [memory=B]
//	                         start the lab: N gateways per region [2]
//	                         (M in the destination region us-east),
//	                         limits.flow_credit_bytes and memory_bytes
//	host NAME region=R [via=GW,...] [credit=B] [hold] [goneafter=D]
//	    [deadafter=D]        a host, registered at its region's gateways
//	                         (via: those only), with memory key 7 to
//	                         receive into; credit is its ReceiveCredit,
//	                         deadafter its DeadAfter [1s], goneafter its
//	                         GoneAfter; hold: its application does
//	                         not read deliveries (a queue of one) until
//	                         consume, so DONE is withheld
//	open F from=H to=R/E [class=C] [refused=CODE] [through=GW]
//	                         open flow F, with the lab's retries of the
//	                         refusals a busy machine causes, but for
//	                         CODE (a refusal code, hyphens for spaces);
//	                         through: a flow the source region's GW
//	                         carries
//	open-spread P n=N from=H to=R/E
//	                         flows P1, P2, ... (at least N) until every
//	                         gateway of R carries one
//	routes                   record which gateway of the destination
//	                         region relays each flow, and whether their
//	                         counts are within one of each other (or as
//	                         many more as detours were counted)
//	placement                after a gateway of the destination region
//	                         was killed: whether each flow it relayed
//	                         moved to a live gateway, each other flow
//	                         stayed, and the live gateways' counts are
//	                         within one of each other (or detours)
//	write F n=N size=S [key=K]
//	                         N messages of S bytes at fresh addresses of
//	                         the destination's memory (key K [7])
//	await F placed           until every byte F wrote is in the
//	                         destination's memory
//	await F complete=N       until N messages of F completed
//	await F settled          until every message of F completed or failed
//	await H FIELD=N          until host H's Stats FIELD is at least N
//	await GW flows=N         until gateway GW shows N flows
//	await R1->R2 unreachable until no gateway of R1 has a route to R2
//	await drained            until every drain started has ended
//	(write and await take "all" for F: every flow, in the order opened)
//	pending F                how many of F's messages completed, failed
//	check H                  every message written to H: delivered once,
//	                         in order, the bytes as written
//	stats H FIELD|FIELD>0... host.Stats fields
//	kill GW|source-of=F|dest-of=F
//	                         stop a gateway at once, as a crash would
//	drain GW|source-of=F     Shutdown the gateway, in the background
//	where F                  the gateway of the source region F is open
//	                         through
//	consume H                H's application starts reading
//	exit H                   H closes (the receiver exits)
//	close F                  F closes
package relayscript_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/script"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/netem"
)

var rewrite = flag.Bool("rewrite", false, "record the scenario outputs anew")

// patience bounds every wait: a failure deadline, never a performance
// threshold.
const patience = 3 * time.Minute

// memKey is the memory key every host receives into; memSize its size.
const (
	memKey  = 7
	memSize = 16 << 20
)

type hostRec struct {
	name, region string
	h            *host.Host
	hold         bool
	mu           sync.Mutex
	got          []host.Delivery // in the order the application saw them
	reading      bool
	next         uint64 // next free address of its memory
}

type msgRec struct {
	p     *host.Pending
	key   uint32
	addr  uint64
	data  []byte
	first uint64
	n     int
}

type flowRec struct {
	name     string
	f        *host.Flow
	src, dst *hostRec
	msgs     []*msgRec
}

type relayScenario struct {
	t      *testing.T
	ctx    context.Context
	l      *lab.Lab
	hosts  map[string]*hostRec
	flows  map[string]*flowRec
	order  []string // flows in the order opened
	killed []string
	// routes: each flow's gateway of the destination region when the
	// routes command ran, and the source gateways' detours counted then.
	routesAt  map[string]string
	detoursAt uint64
	drains    sync.WaitGroup
	rng       *rand.Rand
	out       strings.Builder
}

func (s *relayScenario) printf(format string, args ...any) { fmt.Fprintf(&s.out, format, args...) }

func logger() *slog.Logger {
	if os.Getenv("MRGW_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

func TestRelayScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			s := &relayScenario{t: t, ctx: ctx, hosts: map[string]*hostRec{}, flows: map[string]*flowRec{}, rng: rand.New(rand.NewPCG(7, 11))}
			t.Cleanup(s.drains.Wait)
			script.Run(t, f, *rewrite, func(cmd string) string {
				if t.Failed() {
					// The state a script waits for next may never come
					// after a command gave other output: stop here.
					t.FailNow()
				}
				fields := strings.Fields(cmd)
				s.out.Reset()
				s.run(fields[0], fields[1:])
				if s.out.Len() == 0 {
					return "ok"
				}
				return collapse(s.out.String())
			})
		})
	}
}

// TestRelayScenarioRulesCovered checks that every rule docs/GATEWAY.md
// names in its "Relay rules tested by name" section is named by a script,
// and that no script names a rule the section does not list.
func TestRelayScenarioRulesCovered(t *testing.T) {
	doc, err := os.ReadFile("../../docs/GATEWAY.md")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := script.DocRules(string(doc), "\n## Relay rules tested by name", "")
	if err != nil {
		t.Fatalf("GATEWAY.md: %v", err)
	}
	if len(rules) < 10 {
		t.Fatalf("found %d relay rules in GATEWAY.md, expected the full list", len(rules))
	}
	named := map[string]string{}
	files, _ := filepath.Glob("testdata/*.txt")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rs := script.NamedRules(string(b), "# rules:")
		if len(rs) == 0 {
			t.Errorf("%s names no rule", f)
		}
		for _, r := range rs {
			named[r] = filepath.Base(f)
			if !slices.Contains(rules, r) {
				t.Errorf("%s names rule %q, which GATEWAY.md does not list", f, r)
			}
		}
	}
	for _, r := range rules {
		if named[r] == "" {
			t.Errorf("rule %q of GATEWAY.md has no scenario naming it", r)
		}
	}
}

func (s *relayScenario) kv(args []string) (map[string]string, []string) {
	m := map[string]string{}
	var flags []string
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			flags = append(flags, a)
			continue
		}
		m[k] = v
	}
	return m, flags
}

func (s *relayScenario) int(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		s.t.Fatalf("bad number %q", v)
	}
	return n
}

func (s *relayScenario) dur(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		s.t.Fatalf("bad duration %q", v)
	}
	return d
}

func (s *relayScenario) host(name string) *hostRec {
	h := s.hosts[name]
	if h == nil {
		s.t.Fatalf("no host %q", name)
	}
	return h
}

func (s *relayScenario) flow(name string) *flowRec {
	f := s.flows[name]
	if f == nil {
		s.t.Fatalf("no flow %q", name)
	}
	return f
}

func (s *relayScenario) gw(name string) *gateway.Gateway {
	if s.l == nil {
		s.t.Fatal("no lab")
	}
	g := s.l.Gateways[name]
	if g == nil {
		s.t.Fatalf("no gateway %q", name)
	}
	return g
}

// until polls cond until it holds; the scenario fails at its deadline.
func (s *relayScenario) until(what string, cond func() bool) {
	s.t.Helper()
	for !cond() {
		select {
		case <-s.ctx.Done():
			s.t.Fatalf("waiting for %s: %v", what, s.ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *relayScenario) run(cmd string, args []string) {
	t := s.t
	m, flags := s.kv(args)
	switch cmd {
	case "lab":
		s.startLab(m)
	case "host":
		s.newHost(args[0], m, flags)
	case "open":
		s.open(args[0], m)
	case "write":
		for _, f := range s.named(args[0]) {
			s.write(f, m)
		}
	case "await":
		for _, w := range s.named(args[0]) {
			s.await(w, args[1:])
		}
	case "open-spread":
		s.openSpread(args[0], m)
	case "routes":
		s.routes()
	case "placement":
		s.placement()
	case "pending":
		s.pending(s.flow(args[0]))
	case "check":
		s.check(s.host(args[0]))
	case "stats":
		h := s.host(args[0])
		for _, f := range args[1:] {
			name, positive := strings.CutSuffix(f, ">0")
			if v := s.stat(h, name); positive {
				s.printf("%s: %v\n", f, v > 0)
			} else {
				s.printf("%s: %d\n", f, v)
			}
		}
	case "kill":
		name, role := s.gatewayOf(args[0])
		_ = s.gw(name).Close()
		s.killed = append(s.killed, name)
		s.printf("killed %s\n", role)
	case "drain":
		name, role := s.gatewayOf(args[0])
		g := s.gw(name)
		s.drains.Add(1)
		go func() {
			defer s.drains.Done()
			_ = g.Shutdown(s.ctx)
		}()
		s.printf("shutting %s down\n", role)
	case "where":
		s.printf("%s: through %s\n", args[0], s.srcGateway(s.flow(args[0]).f))
	case "consume":
		s.consume(s.host(args[0]))
	case "exit":
		if err := s.host(args[0]).h.Close(); err != nil {
			s.printf("close: %v\n", err)
		}
	case "close":
		if err := s.flow(args[0]).f.Close(); err != nil {
			s.printf("close: %v\n", err)
		}
	default:
		t.Fatalf("unknown command %q", cmd)
	}
}

// stat is the host.Stats field named (any case).
func (s *relayScenario) stat(h *hostRec, name string) uint64 {
	v := reflect.ValueOf(h.h.Stats()).FieldByNameFunc(func(n string) bool { return strings.EqualFold(n, name) })
	if !v.IsValid() {
		s.t.Fatalf("no host.Stats field %q", name)
	}
	return v.Uint()
}

func (s *relayScenario) startLab(m map[string]string) {
	if s.l != nil {
		s.t.Fatal("a second lab")
	}
	cfg := lab.Config{OneWay: 5 * time.Millisecond, Logger: logger()}
	n := [2]int{2, 2}
	for k, v := range m {
		switch k {
		case "gateways":
			a, b, ok := strings.Cut(v, ",")
			n[0] = s.int(a)
			n[1] = n[0]
			if ok {
				n[1] = s.int(b)
			}
		case "credit":
			cfg.FlowCreditBytes = int64(s.int(v))
		case "memory":
			cfg.MemoryBytes = int64(s.int(v))
		default:
			s.t.Fatalf("unknown lab key %q", k)
		}
	}
	cfg.Regions = []lab.Region{
		{Name: lab.RegionA, Site: netem.SiteA, Gateways: n[0], Prefix: "euw"},
		{Name: lab.RegionB, Site: netem.SiteB, Gateways: n[1], Prefix: "use"},
	}
	l, err := lab.New(s.ctx, cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(l.Close)
	l.Start()
	if err := l.WaitReady(s.ctx); err != nil {
		s.t.Fatal(err)
	}
	s.l = l
	for _, r := range []string{lab.RegionA, lab.RegionB} {
		s.printf("%s: %s\n", r, strings.Join(l.Names[r], " "))
	}
}

func (s *relayScenario) newHost(name string, m map[string]string, flags []string) {
	if s.l == nil {
		s.t.Fatal("host before lab")
	}
	r := &hostRec{name: name, region: m["region"], hold: slices.Contains(flags, "hold")}
	cfg := host.Config{Name: name, Region: r.region, Gateways: s.l.HostGateways(r.region), Key: s.l.HostKey,
		DeadAfter: time.Second, OpenTimeout: patience / 4, Logger: logger()}
	if v, ok := m["via"]; ok {
		cfg.Gateways = nil
		for _, g := range strings.Split(v, ",") {
			cfg.Gateways = append(cfg.Gateways, s.gw(g).LANAddr())
		}
	}
	if v, ok := m["deadafter"]; ok {
		cfg.DeadAfter = s.dur(v)
	}
	if v, ok := m["credit"]; ok {
		cfg.ReceiveCredit = uint64(s.int(v))
	}
	if v, ok := m["goneafter"]; ok {
		cfg.GoneAfter = s.dur(v)
	}
	if r.hold {
		cfg.DeliveryQueue = 1
	}
	h, err := host.New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { h.Close() })
	if err := h.RegisterMemory(memKey, make([]byte, memSize)); err != nil {
		s.t.Fatal(err)
	}
	r.h = h
	s.hosts[name] = r
	if !r.hold {
		s.consume(r)
	}
	s.printf("%s registered in %s\n", name, r.region)
}

// consume starts r's application: it reads every delivery.
func (s *relayScenario) consume(r *hostRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reading {
		return
	}
	r.reading = true
	go func() {
		for {
			select {
			case <-s.ctx.Done():
				return
			case d, ok := <-r.h.Received():
				if !ok {
					return
				}
				r.mu.Lock()
				r.got = append(r.got, d)
				r.mu.Unlock()
			}
		}
	}()
}

// refusal names an open's or a message's failure: the code of a
// flowctl.Error, and the host's verdict.
func refusal(err error) string {
	var parts []string
	var fe *flowctl.Error
	if errors.As(err, &fe) {
		parts = append(parts, fe.Code.String())
	}
	for _, v := range []struct {
		err  error
		name string
	}{{host.ErrEndpointGone, "endpoint gone"}, {host.ErrMessageRefused, "message refused"}, {host.ErrNoRoute, "no route"},
		{host.ErrOpenTimeout, "open timeout"}, {host.ErrClosed, "closed"}} {
		if errors.Is(err, v.err) {
			parts = append(parts, "("+v.name+")")
		}
	}
	if len(parts) == 0 {
		return err.Error()
	}
	return strings.Join(parts, " ")
}

func (s *relayScenario) dest(m map[string]string) (region, endpoint string) {
	region, endpoint, ok := strings.Cut(m["to"], "/")
	if !ok {
		s.t.Fatalf("to=%q is not REGION/ENDPOINT", m["to"])
	}
	return region, endpoint
}

func (s *relayScenario) open(name string, m map[string]string) {
	if s.flows[name] != nil {
		s.t.Fatalf("flow %q exists", name)
	}
	src := s.host(m["from"])
	region, endpoint := s.dest(m)
	opts := host.FlowOptions{Class: m["class"]}
	// The lab's retries of what a busy machine causes, but never of the
	// refusal the script expects.
	expect := strings.ReplaceAll(m["refused"], "-", " ")
	retry := func(err error) bool {
		var fe *flowctl.Error
		return lab.Transient(err) && !(errors.As(err, &fe) && fe.Code.String() == expect)
	}
	var f *host.Flow
	var err error
	for range 32 {
		f, err = lab.OpenFlowIf(s.ctx, src.h, region, endpoint, opts, retry, s.t.Logf)
		if err != nil || m["through"] == "" || s.srcGateway(f) == m["through"] {
			break
		}
		// A flow's gateway is its random id's rendezvous hash: open
		// others until one takes the gateway asked for.
		_ = f.Close()
		f = nil
	}
	if err != nil {
		s.printf("%s refused: %s\n", name, refusal(err))
		return
	}
	if f == nil {
		s.t.Fatalf("no flow of 32 opened through %s", m["through"])
	}
	s.flows[name] = &flowRec{name: name, f: f, src: src, dst: s.hosts[endpoint]}
	s.order = append(s.order, name)
	s.printf("%s open: credit %d\n", name, f.Credit())
}

// gatewayOf resolves GW, source-of=F or dest-of=F to a gateway name, and
// the words a script shows for it: its name only when the script named
// it (which gateway a flow takes is its random id's rendezvous hash).
func (s *relayScenario) gatewayOf(arg string) (name, role string) {
	k, v, ok := strings.Cut(arg, "=")
	if !ok {
		s.gw(arg)
		return arg, arg
	}
	f := s.flow(v).f
	switch k {
	case "source-of":
		return s.srcGateway(f), "the source gateway of " + v
	case "dest-of":
		src := s.srcGateway(f)
		name = s.gw(src).FlowRoutes()[f.ID()]
		if name == "" {
			s.t.Fatalf("%s relays no flow %x", src, f.ID())
		}
		return name, "the destination gateway of " + v
	}
	s.t.Fatalf("%q: want GW, source-of=F or dest-of=F", arg)
	return "", ""
}

// srcGateway is the gateway of the source region f is open through.
func (s *relayScenario) srcGateway(f *host.Flow) string {
	at := f.Gateway()
	for n, g := range s.l.Gateways {
		if g.LANAddr() == at {
			return n
		}
	}
	s.t.Fatalf("flow %x is open through no gateway (%v)", f.ID(), at)
	return ""
}

func (s *relayScenario) write(name string, m map[string]string) {
	fr := s.flow(name)
	n, size := s.int(m["n"]), s.int(m["size"])
	key := uint32(memKey)
	if v, ok := m["key"]; ok {
		key = uint32(s.int(v))
	}
	var first, last uint64
	segs := 0
	for i := range n {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(s.rng.Uint32())
		}
		addr := fr.dst.next
		fr.dst.next += uint64(size)
		if fr.dst.next > memSize {
			s.t.Fatal("destination memory full")
		}
		p, err := fr.f.Write(s.ctx, key, addr, data)
		if err != nil {
			s.printf("write %d: %s\n", i, refusal(err))
			return
		}
		f, c := p.Seqs()
		fr.msgs = append(fr.msgs, &msgRec{p: p, key: key, addr: addr, data: data, first: f, n: c})
		if i == 0 {
			first = f
		}
		last = f + uint64(c) - 1
		segs += c
	}
	if segs == n {
		s.printf("%s: %s, seqs %d..%d\n", name, plural(n, "message"), first, last)
	} else {
		s.printf("%s: %s in %d segments, seqs %d..%d\n", name, plural(n, "message"), segs, first, last)
	}
}

// placed reports whether every byte fr wrote to its destination's
// memory key is there.
func (s *relayScenario) placed(fr *flowRec) bool {
	for _, mr := range fr.msgs {
		if mr.key != memKey {
			continue
		}
		buf := make([]byte, len(mr.data))
		if err := fr.dst.h.ReadMemory(s.ctx, memKey, mr.addr, buf); err != nil || !slices.Equal(buf, mr.data) {
			return false
		}
	}
	return true
}

// counts returns how many of fr's messages completed and failed, and the
// failures' distinct names.
func counts(fr *flowRec) (complete, failed int, why []string) {
	for _, mr := range fr.msgs {
		select {
		case <-mr.p.Done():
			if err := mr.p.Err(); err != nil {
				failed++
				if w := refusal(err); !slices.Contains(why, w) {
					why = append(why, w)
				}
			} else {
				complete++
			}
		default:
		}
	}
	return complete, failed, why
}

func (s *relayScenario) await(what string, args []string) {
	m, flags := s.kv(args)
	switch {
	case what == "drained":
		done := make(chan struct{})
		go func() { s.drains.Wait(); close(done) }()
		select {
		case <-done:
		case <-s.ctx.Done():
			s.t.Fatalf("waiting for the drains: %v", s.ctx.Err())
		}
	case strings.Contains(what, "->") && slices.Contains(flags, "unreachable"):
		from, to, _ := strings.Cut(what, "->")
		s.until(what+" unreachable", func() bool {
			for _, n := range s.l.Names[from] {
				if _, err := s.l.Gateways[n].Cluster().Route(to); err == nil {
					return false
				}
			}
			return true
		})
	case s.flows[what] != nil:
		fr := s.flows[what]
		switch {
		case slices.Contains(flags, "placed"):
			s.until(what+" placed", func() bool { return s.placed(fr) })
		case slices.Contains(flags, "settled"):
			s.until(what+" settled", func() bool { c, f, _ := counts(fr); return c+f == len(fr.msgs) })
		case m["complete"] != "":
			n := s.int(m["complete"])
			s.until(fmt.Sprintf("%s complete=%d", what, n), func() bool { c, _, _ := counts(fr); return c >= n })
		default:
			s.t.Fatalf("await %s: what?", what)
		}
	case s.hosts[what] != nil && len(m) == 1:
		h := s.hosts[what]
		for field, v := range m {
			n := uint64(s.int(v))
			s.until(fmt.Sprintf("%s %s=%d", what, field, n), func() bool { return s.stat(h, field) >= n })
		}
	case m["flows"] != "":
		g, n := s.gw(what), s.int(m["flows"])
		s.until(fmt.Sprintf("%s flows=%d", what, n), func() bool { return g.Status().Flows.Active == n })
	default:
		s.t.Fatalf("await %s %v: what?", what, args)
	}
}

func (s *relayScenario) pending(fr *flowRec) {
	c, f, why := counts(fr)
	s.printf("%s: %d of %d complete", fr.name, c, len(fr.msgs))
	if f > 0 {
		s.printf(", %d failed: %s", f, strings.Join(why, ", "))
	}
	s.printf("\n")
}

// check shows, for every flow into r, whether each message it wrote was
// delivered exactly once, in order of sequence, at the address written,
// with the bytes written.
func (s *relayScenario) check(r *hostRec) {
	r.mu.Lock()
	reading := r.reading
	r.mu.Unlock()
	if reading {
		// Every delivery the host made has reached the application.
		s.until(r.name+" read every delivery", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return uint64(len(r.got)) == r.h.Stats().Delivered
		})
	}
	r.mu.Lock()
	got := slices.Clone(r.got)
	r.mu.Unlock()
	for _, name := range s.order {
		fr := s.flows[name]
		if fr.dst != r {
			continue
		}
		var seqs []uint64
		byseq := map[uint64]host.Delivery{}
		times := map[uint64]int{}
		for _, d := range got {
			if d.Flow == fr.f.ID() {
				seqs = append(seqs, d.Seq)
				byseq[d.Seq] = d
				times[d.Seq]++
			}
		}
		if len(fr.msgs) == 0 {
			continue
		}
		var problems []string
		segs, failed := 0, 0
		for i, mr := range fr.msgs {
			if mr.p.Err() != nil {
				// A failed message must not be reported delivered.
				failed++
				for q := mr.first; q < mr.first+uint64(mr.n); q++ {
					if times[q] > 0 {
						problems = append(problems, fmt.Sprintf("seq %d failed at the source but delivered", q))
					}
				}
				continue
			}
			off := uint64(0)
			for q := mr.first; q < mr.first+uint64(mr.n); q++ {
				segs++
				d, ok := byseq[q]
				switch {
				case times[q] == 0:
					problems = append(problems, fmt.Sprintf("seq %d not delivered", q))
				case times[q] > 1:
					problems = append(problems, fmt.Sprintf("seq %d delivered %d times", q, times[q]))
				case ok && (d.Addr != mr.addr+off || d.Key != mr.key):
					problems = append(problems, fmt.Sprintf("seq %d at key %d address %d, written at %d", q, d.Key, d.Addr, mr.addr+off))
				}
				off += d.Len
			}
			if mr.key == memKey {
				buf := make([]byte, len(mr.data))
				if err := r.h.ReadMemory(s.ctx, memKey, mr.addr, buf); err != nil {
					problems = append(problems, fmt.Sprintf("message %d: read: %v", i, err))
				} else if !slices.Equal(buf, mr.data) {
					problems = append(problems, fmt.Sprintf("message %d: bytes differ", i))
				}
			}
		}
		if len(seqs) > segs {
			problems = append(problems, fmt.Sprintf("%d deliveries of %d segments", len(seqs), segs))
		}
		note := ""
		if failed > 0 {
			note = fmt.Sprintf("; %s failed, not delivered", plural(failed, "message"))
		}
		if !slices.IsSorted(seqs) {
			problems = append(problems, fmt.Sprintf("out of order: %v", seqs))
		}
		if len(problems) == 0 {
			s.printf("%s: %s delivered once each, in order, bytes as written%s\n", name, plural(segs, "segment"), note)
			continue
		}
		if len(problems) > 8 {
			problems = append(problems[:8], fmt.Sprintf("and %d more", len(problems)-8))
		}
		s.printf("%s: %s\n", name, strings.Join(problems, "; "))
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// named is every flow for "all", else name itself.
func (s *relayScenario) named(name string) []string {
	if name == "all" {
		return slices.Clone(s.order)
	}
	return []string{name}
}

// openSpread opens flows P1, P2, ... until there are n and every gateway
// of the destination region relays one (bounded: 64 flows).
func (s *relayScenario) openSpread(prefix string, m map[string]string) {
	region, _ := s.dest(m)
	n := s.int(m["n"])
	for i := 1; ; i++ {
		if i > 64 {
			s.t.Fatalf("64 flows and a gateway of %s relays none", region)
		}
		name := fmt.Sprintf("%s%d", prefix, i)
		s.open(name, m)
		if s.flows[name] == nil {
			return // refused: shown
		}
		s.out.Reset()
		used := map[string]bool{}
		for _, fn := range s.order {
			f := s.flows[fn].f
			used[s.gw(s.srcGateway(f)).FlowRoutes()[f.ID()]] = true
		}
		all := true
		for _, g := range s.l.Names[region] {
			all = all && used[g]
		}
		if i >= n && all {
			s.printf("%s1..: every gateway of %s relays some\n", prefix, region)
			return
		}
	}
}

// routes records where each flow is relayed to now.
func (s *relayScenario) routes() {
	s.routesAt = s.flowRoutes()
	s.detoursAt = s.detours()
	per := map[string]int{}
	for _, g := range s.routesAt {
		per[g]++
	}
	for _, g := range slices.Sorted(maps.Keys(per)) {
		s.printf("%s relays some\n", g)
	}
	s.balance(per, s.l.Names[lab.RegionB], s.detoursAt)
}

// balance says whether the flows per gateway of names are within one of
// each other; every detour counted (allowed) excuses one more.
func (s *relayScenario) balance(per map[string]int, names []string, allowed uint64) {
	lo, hi := per[names[0]], per[names[0]]
	for _, n := range names {
		lo, hi = min(lo, per[n]), max(hi, per[n])
	}
	if uint64(hi-lo) <= 1+allowed {
		s.printf("flows per gateway: within one of each other\n")
		return
	}
	counts := make([]string, 0, len(names))
	for _, n := range names {
		counts = append(counts, fmt.Sprintf("%s %d", n, per[n]))
	}
	s.printf("flows per gateway: %s (%d detours)\n", strings.Join(counts, ", "), allowed)
}

// flowRoutes maps every flow to the destination gateway relaying it.
func (s *relayScenario) flowRoutes() map[string]string {
	out := map[string]string{}
	for _, fn := range s.order {
		f := s.flows[fn].f
		out[fn] = s.gw(s.srcGateway(f)).FlowRoutes()[f.ID()]
	}
	return out
}

// detours sums the routes the running source gateways took off the
// rendezvous order (a gateway suspect or silent at that moment).
func (s *relayScenario) detours() uint64 {
	var n uint64
	for _, g := range s.l.Names[lab.RegionA] {
		if !slices.Contains(s.killed, g) {
			n += s.gw(g).Detoured()
		}
	}
	return n
}

func (s *relayScenario) placement() {
	if s.routesAt == nil {
		s.t.Fatal("placement before routes")
	}
	now := s.flowRoutes()
	var live []string
	for _, g := range s.l.Names[lab.RegionB] {
		if !slices.Contains(s.killed, g) {
			live = append(live, g)
		}
	}
	moved := map[string][]string{}  // problems per gateway the flows were on
	stayed := map[string][]string{} // flows that stayed, per gateway
	per := map[string]int{}
	for _, fn := range s.order {
		was, is := s.routesAt[fn], now[fn]
		per[is]++
		switch {
		case slices.Contains(s.killed, was) && !slices.Contains(live, is):
			moved[was] = append(moved[was], fmt.Sprintf("%s went to %q", fn, is))
		case slices.Contains(s.killed, was):
			moved[was] = append(moved[was], "")
		case is != was:
			stayed[was] = append(stayed[was], fmt.Sprintf("%s moved to %s", fn, is))
		default:
			stayed[was] = append(stayed[was], "")
		}
	}
	for _, g := range s.l.Names[lab.RegionB] {
		var bad []string
		for _, p := range append(moved[g], stayed[g]...) {
			if p != "" {
				bad = append(bad, p)
			}
		}
		switch {
		case len(moved[g]) > 0 && len(bad) == 0:
			s.printf("flows of %s (killed): each moved to a live gateway\n", g)
		case len(stayed[g]) > 0 && len(bad) == 0:
			s.printf("flows of %s: stayed\n", g)
		case len(bad) > 0:
			s.printf("flows of %s: %s\n", g, strings.Join(bad, "; "))
		}
	}
	s.balance(per, live, s.detours()-s.detoursAt)
}

// collapse shows lines "NAME: REST" of two flows or more that all say the
// same REST as one line "every flow: REST" (how many flows open-spread
// opened depends on their random ids).
func collapse(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 2 {
		return out
	}
	var rest string
	for i, l := range lines {
		_, r, ok := strings.Cut(l, ": ")
		if !ok || (i > 0 && r != rest) {
			return out
		}
		rest = r
	}
	return "every flow: " + rest + "\n"
}
