//go:build linux

package gateway_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
)

// series is one sample of a scraped exposition.
type series struct {
	labels map[string]string
	value  float64
}

// scrape reads a gateway's /metrics (text format) into samples by series
// name; a histogram's count is its name_count series.
func scrape(t *testing.T, admin string) map[string][]series {
	t.Helper()
	out := map[string][]series{}
	for _, line := range strings.Split(get(t, "http://"+admin+"/metrics"), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			t.Fatalf("bad exposition line %q", line)
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("bad value in %q: %v", line, err)
		}
		name, rest := line[:sp], ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, rest = name[:i], strings.TrimSuffix(name[i+1:], "}")
		}
		l := map[string]string{}
		for _, kv := range strings.Split(rest, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				l[k] = strings.Trim(val, `"`)
			}
		}
		out[name] = append(out[name], series{labels: l, value: v})
	}
	return out
}

// sum adds the values of name's series whose labels include want, and
// returns how many there were.
func sum(fams map[string][]series, name string, want map[string]string) (float64, int) {
	var v float64
	n := 0
	for _, s := range fams[name] {
		ok := true
		for k, w := range want {
			if s.labels[k] != w {
				ok = false
			}
		}
		if ok {
			v += s.value
			n++
		}
	}
	return v, n
}

// TestMetricsAfterTraffic scrapes /metrics of a running gateway pair (w1
// in west, e1 in east, 4 planes, 8 paths) after messages crossed it, and
// checks that the datapath series are fed: per-plane WAN datagram
// counters both ways, drops on the plane garbage was sent to, LAN goodput
// both ways, the completion-time histogram, path state gauges (one state
// per path) and the label cardinality the configuration allows.
func TestMetricsAfterTraffic(t *testing.T) {
	const planes, paths = 4, 8
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	pl := newPlaneLab(t, planeLabConfig{planes: planes, paths: paths, admin: true, gws: map[string][]string{"west": {"w1"}, "east": {"e1"}}})
	pl.waitReady(t, ctx)
	src := pl.hostVia(t, "src", "w1")
	dst := pl.hostVia(t, "dst", "e1")
	tr := newTransfer(t, src, dst, 16<<20)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go tr.receive(rctx)
	f, err := lab.OpenFlow(ctx, src, "east", "dst", host.FlowOptions{}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 100 {
		if err := tr.send(ctx, f, rng); err != nil {
			t.Fatal(err)
		}
	}
	tr.wait(ctx)
	tr.check()

	// 10 garbage datagrams from an unknown source to w1's plane p1 (not
	// from 127.0.0.1, where the hosts are).
	const garbage = 10
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.6.1:0")), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(pl.cfgs["w1"].WAN.Planes[1].Local)))
	if err != nil {
		t.Fatal(err)
	}
	for range garbage {
		if _, err := c.Write([]byte("not a tunnel datagram, just noise")); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()

	var bytesOut float64
	for _, w := range tr.want {
		bytesOut += float64(len(w))
	}
	w1, e1 := pl.cfgs["w1"].Admin.Listen, pl.cfgs["e1"].Admin.Listen
	var fw, fe map[string][]series
	for {
		// Metrics are refreshed every StatsEvery, on each gateway at its
		// own time: wait until the last messages and the garbage show at
		// w1 and every byte sent shows at e1.
		// e1 first: what it has received was sent before w1 is read,
		// even with the WAN PINGs still flowing between the two reads.
		fe = scrape(t, e1)
		fw = scrape(t, w1)
		drops, _ := sum(fw, "mrgw_wan_datagrams_dropped_total", map[string]string{"plane": "p1", "reason": "unknown_peer"})
		done, _ := sum(fw, "mrgw_message_completion_seconds_count", nil)
		in, _ := sum(fe, "mrgw_lan_goodput_bytes_total", map[string]string{"direction": "in"})
		if drops >= garbage && done >= float64(len(tr.want)) && in >= bytesOut {
			if drops != garbage {
				t.Fatalf("p1 dropped %v unknown-source datagrams, %d were sent", drops, garbage)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("drops %v (want %d), completion samples %v (want %d)", drops, garbage, done, len(tr.want))
		case <-time.After(50 * time.Millisecond):
		}
	}
	for k := range planes {
		plane := fmt.Sprintf("p%d", k)
		for _, chk := range []struct {
			fams map[string][]series
			fam  string
			peer string
		}{
			{fw, "mrgw_wan_datagrams_sent_total", "e1"}, {fw, "mrgw_wan_datagrams_received_total", "e1"},
			{fe, "mrgw_wan_datagrams_sent_total", "w1"}, {fe, "mrgw_wan_datagrams_received_total", "w1"},
			{fw, "mrgw_wan_sent_bytes_total", "e1"}, {fe, "mrgw_wan_received_bytes_total", "w1"},
		} {
			if v, _ := sum(chk.fams, chk.fam, map[string]string{"peer": chk.peer, "plane": plane}); v <= 0 {
				t.Errorf("%s{peer=%s,plane=%s} = %v, want > 0", chk.fam, chk.peer, plane, v)
			}
		}
	}
	// What w1 sent on the planes, e1 received (no loss configured): the
	// two gateways' counters agree within what is still in flight. Each
	// gateway refreshes its metrics at its own time, so w1's figure may
	// be older than e1's: read w1 again until its refresh has passed e1's
	// (sent only grows), then compare.
	recv, _ := sum(fe, "mrgw_wan_datagrams_received_total", nil)
	sent, _ := sum(fw, "mrgw_wan_datagrams_sent_total", nil)
	for sent < recv && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		fw = scrape(t, w1)
		sent, _ = sum(fw, "mrgw_wan_datagrams_sent_total", nil)
	}
	if recv > sent || recv < sent*0.9 {
		t.Errorf("w1 sent %v datagrams, e1 received %v", sent, recv)
	}
	if v, _ := sum(fw, "mrgw_lan_goodput_bytes_total", map[string]string{"direction": "out"}); v < bytesOut {
		t.Errorf("w1 LAN goodput out %v, want at least the %v bytes sent", v, bytesOut)
	}
	if v, _ := sum(fe, "mrgw_lan_goodput_bytes_total", map[string]string{"direction": "in"}); v < bytesOut {
		t.Errorf("e1 LAN goodput in %v, want at least the %v bytes sent", v, bytesOut)
	}
	if v, _ := sum(fw, "mrgw_message_completion_seconds_count", map[string]string{"peer_region": "east"}); v != float64(len(tr.want)) {
		t.Errorf("completion histogram has %v samples, %d messages completed", v, len(tr.want))
	}
	// Path state: every path of w1's connection to e1 has exactly one
	// state at 1; the series are bounded by peers × paths × states.
	for p := range paths {
		v, n := sum(fw, "mrgw_path_state", map[string]string{"peer": "e1", "path": fmt.Sprint(p), "plane": fmt.Sprintf("p%d", p%planes)})
		if v != 1 || n != 4 {
			t.Errorf("path %d: %d state series summing to %v, want 4 summing to 1", p, n, v)
		}
	}
	if n, _ := sum(fw, "mrgw_path_state", nil); n != paths {
		t.Errorf("%v paths in some state, want %d", n, paths)
	}
	for fam, bound := range map[string]int{"mrgw_path_state": paths * 4, "mrgw_wan_datagrams_sent_total": planes, "mrgw_path_rtt_seconds": paths} {
		if _, n := sum(fw, fam, nil); n > bound || n == 0 {
			t.Errorf("%s has %d series, bound %d", fam, n, bound)
		}
	}
	if v, _ := sum(fw, "mrgw_peers_alive", map[string]string{"peer_region": "east"}); v != 1 {
		t.Errorf("mrgw_peers_alive{peer_region=east} = %v, want 1", v)
	}
	// The control session between w1 and e1 began with a Retry at the
	// listener (stateless address validation); no handshake is left in
	// progress; the kernel's drops at the plane and control sockets are
	// exported (0 here), and so are the state machine's.
	var retries float64
	for _, f := range []map[string][]series{fw, fe} {
		v, _ := sum(f, "mrgw_control_packets_dropped_total", map[string]string{"reason": "retry"})
		retries += v
		if v, n := sum(f, "mrgw_control_handshakes_in_progress", nil); v != 0 || n != 1 {
			t.Errorf("mrgw_control_handshakes_in_progress: %d series summing to %v, want 1 at 0", n, v)
		}
		if _, n := sum(f, "mrgw_protocol_datagrams_dropped_total", nil); n == 0 {
			t.Error("no mrgw_protocol_datagrams_dropped_total series")
		}
	}
	if retries < 1 {
		t.Error("no Retry counted for the control session's handshake")
	}
	if _, n := sum(fw, "mrgw_wan_datagrams_dropped_total", map[string]string{"reason": "buffer"}); n != planes {
		t.Errorf("%d series of mrgw_wan_datagrams_dropped_total{reason=buffer}, want one per plane (%d)", n, planes)
	}
}
