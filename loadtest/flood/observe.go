//go:build linux

package flood

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/region"
)

// counterRe picks the counter families that say something was dropped,
// refused or reclaimed: whatever the gateway exposes by reason, including
// families that do not exist yet when this was written (gossip drops).
var counterRe = regexp.MustCompile(`(dropped|drops|refused|refusals|reclaimed|rejected|invalid)`)

// primaryRe picks, among those, the families that count datagrams (or
// connections) turned away at a socket: one count per datagram, so that
// their sum can be set against what was sent. Admission refusals are a
// subset of the LAN's unknown_source drops and are reported, not summed.
var primaryRe = regexp.MustCompile(`(datagrams|packets|messages|connections|conns)_(dropped|refused|rejected)_total$|^mrgw_gossip_.*(dropped|drops|refused|rejected)`)

// counters is a snapshot of the counter families counterRe picks, keyed
// name{label="value",...}.
type counters map[string]float64

func snapshot(g *gateway.Gateway) counters { return scrape(g, counterRe) }

// everyCounter matches every family: scrape(g, everyCounter) is every
// counter series the gateway exports.
var everyCounter = regexp.MustCompile(``)

// scrape reads the counter series of the families re matches.
func scrape(g *gateway.Gateway, re *regexp.Regexp) counters {
	out := counters{}
	mfs, err := g.Metrics().Registry.Gather()
	if err != nil && len(mfs) == 0 {
		return out
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if !re.MatchString(name) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				continue // a level, not a count
			default:
				continue
			}
			var lb []string
			for _, l := range m.GetLabel() {
				lb = append(lb, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(lb)
			k := name
			if len(lb) > 0 {
				k += "{" + strings.Join(lb, ",") + "}"
			}
			out[k] = v
		}
	}
	return out
}

// counterFaults checks every counter series across a flood of sent
// datagrams (or connections): a counter never goes back, and a drop,
// refusal or reclaim counter (counterRe) grows by at most sent plus slack
// (what the transfer alongside may add). A series that did either is
// returned with its two values: a counter computed as an unsigned
// difference that went negative shows here as a jump of about 1.8e19.
func counterFaults(before, after counters, sent, slack uint64) []string {
	var out []string
	for k, b := range before {
		a, ok := after[k]
		if !ok {
			out = append(out, fmt.Sprintf("%s vanished (was %g)", k, b))
			continue
		}
		if a < b {
			out = append(out, fmt.Sprintf("%s went back: %g -> %g", k, b, a))
		}
	}
	for k, a := range after {
		name := k
		if i := strings.IndexByte(k, '{'); i >= 0 {
			name = k[:i]
		}
		if !counterRe.MatchString(name) {
			continue
		}
		if d := a - before[k]; d > float64(sent+slack) {
			out = append(out, fmt.Sprintf("%s grew by %g for %d sent: %g -> %g", k, d, sent, before[k], a))
		}
	}
	sort.Strings(out)
	return out
}

// delta returns after-before for every key that grew.
func delta(before, after counters) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range after {
		if d := v - before[k]; d >= 1 {
			out[k] = uint64(d)
		}
	}
	return out
}

// primarySum sums the deltas of the primary families.
func primarySum(d map[string]uint64) uint64 {
	var n uint64
	for k, v := range d {
		name := k
		if i := strings.IndexByte(k, '{'); i >= 0 {
			name = k[:i]
		}
		if primaryRe.MatchString(name) {
			n += v
		}
	}
	return n
}

// protoStats reads the MetaRoCE state machine's drop counters of a
// gateway's endpoint (LAN and WAN together): the gateway keeps them but
// does not export them.
func protoStats(g *gateway.Gateway) metaroce.EndpointStats {
	var st metaroce.EndpointStats
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = g.Endpoint().Call(ctx, func(_ time.Duration, ep *metaroce.Endpoint) { st = ep.Stats })
	return st
}

func protoDelta(a, b metaroce.EndpointStats) map[string]uint64 {
	out := map[string]uint64{}
	add := func(k string, x, y uint64) {
		if y > x {
			out[k] = y - x
		}
	}
	add("truncated", a.Truncated, b.Truncated)
	add("bad_version", a.BadVersion, b.BadVersion)
	add("bad_type", a.BadType, b.BadType)
	add("unknown_conn", a.UnknownConn, b.UnknownConn)
	add("malformed", a.Malformed, b.Malformed)
	add("refused", a.Refused, b.Refused)
	return out
}

// regionStats flattens the gossip cluster's counters of what it dropped or
// refused (region.Stats: uint64 fields and maps by reason whose name says
// Dropped, Refused or Bad, and what it accepted), read by reflection so that counters the
// region package adds later are picked up too. The gateway keeps them
// but, unless a metric family carries them, does not export them.
func regionStats(g *gateway.Gateway) map[string]uint64 {
	out := map[string]uint64{}
	v := reflect.ValueOf(g.Cluster().Stats())
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		if !strings.Contains(name, "Dropped") && !strings.Contains(name, "Refused") && !strings.HasPrefix(name, "Bad") &&
			!strings.Contains(name, "Accepted") {
			continue
		}
		switch f.Kind() {
		case reflect.Uint64:
			out[name] = f.Uint()
		case reflect.Map:
			if f.Type().Key().Kind() != reflect.String || f.Type().Elem().Kind() != reflect.Uint64 {
				continue
			}
			for _, k := range f.MapKeys() {
				out[name+"{"+k.String()+"}"] = f.MapIndex(k).Uint()
			}
		}
	}
	return out
}

func mapDelta(a, b map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range b {
		if v > a[k] {
			out[k] = v - a[k]
		}
	}
	return out
}

// udpKernelDrops sums the kernel's drop count (/proc/net/udp, the last
// column) of every UDP socket bound to addr.
func udpKernelDrops(addr netip.AddrPort) (uint64, error) {
	f, err := os.Open("/proc/net/udp")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	want := procAddr(addr)
	var n uint64
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 13 || fs[1] != want {
			continue
		}
		d, err := strconv.ParseUint(fs[len(fs)-1], 10, 64)
		if err == nil {
			n += d
		}
	}
	return n, sc.Err()
}

// procAddr is addr as /proc/net/udp prints it: the IPv4 address as a
// little-endian hex word, the port in hex.
func procAddr(addr netip.AddrPort) string {
	b := addr.Addr().As4()
	return strings.ToUpper(hex.EncodeToString([]byte{b[3], b[2], b[1], b[0]})) + ":" + fmt.Sprintf("%04X", addr.Port())
}

// tcpListenOverflows reads the kernel's TcpExt ListenOverflows and
// ListenDrops (for the whole machine).
func tcpListenOverflows() (overflows, drops uint64) {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0, 0
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "TcpExt:") || !strings.HasPrefix(lines[i+1], "TcpExt:") {
			continue
		}
		ks, vs := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for j := 1; j < len(ks) && j < len(vs); j++ {
			v, _ := strconv.ParseUint(vs[j], 10, 64)
			switch ks[j] {
			case "ListenOverflows":
				overflows = v
			case "ListenDrops":
				drops = v
			}
		}
		return
	}
	return
}

// rssMB is this process's resident set (VmRSS), in MiB.
func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			fs := strings.Fields(l)
			if len(fs) >= 2 {
				kb, _ := strconv.ParseFloat(fs[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

// monitor samples the process and the gateways' views every interval:
// RSS, goroutines, gossip changes (deaths) and WAN peer states.
type monitor struct {
	l      map[string]*gateway.Gateway
	every  time.Duration
	guard  func(rss float64, gor int) string // non-empty: abort reason
	onStop func(string)

	mu        sync.Mutex
	rssPeak   float64
	gorPeak   int
	deaths    []string // gossip changes to dead or left, "observer: name from→to"
	suspects  []string
	peerLoss  []string // WAN peers leaving "up", "observer: peer state"
	aborted   string
	recording bool

	quit, done chan struct{}
	cancels    []func()
}

func newMonitor(gws map[string]*gateway.Gateway, every time.Duration, guard func(float64, int) string, onAbort func(string)) *monitor {
	m := &monitor{l: gws, every: every, guard: guard, onStop: onAbort, quit: make(chan struct{}), done: make(chan struct{})}
	type watch struct {
		name string
		ch   <-chan region.Change
	}
	var ws []watch
	for n, g := range gws {
		ch, cancel := g.Cluster().WatchChanges(1024)
		ws = append(ws, watch{n, ch})
		m.cancels = append(m.cancels, cancel)
	}
	for _, w := range ws {
		go func() {
			for c := range w.ch {
				if c.To == region.Dead || c.To == region.Left || c.To == region.Suspect {
					m.mu.Lock()
					if m.recording {
						s := fmt.Sprintf("%s sees %s %s→%s", w.name, c.Name, c.From, c.To)
						if c.To == region.Suspect {
							m.suspects = append(m.suspects, s)
						} else {
							m.deaths = append(m.deaths, s)
						}
					}
					m.mu.Unlock()
				}
			}
		}()
	}
	go m.loop()
	return m
}

func (m *monitor) loop() {
	defer close(m.done)
	t := time.NewTicker(m.every)
	defer t.Stop()
	prev := map[string]string{} // observer/peer → state
	for {
		rss, gor := rssMB(), runtime.NumGoroutine()
		m.mu.Lock()
		rec := m.recording
		if rec {
			m.rssPeak = max(m.rssPeak, rss)
			m.gorPeak = max(m.gorPeak, gor)
		}
		m.mu.Unlock()
		if rec && m.guard != nil {
			if why := m.guard(rss, gor); why != "" {
				m.mu.Lock()
				first := m.aborted == ""
				if first {
					m.aborted = why
				}
				m.mu.Unlock()
				if first && m.onStop != nil {
					m.onStop(why)
				}
			}
		}
		for n, g := range m.l {
			for _, p := range g.Status().Peers {
				k := n + "/" + p.Name
				if rec && prev[k] == "up" && p.State != "up" {
					m.mu.Lock()
					m.peerLoss = append(m.peerLoss, fmt.Sprintf("%s: WAN peer %s %s (%s)", n, p.Name, p.State, p.LastError))
					m.mu.Unlock()
				}
				prev[k] = p.State
			}
		}
		select {
		case <-m.quit:
			return
		case <-t.C:
		}
	}
}

// record starts (or stops) counting peaks and deaths.
func (m *monitor) record(on bool) {
	m.mu.Lock()
	m.recording = on
	m.mu.Unlock()
}

func (m *monitor) stop() {
	close(m.quit)
	<-m.done
	for _, c := range m.cancels {
		c()
	}
}
