//go:build linux

package peers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/loadtest/tunemu"
)

// TestTUNLinkModelVariants is the experiment behind docs/results/peers.md's
// "Peers measured fairly": kernel bbr through tunemu under each choice of
// the link model that a second emulator might make differently (where the
// random loss is drawn, whether the ACK direction loses, ECN marking), at
// one point, with the self-check of every run. It takes minutes of real
// time and its figures depend on the machine, so it runs only when
// MRGW_PEERS_XCHECK is set: to "1" for the defaults below, or to a loss
// list ("0.01,0.05,0.1"). MRGW_PEERS_XCHECK_RTT overrides the round trip,
// MRGW_PEERS_XCHECK_VARIANTS selects variants by name (comma-separated),
// MRGW_PEERS_XCHECK_WARMUP the warm-up, MRGW_PEERS_XCHECK_STREAMS one
// stream count, MRGW_PEERS_XCHECK_NICE the session's autogroup nice
// (tunemu.Prioritize) for the whole experiment.
func TestTUNLinkModelVariants(t *testing.T) {
	spec := os.Getenv("MRGW_PEERS_XCHECK")
	if spec == "" {
		t.Skip("MRGW_PEERS_XCHECK not set: an experiment of minutes, not a test")
	}
	if err := tunemu.Check(); err != nil {
		t.Skip(err)
	}
	losses := []float64{0.01, 0.05, 0.1}
	if spec != "1" {
		losses = nil
		for _, f := range strings.Split(spec, ",") {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, v)
		}
	}
	rtt := 100 * time.Millisecond
	if s := os.Getenv("MRGW_PEERS_XCHECK_RTT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		rtt = d
	}
	type variant struct {
		name string
		mod  func(*tunemu.Config)
	}
	variants := []variant{
		{"default", func(*tunemu.Config) {}},
		{"fwd-only", func(c *tunemu.Config) { c.LossForwardOnly = true }},
		{"pre-queue", func(c *tunemu.Config) { c.LossBeforeQueue = true }},
		{"pre-queue+fwd-only", func(c *tunemu.Config) { c.LossBeforeQueue, c.LossForwardOnly = true, true }},
		{"rmem", func(c *tunemu.Config) { c.Sysctls["net.ipv4.tcp_rmem"] = "4096 8388608 33554432" }},
		{"lossless-warmup", func(c *tunemu.Config) { c.Link.Loss = 0 }},
		{"child", func(c *tunemu.Config) {}},
		{"child+pre-queue", func(c *tunemu.Config) { c.LossBeforeQueue = true }},
		{"no-ecn", func(c *tunemu.Config) {
			c.Link.ECNThreshold = 0
			c.Sysctls = map[string]string{"net.ipv4.tcp_ecn": "0"}
		}},
	}
	if s := os.Getenv("MRGW_PEERS_XCHECK_VARIANTS"); s != "" {
		var sel []variant
		for _, v := range variants {
			if strings.Contains(","+s+",", ","+v.name+",") {
				sel = append(sel, v)
			}
		}
		variants = sel
	}
	o := Options{}.withDefaults()
	if s := os.Getenv("MRGW_PEERS_XCHECK_NICE"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		restore, err := tunemu.Prioritize(n)
		if err != nil {
			t.Fatal(err)
		}
		defer restore()
	}
	if s := os.Getenv("MRGW_PEERS_XCHECK_WARMUP"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		o.Warmup = d
	}
	streams := []int{1, 8}
	if s := os.Getenv("MRGW_PEERS_XCHECK_STREAMS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		streams = []int{n}
	}
	tcpInfoHook = func(cs []net.Conn) {
		for i, c := range cs {
			rc, err := c.(*net.TCPConn).SyscallConn()
			if err != nil || i > 0 {
				continue
			}
			_ = rc.Control(func(fd uintptr) {
				if in, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
					t.Logf("  conn 0: state %d ca %d cwnd %d rtt %dus minrtt %dus pacing %.1fMbit deliv %.1fMbit lost %d retr %d busy %dms rwnd-lim %dms sndbuf-lim %dms snd_wnd %d",
						in.State, in.Ca_state, in.Snd_cwnd, in.Rtt, in.Min_rtt, float64(in.Pacing_rate)*8/1e6, float64(in.Delivery_rate)*8/1e6,
						in.Lost, in.Total_retrans, in.Busy_time/1000, in.Rwnd_limited/1000, in.Sndbuf_limited/1000, in.Snd_wnd)
				}
			})
		}
	}
	defer func() { tcpInfoHook = nil }()
	// The first connection's bbr state every 250 ms: a pacing gain stuck
	// at 1.0 for seconds is bbr's long-term (policer) mode.
	var gains strings.Builder
	var stopGains chan struct{}
	var gainsDone sync.WaitGroup
	tcpStartHook = func(cs []net.Conn) {
		gains.Reset()
		stopGains = make(chan struct{})
		rc, err := cs[0].(*net.TCPConn).SyscallConn()
		if err != nil {
			return
		}
		gainsDone.Add(1)
		go func() {
			defer gainsDone.Done()
			tk := time.NewTicker(250 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stopGains:
					return
				case <-tk.C:
				}
				_ = rc.Control(func(fd uintptr) {
					if bi, err := unix.GetsockoptTCPCCBBRInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_CC_INFO); err == nil {
						bw := float64(uint64(bi.Bw_hi)<<32|uint64(bi.Bw_lo)) * 8 / 1e6
						fmt.Fprintf(&gains, " %.2f/%.0f", float64(bi.Pacing_gain)/256, bw)
					}
				})
			}
		}()
	}
	defer func() { tcpStartHook = nil }()
	endGains := func() {
		if stopGains != nil {
			close(stopGains)
			gainsDone.Wait()
			stopGains = nil
			t.Logf("  conn 0 pacing gain/bw Mbit every 250 ms:%s", gains.String())
		}
	}
	for _, loss := range losses {
		for _, n := range streams {
			for _, v := range variants {
				l := o.link(1, o.CapacityBps, rtt, loss)
				cfg := l.tunConfig()
				v.mod(&cfg)
				if strings.HasPrefix(v.name, "child") {
					te, err := tunemu.New(context.Background(), cfg)
					if err != nil {
						t.Fatal(err)
					}
					bps, ck := childBulk(t, te, "bbr", n, o.Warmup, o.Duration)
					te.Close()
					t.Logf("rtt %v loss %.3f bbr x%d %-20s fraction %.3f | ok %v late p50 %v p99 %v max %v busy r %.2f w %.2f tun drops %d",
						rtt, loss, n, v.name, bps/l.Capacity(), ck.OK, ck.LateP50, ck.LateP99, ck.LateMax, ck.ReaderBusy, ck.WriterBusy, ck.TUNDrops)
					continue
				}
				if v.name == "lossless-warmup" {
					lossy := l.tunConfig().Link
					tcpWindowHook = func(te *tunemu.Emulator) {
						if err := te.SetAllLinks(lossy); err != nil {
							t.Error(err)
						}
					}
				}
				c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				r, err := tcpBulkOn(c, "bbr", n, cfg, o.Warmup, o.Duration)
				cancel()
				tcpWindowHook = nil
				endGains()
				if err != nil {
					t.Fatalf("%s: %v", v.name, err)
				}
				ck := r.Check
				t.Logf("rtt %v loss %.3f bbr x%d %-20s fraction %.3f retx %d | ok %v late p50 %v p99 %v max %v busy r %.2f w %.2f tun drops %d",
					rtt, loss, n, v.name, r.GoodputBps/l.Capacity(), r.Retransmits,
					ck.OK, ck.LateP50, ck.LateP99, ck.LateMax, ck.ReaderBusy, ck.WriterBusy, ck.TUNDrops)
			}
		}
	}
}

// TestXCheckHelper is not a test: TestTUNLinkModelVariants' "child"
// variant runs it in a child process inside a site's namespace, so that
// the TCP endpoints do not share the emulator's Go runtime.
// MRGW_PEERS_XCHECK_HELPER is "recv N" (accept N connections on
// AddrB:5201, print the bytes received in order every 50 ms) or
// "send N ALGO" (open N connections to AddrB:5201 and write until killed).
func TestXCheckHelper(t *testing.T) {
	spec := strings.Fields(os.Getenv("MRGW_PEERS_XCHECK_HELPER"))
	if len(spec) < 2 {
		t.Skip("helper process only")
	}
	n, _ := strconv.Atoi(spec[1])
	switch spec[0] {
	case "recv":
		ln, err := net.Listen("tcp4", net.JoinHostPort(tunemu.AddrB.String(), "5201"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("listening")
		var cs []net.Conn
		for range n {
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
			go io.Copy(io.Discard, c)
		}
		p := &tcpPair{peers: cs}
		for {
			fmt.Println(p.received())
			time.Sleep(50 * time.Millisecond)
		}
	case "send":
		d := tcpDialer(spec[2])
		for range n {
			c, err := d.Dial("tcp4", net.JoinHostPort(tunemu.AddrB.String(), "5201"))
			if err != nil {
				t.Fatal(err)
			}
			go tcpWriteLoop(c, nil, nil)
		}
		select {}
	}
}

// childBulk runs n TCP streams of algo through te with both endpoints in
// child processes and returns the goodput over duration after warmup.
func childBulk(t *testing.T, te *tunemu.Emulator, algo string, n int, warmup, duration time.Duration) (float64, tunemu.Verdict) {
	ctx, cancel := context.WithTimeout(context.Background(), warmup+duration+30*time.Second)
	defer cancel()
	recv := te.Command(ctx, tunemu.SiteB, os.Args[0], "-test.run=^TestXCheckHelper$")
	recv.Env = append(os.Environ(), fmt.Sprintf("MRGW_PEERS_XCHECK_HELPER=recv %d", n), "MRGW_PEERS_XCHECK=")
	out, err := recv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { recv.Process.Kill(); recv.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "listening" {
	}
	send := te.Command(ctx, tunemu.SiteA, os.Args[0], "-test.run=^TestXCheckHelper$")
	send.Env = append(os.Environ(), fmt.Sprintf("MRGW_PEERS_XCHECK_HELPER=send %d %s", n, algo), "MRGW_PEERS_XCHECK=")
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { send.Process.Kill(); send.Wait() }()
	var last atomic.Uint64
	go func() {
		for sc.Scan() {
			if v, err := strconv.ParseUint(sc.Text(), 10, 64); err == nil {
				last.Store(v)
			}
		}
	}()
	var h0, h1 tunemu.Health
	bps, err := measureWindow(ctx, last.Load, warmup, duration, func() { h0 = te.Health() }, func() { h1 = te.Health() })
	if err != nil {
		t.Fatal(err)
	}
	return bps, h1.Sub(h0).Check()
}
