package cc_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	_ "github.com/mrgw/mrgw/cc/longrtt" // registers longrtt-htcp and longrtt-scalable
	"github.com/mrgw/mrgw/internal/script"

	"github.com/mrgw/mrgw/units"
)

// Controller scripts, in the spirit of raft's testdata and of
// metaroce/testdata/scenarios: each file under testdata/scenarios drives
// AIMD controllers (dc-aimd and the long-RTT ones) with acks, losses, hints
// and path events at times the script gives, and compares the state printed
// after every command with the output recorded in the file.
// `go test ./cc -run TestScenarios -rewrite` records the outputs anew; read
// the diff before committing it.
//
// A script is a list of commands, each followed by a line "----" and its
// expected output, then a blank line. Lines starting with # are comments; a
// comment line "# rule: NAME" names the rule of docs/CC.md the script checks
// (TestScenarioRulesCovered checks that every rule has one). Every command
// acts on the controller named by c=NAME, by default the last one named.
// Each controller has its own clock, which starts at 0 when it is made and
// moves only with tick and run: controllers compared side by side see the
// same times. Rates are bit rates with a unit (1gbit), durations Go durations.
//
//	new CONTROLLER [name=a] [paths=1] [pkt=1400] [line=RATE] [base=D]
//	    [ref=D] [target=D] [initial=RATE] [fallback=true]
//	                              a controller by its registered name
//	ack path=P bytes=B rtt=D [srtt=D] [min=D] [marked=B]
//	                              one ack at the current time (srtt and
//	                              min default to rtt)
//	sent path=P bytes=B           OnSent
//	loss path=P bytes=B           OnLoss
//	hint RATE                     the receiver's hint
//	path P up|down                OnPathState
//	late D                        the pacer came back D late (OnSendLate)
//	tick D                        time passes; nothing happens
//	run D [every=1ms] [paths=0,1] rtt=D[,D..] [min=D[,D..]]
//	    [marked=F[,F..]] [loss=F[,F..]] [hint=RATE] [app=RATE] [late=D]
//	    [print=D]
//	                              a driver: every `every`, each path in
//	                              turn is sent its part of the pacing rate
//	                              (at most app in all) and acks it at once,
//	                              fraction marked of it ECN-marked and
//	                              fraction loss of it lost (whole packets);
//	                              with hint, the hint comes every step;
//	                              with late, every step's sends were D late;
//	                              print shows the rate every D
//	state                         the state, without acting
//
// Comma lists give one value per path of paths=, a single value all of
// them. After every command the controller's state is shown.
var rewrite = flag.Bool("rewrite", false, "record the scenario outputs anew")

type ccScenario struct {
	t     *testing.T
	now   time.Duration // the current controller's clock
	clock map[string]time.Duration
	ctls  map[string]*cc.AIMD
	pkts  map[string]int
	cur   string
	out   strings.Builder
	lossA map[string][]float64 // fractional loss carried to the next step, per path
}

func (s *ccScenario) printf(format string, args ...any) { fmt.Fprintf(&s.out, format, args...) }

func (s *ccScenario) args(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			s.t.Fatalf("argument %q is not key=value", a)
		}
		m[k] = v
	}
	return m
}

func (s *ccScenario) dur(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		s.t.Fatalf("bad duration %q", v)
	}
	return d
}

func (s *ccScenario) rate(v string) units.BitRate {
	r, err := units.ParseRate(v)
	if err != nil {
		s.t.Fatal(err)
	}
	return units.BitRate(r)
}

func (s *ccScenario) int(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		s.t.Fatalf("bad number %q", v)
	}
	return n
}

func (s *ccScenario) float(v string) float64 {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		s.t.Fatalf("bad number %q", v)
	}
	return f
}

// list reads a comma list with one value per path of paths (or one for all).
func list[T any](s *ccScenario, v string, paths []int, parse func(string) T) []T {
	parts := strings.Split(v, ",")
	out := make([]T, len(paths))
	for i := range paths {
		switch {
		case len(parts) == 1:
			out[i] = parse(parts[0])
		case len(parts) == len(paths):
			out[i] = parse(parts[i])
		default:
			s.t.Fatalf("%q: want one value or one per path", v)
		}
	}
	return out
}

// ctl picks the controller a command acts on (c=NAME) and removes c= from m.
func (s *ccScenario) ctl(m map[string]string) (*cc.AIMD, int) {
	name := s.cur
	if n, ok := m["c"]; ok {
		name = n
		delete(m, "c")
	}
	a := s.ctls[name]
	if a == nil {
		s.t.Fatalf("no controller %q", name)
	}
	s.use(name)
	return a, s.pkts[name]
}

// use makes name the current controller, with its own clock.
func (s *ccScenario) use(name string) {
	s.clock[s.cur] = s.now
	s.cur, s.now = name, s.clock[name]
}

func mbit(bytesPerSec float64) string { return fmt.Sprintf("%.4gMbit/s", bytesPerSec*8/1e6) }

// state shows the controller's rate and every path's.
func (s *ccScenario) state(a *cc.AIMD) {
	s.printf("%s t=%v rate=%s pacing=%s", s.cur, s.now, mbit(a.Rate()), mbit(float64(a.PacingRate())))
	if h := a.Hint(); h > 0 {
		s.printf(" hint=%s", mbit(h))
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{a.Searching(), "searching"}, {a.Steering(), "steering"}, {a.FallbackActive(), "fallback"}, {a.AppLimited(), "app-limited"}} {
		if f.on {
			s.printf(" %s", f.name)
		}
	}
	if q := a.QueueDelay(); q > 0 {
		s.printf(" queue=%v", q.Round(10*time.Microsecond))
	}
	s.printf("\n")
	for p := range a.Paths() {
		if !a.PathUsable(p) {
			s.printf("  p%d down\n", p)
			continue
		}
		s.printf("  p%d rate=%s window=%d alpha=%.3f lossfloor=%.4f", p, mbit(a.PathRate(p)), a.Window(p), a.PathAlpha(p), a.PathLossFloor(p))
		if a.Splits() {
			s.printf(" weight=%.3f", a.SplitWeight(p))
		}
		s.printf("\n")
	}
}

func (s *ccScenario) newCtl(args []string) {
	if len(args) == 0 {
		s.t.Fatal("new: which controller")
	}
	m := s.args(args[1:])
	name, paths, pkt := "a", 1, 1400
	var p cc.Params
	for k, v := range m {
		switch k {
		case "name":
			name = v
		case "paths":
			paths = s.int(v)
		case "pkt":
			pkt = s.int(v)
		case "line":
			p.LineRate = s.rate(v)
		case "base":
			p.BaseRTT = s.dur(v)
		case "ref":
			p.RefRTT = s.dur(v)
		case "target":
			p.DelayTarget = s.dur(v)
		case "initial":
			p.InitialRate = s.rate(v)
		case "fallback":
			p.ClassicFallback = v == "true"
		default:
			s.t.Fatalf("new: unknown key %q", k)
		}
	}
	f, err := cc.Lookup(args[0], p)
	if err != nil {
		s.t.Fatal(err)
	}
	a, ok := f(paths, pkt).(*cc.AIMD)
	if !ok {
		s.t.Fatalf("%s is not the AIMD engine", args[0])
	}
	s.ctls[name], s.pkts[name] = a, pkt
	s.lossA[name] = make([]float64, paths)
	s.use(name)
	s.now = 0
}

// drive is the run command: a driver that sends each path its part of the
// pacing rate every step and acks it at once.
func (s *ccScenario) drive(args []string) {
	if len(args) == 0 {
		s.t.Fatal("run: how long")
	}
	m := s.args(args[1:])
	a, pkt := s.ctl(m)
	end := s.now + s.dur(args[0])
	every := time.Millisecond
	if v, ok := m["every"]; ok {
		every = s.dur(v)
	}
	var paths []int
	if v, ok := m["paths"]; ok {
		for _, p := range strings.Split(v, ",") {
			paths = append(paths, s.int(p))
		}
	} else {
		for p := range a.Paths() {
			paths = append(paths, p)
		}
	}
	if m["rtt"] == "" {
		s.t.Fatal("run: rtt= is required")
	}
	rtt := list(s, m["rtt"], paths, s.dur)
	minRTT := rtt
	if v, ok := m["min"]; ok {
		minRTT = list(s, v, paths, s.dur)
	}
	zero := func(string) float64 { return 0 }
	marked, loss := list(s, "0", paths, zero), list(s, "0", paths, zero)
	if v, ok := m["marked"]; ok {
		marked = list(s, v, paths, s.float)
	}
	if v, ok := m["loss"]; ok {
		loss = list(s, v, paths, s.float)
	}
	var hint, app units.BitRate
	if v, ok := m["hint"]; ok {
		hint = s.rate(v)
	}
	if v, ok := m["app"]; ok {
		app = s.rate(v)
	}
	var print, late time.Duration
	if v, ok := m["print"]; ok {
		print = s.dur(v)
	}
	if v, ok := m["late"]; ok {
		late = s.dur(v)
	}
	for k := range m {
		if !slices.Contains([]string{"every", "paths", "rtt", "min", "marked", "loss", "hint", "app", "late", "print"}, k) {
			s.t.Fatalf("run: unknown key %q", k)
		}
	}
	carry := s.lossA[s.cur]
	nextPrint := s.now + print
	for s.now < end {
		s.now += every
		sum := 0.0
		for _, p := range paths {
			sum += a.PathRate(p)
		}
		budget := float64(a.PacingRate()) * every.Seconds()
		if app > 0 {
			budget = min(budget, float64(app.Bytes())*every.Seconds())
		}
		for i, p := range paths {
			if !a.PathUsable(p) || sum <= 0 {
				continue
			}
			b := int(budget * a.PathRate(p) / sum)
			if b <= 0 {
				continue
			}
			a.OnSent(s.now, p, b)
			lost := 0
			carry[p] += loss[i] * float64(b)
			for carry[p] >= float64(pkt) && lost+pkt <= b {
				carry[p] -= float64(pkt)
				lost += pkt
			}
			if lost > 0 {
				a.OnLoss(s.now, p, lost)
			}
			acked := b - lost
			if acked <= 0 {
				continue
			}
			a.OnAck(s.now, p, cc.AckSample{AckedBytes: acked, MarkedBytes: int(marked[i] * float64(acked)),
				RTT: rtt[i], SRTT: rtt[i], MinRTT: minRTT[i]})
		}
		if hint > 0 {
			a.OnRateHint(s.now, hint.Bytes())
		}
		if late > 0 {
			a.OnSendLate(s.now, late)
		}
		if print > 0 && s.now >= nextPrint && s.now < end {
			nextPrint += print
			s.printf("%s t=%v rate=%s", s.cur, s.now, mbit(a.Rate()))
			if a.Paths() > 1 {
				for _, p := range paths {
					s.printf(" p%d=%s", p, mbit(a.PathRate(p)))
				}
			}
			s.printf("\n")
		}
	}
}

func (s *ccScenario) run(cmd string, args []string) {
	t := s.t
	if cmd == "new" {
		s.newCtl(args)
		s.state(s.ctls[s.cur])
		return
	}
	if cmd == "run" {
		s.drive(args)
		s.state(s.ctls[s.cur])
		return
	}
	// The other commands: positional arguments first, then key=value.
	var pos []string
	for len(args) > 0 && !strings.Contains(args[0], "=") {
		pos, args = append(pos, args[0]), args[1:]
	}
	m := s.args(args)
	a, _ := s.ctl(m)
	switch cmd {
	case "ack":
		rtt := s.dur(m["rtt"])
		smp := cc.AckSample{AckedBytes: s.int(m["bytes"]), RTT: rtt, SRTT: rtt, MinRTT: rtt}
		if v, ok := m["srtt"]; ok {
			smp.SRTT = s.dur(v)
		}
		if v, ok := m["min"]; ok {
			smp.MinRTT = s.dur(v)
		}
		if v, ok := m["marked"]; ok {
			smp.MarkedBytes = s.int(v)
		}
		a.OnAck(s.now, s.int(m["path"]), smp)
	case "sent":
		a.OnSent(s.now, s.int(m["path"]), s.int(m["bytes"]))
	case "loss":
		a.OnLoss(s.now, s.int(m["path"]), s.int(m["bytes"]))
	case "hint":
		a.OnRateHint(s.now, s.rate(pos[0]).Bytes())
	case "path":
		if len(pos) != 2 || (pos[1] != "up" && pos[1] != "down") {
			t.Fatal("path P up|down")
		}
		a.OnPathState(s.now, s.int(pos[0]), pos[1] == "up")
	case "late":
		a.OnSendLate(s.now, s.dur(pos[0]))
	case "tick":
		s.now += s.dur(pos[0])
	case "state":
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	s.state(a)
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := &ccScenario{t: t, clock: map[string]time.Duration{}, ctls: map[string]*cc.AIMD{}, pkts: map[string]int{}, lossA: map[string][]float64{}}
			script.Run(t, f, *rewrite, func(cmd string) string {
				fields := strings.Fields(cmd)
				s.out.Reset()
				s.run(fields[0], fields[1:])
				return s.out.String()
			})
		})
	}
}

// TestScenarioRulesCovered checks that every rule docs/CC.md names (the
// "Rules tested by name" paragraphs) has a script named after it whose
// "# rule:" line names it, and that no script names a rule CC.md lacks.
func TestScenarioRulesCovered(t *testing.T) {
	doc, err := os.ReadFile("../docs/CC.md")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := script.DocRules(string(doc), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) < 10 {
		t.Fatalf("found %d rules in CC.md, expected the full list", len(rules))
	}
	files, _ := filepath.Glob("testdata/scenarios/*.txt")
	named := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimSuffix(filepath.Base(f), ".txt")
		found := false
		for _, r := range script.NamedRules(string(b), "# rule:") {
			found = true
			if r != base {
				t.Errorf("%s names rule %q: a script is named by its rule", f, r)
			}
			if !slices.Contains(rules, r) {
				t.Errorf("%s names rule %q, which CC.md does not list", f, r)
			}
			named[r] = true
		}
		if !found {
			t.Errorf("%s names no rule", f)
		}
	}
	for _, r := range rules {
		if !named[r] {
			t.Errorf("rule %q of CC.md has no script", r)
		}
	}
}
