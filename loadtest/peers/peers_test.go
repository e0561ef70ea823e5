//go:build linux

package peers

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/tunemu"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// quic-go and kcp-go keep process-wide helpers running.
		goleak.IgnoreAnyFunction("github.com/xtaci/kcp-go/v5.(*TimedSched).run"),
		// kcp-go starts a global pool of post-processing workers once per
		// process and never stops it.
		goleak.IgnoreAnyFunction("github.com/xtaci/kcp-go/v5.postProcessWorker"),
		goleak.IgnoreAnyFunction("github.com/xtaci/kcp-go/v5.(*TimedSched).prepend"),
		goleak.IgnoreAnyFunction("github.com/xtaci/kcp-go/v5.(*Listener).monitor"),
		goleak.IgnoreAnyFunction("github.com/xtaci/kcp-go/v5.(*UDPSession).readLoop"),
		goleak.IgnoreAnyFunction("github.com/xtaci/kcp-go/v5.(*UDPSession).postProcess"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func quick() Options {
	return Options{Quick: true, RTTs: []time.Duration{20 * time.Millisecond}, Losses: []float64{0.01}, Seed: 1}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestKCPAndTunnelThroughEmu: kcp and mrgw move data through the UDP relay
// at 20 ms RTT and 1% loss, and report the emulator they used.
func TestKCPAndTunnelThroughEmu(t *testing.T) {
	ctx := testCtx(t)
	o := quick().withDefaults()
	l := o.link(1, 100e6, 20*time.Millisecond, 0.01)
	var trace strings.Builder
	for _, p := range []Peer{{System: KCP}, {System: MRGW}} {
		oo := o
		if p.System == MRGW {
			oo.Trace = &trace
		}
		r, err := Bulk(ctx, p, l, o.Warmup, o.Duration, oo)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if r.GoodputBps <= 0 || r.Emulator != EmuUDP {
			t.Errorf("%s: goodput %v over %q", p, r.GoodputBps, r.Emulator)
		}
		if r.GoodputBps > l.Capacity() {
			t.Errorf("%s: goodput %.0f above the link's capacity %.0f", p, r.GoodputBps, l.Capacity())
		}
		t.Logf("%s: %.1f Mbit/s, %d retransmits, cc %s", p, r.GoodputBps/1e6, r.Retransmits, r.CC)
	}
	// The trace sampled the sender while it ran: a header and at least one
	// line with the sender's and the emulator's counters (1.5 s at 500 ms).
	if tr := trace.String(); !strings.HasPrefix(tr, "trace rtt=20ms loss=0.01") || !strings.Contains(tr, "  good=") ||
		!strings.Contains(tr, "retx=") || !strings.Contains(tr, "link in=") {
		t.Errorf("mrgw trace:\n%s", tr)
	}
}

// TestQUICAndTCPThroughTUN: QUIC and TCP bbr move data through tunemu and
// the TCP sockets really run the asked congestion control.
func TestQUICAndTCPThroughTUN(t *testing.T) {
	if err := tunemu.Check(); err != nil {
		t.Skip(err)
	}
	ctx := testCtx(t)
	o := quick().withDefaults()
	l := o.link(1, 100e6, 20*time.Millisecond, 0.01)
	for _, p := range []Peer{{QUIC, 2}, {TCPBBR, 2}} {
		r, err := Bulk(ctx, p, l, o.Warmup, o.Duration, o)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if r.GoodputBps <= 0 || r.Emulator != EmuTUN {
			t.Errorf("%s: goodput %v over %q", p, r.GoodputBps, r.Emulator)
		}
		if p.System == TCPBBR && r.CC != "bbr" {
			t.Errorf("tcp sockets use %q, not bbr", r.CC)
		}
		t.Logf("%s: %.1f Mbit/s, cc %s", p, r.GoodputBps/1e6, r.CC)
	}
}

// TestLossSweepRows: a one-point sweep yields one row per peer with every
// field the report needs, ratios to mrgw, and JSON names as documented.
func TestLossSweepRows(t *testing.T) {
	ctx := testCtx(t)
	o := quick()
	o.Systems = []string{MRGW, KCP, TCPCubic}
	o.TCPStreams = []int{8}
	o.MRGWExtraCC = "none"
	rows, err := LossSweep(ctx, o)
	if err != nil && !errors.Is(err, tunemu.ErrUnavailable) {
		t.Fatal(err)
	}
	want := 3
	if err != nil {
		t.Logf("TUN rows skipped: %v", err)
		want = 2
	}
	if len(rows) != want {
		t.Fatalf("%d rows, want %d: %+v", len(rows), want, rows)
	}
	for _, r := range rows {
		if r.Scenario != "peers-loss-sweep" || r.RTTms != 20 || r.Loss != 0.01 || r.CapacityBps != DefaultCapacityBps || r.Emulator == "" {
			t.Errorf("row fields: %+v", r)
		}
		if d := r.Fraction - r.GoodputBps/r.CapacityBps; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: fraction %v is not goodput/capacity", r.System, r.Fraction)
		}
		switch r.System {
		case MRGW:
			if r.MRGWRatio != 0 || r.Paths != DefaultPaths {
				t.Errorf("mrgw row: %+v", r)
			}
		case TCPCubic:
			if r.Streams != 8 || r.Emulator != EmuTUN || r.CC != "cubic" {
				t.Errorf("tcp row: %+v", r)
			}
			fallthrough
		default:
			if r.GoodputBps > 0 && r.MRGWRatio <= 0 {
				t.Errorf("%s: no mrgw ratio", r.System)
			}
		}
	}
	var b strings.Builder
	if err := report.WriteJSON(&b, rows); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(b.String(), "\n", 2)[0]), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"system", "rtt_ms", "loss", "capacity_bps", "goodput_bps", "fraction", "emulator"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON row lacks %q: %s", k, b.String())
		}
	}
}

// TestCompletionTimeQuick: messages complete and are timed, for mrgw and
// kcp, with percentiles in order.
func TestCompletionTimeQuick(t *testing.T) {
	ctx := testCtx(t)
	o := quick()
	o.Systems = []string{MRGW, KCP}
	rows, err := CompletionTime(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.Messages != 3 || r.Incomplete != 0 || r.P50ms <= 0 || r.P99ms < r.P50ms || r.MessageBytes != 1<<20 {
			t.Errorf("%s: %+v", r.System, r)
		}
		// 1 MiB cannot cross a 20 ms RTT link in less than half a round
		// trip plus its serialisation at 200 Mbit/s.
		if min := 10 + float64(8<<20)/DefaultCapacityBps*1e3; r.P50ms < min {
			t.Errorf("%s: p50 %.1f ms below the physical minimum %.1f ms", r.System, r.P50ms, min)
		}
		if r.System == KCP && r.P50Ratio <= 0 {
			t.Errorf("kcp: no ratio to mrgw")
		}
	}
}
