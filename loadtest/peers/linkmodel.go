//go:build linux

package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/tcpcc"
	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/units"
)

// LinkModelOptions is the link-model experiment (LinkModelVariants).
type LinkModelOptions struct {
	// Losses are the random loss rates run (default 1%, 5%, 10%).
	Losses []float64
	// RTT is the round trip (default 100 ms).
	RTT time.Duration
	// Variants selects variants by name (default all, LinkModelVariantNames).
	Variants []string
	// Streams are the stream counts run (default 1 and 8).
	Streams []int
	// Warmup overrides Options' warm-up (0: its default).
	Warmup time.Duration
	// CapacityBps is the link's capacity (0: the loss sweep's default).
	CapacityBps float64
	// Seed seeds the emulator as the loss sweep's Options.Seed does (the
	// same value gives the same loss pattern as `loss-sweep --seed`).
	Seed uint64
	// Nice, if set, is the autogroup nice of the whole run
	// (tunemu.Prioritize).
	Nice *int
	// Child is the command line that runs LinkModelChild in a child
	// process (the "child" variants); the child's role and its arguments
	// are appended.
	Child []string
}

// linkModelVariant is one choice of the link model that a second emulator
// might make differently.
type linkModelVariant struct {
	name string
	mod  func(*tunemu.Config)
}

var linkModelVariants = []linkModelVariant{
	{"default", func(*tunemu.Config) {}},
	{"fwd-only", func(c *tunemu.Config) { c.LossForwardOnly = true }},
	{"pre-queue", func(c *tunemu.Config) { c.LossBeforeQueue = true }},
	{"pre-queue+fwd-only", func(c *tunemu.Config) { c.LossBeforeQueue, c.LossForwardOnly = true, true }},
	{"rmem", func(c *tunemu.Config) { c.Sysctls["net.ipv4.tcp_rmem"] = "4096 8388608 33554432" }},
	{"lossless-warmup", func(c *tunemu.Config) { c.Link.Loss = 0 }},
	{"child", func(*tunemu.Config) {}},
	{"child+pre-queue", func(c *tunemu.Config) { c.LossBeforeQueue = true }},
	{"no-ecn", func(c *tunemu.Config) {
		c.Link.ECNThreshold = 0
		c.Sysctls = map[string]string{"net.ipv4.tcp_ecn": "0"}
	}},
}

// LinkModelVariantNames lists the variants of LinkModelVariants in order.
func LinkModelVariantNames() []string {
	out := make([]string, len(linkModelVariants))
	for i, v := range linkModelVariants {
		out[i] = v.name
	}
	return out
}

// LinkModelVariants checks the baseline the peers are measured on: kernel
// bbr through tunemu under each choice of the link
// model that a second emulator might make differently (where the random
// loss is drawn, whether the ACK direction loses, ECN marking, endpoints in
// child processes that do not share the emulator's Go runtime), at one
// round trip, with the emulator's self-check of every run. It writes one
// line per run to w, with the first connection's TCP_INFO and bbr state.
// Minutes of real time; the figures depend on the machine.
func LinkModelVariants(ctx context.Context, lo LinkModelOptions, w io.Writer) error {
	losses := lo.Losses
	if len(losses) == 0 {
		losses = []float64{0.01, 0.05, 0.1}
	}
	rtt := lo.RTT
	if rtt == 0 {
		rtt = 100 * time.Millisecond
	}
	variants := linkModelVariants
	if len(lo.Variants) > 0 {
		variants = nil
		for _, name := range lo.Variants {
			i := slicesIndex(linkModelVariants, name)
			if i < 0 {
				return fmt.Errorf("unknown link-model variant %q (known: %s)", name, strings.Join(LinkModelVariantNames(), ", "))
			}
			variants = append(variants, linkModelVariants[i])
		}
	}
	if err := tunemu.Check(); err != nil {
		return err
	}
	streams := lo.Streams
	if len(streams) == 0 {
		streams = []int{1, 8}
	}
	o := Options{CapacityBps: lo.CapacityBps, Seed: lo.Seed}.withDefaults()
	if lo.Warmup > 0 {
		o.Warmup = lo.Warmup
	}
	if lo.Nice != nil {
		restore, err := tunemu.Prioritize(*lo.Nice)
		if err != nil {
			return err
		}
		defer restore()
	}
	var mu sync.Mutex
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
	}
	tcpInfoHook = func(cs []net.Conn) {
		if len(cs) == 0 {
			return
		}
		rc, err := cs[0].(*net.TCPConn).SyscallConn()
		if err != nil {
			return
		}
		_ = rc.Control(func(fd uintptr) {
			if in, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				logf("  conn 0: state %d ca %d cwnd %d rtt %dus minrtt %dus pacing %.1fMbit deliv %.1fMbit lost %d retr %d busy %dms rwnd-lim %dms sndbuf-lim %dms snd_wnd %d",
					in.State, in.Ca_state, in.Snd_cwnd, in.Rtt, in.Min_rtt, float64(units.ByteRate(in.Pacing_rate).Bits())/1e6, float64(units.ByteRate(in.Delivery_rate).Bits())/1e6,
					in.Lost, in.Total_retrans, in.Busy_time/1000, in.Rwnd_limited/1000, in.Sndbuf_limited/1000, in.Snd_wnd)
			}
		})
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
		if len(cs) == 0 {
			return
		}
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
						bw := float64(units.ByteRate(uint64(bi.Bw_hi)<<32|uint64(bi.Bw_lo)).Bits()) / 1e6
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
			logf("  conn 0 pacing gain/bw Mbit every 250 ms:%s", gains.String())
		}
	}
	for _, loss := range losses {
		for _, n := range streams {
			for _, v := range variants {
				l := o.link(1, o.CapacityBps, rtt, loss)
				cfg := l.tunConfig()
				v.mod(&cfg)
				if strings.HasPrefix(v.name, "child") {
					if len(lo.Child) == 0 {
						return fmt.Errorf("variant %s: no command line for the child processes", v.name)
					}
					te, err := tunemu.New(ctx, cfg)
					if err != nil {
						return err
					}
					bps, ck, err := childBulk(ctx, te, lo.Child, "bbr", n, o.Warmup, o.Duration)
					te.Close()
					if err != nil {
						return fmt.Errorf("%s: %w", v.name, err)
					}
					logf("rtt %v loss %.3f bbr x%d %-20s fraction %.3f | ok %v late p50 %v p99 %v max %v busy r %.2f w %.2f tun drops %d",
						rtt, loss, n, v.name, bps/l.Capacity(), ck.OK, ck.LateP50, ck.LateP99, ck.LateMax, ck.ReaderBusy, ck.WriterBusy, ck.TUNDrops)
					continue
				}
				var hookErr error
				if v.name == "lossless-warmup" {
					lossy := l.tunConfig().Link
					tcpWindowHook = func(te *tunemu.Emulator) { hookErr = te.SetAllLinks(lossy) }
				}
				c, cancel := context.WithTimeout(ctx, 60*time.Second)
				r, err := tcpBulkOn(c, "bbr", n, cfg, o.Warmup, o.Duration)
				cancel()
				tcpWindowHook = nil
				endGains()
				if err = errors.Join(err, hookErr); err != nil {
					return fmt.Errorf("%s: %w", v.name, err)
				}
				ck := r.Check
				logf("rtt %v loss %.3f bbr x%d %-20s fraction %.3f retx %d | ok %v late p50 %v p99 %v max %v busy r %.2f w %.2f tun drops %d",
					rtt, loss, n, v.name, r.GoodputBps/l.Capacity(), r.Retransmits,
					ck.OK, ck.LateP50, ck.LateP99, ck.LateMax, ck.ReaderBusy, ck.WriterBusy, ck.TUNDrops)
			}
		}
	}
	return nil
}

func slicesIndex(vs []linkModelVariant, name string) int {
	for i, v := range vs {
		if v.name == name {
			return i
		}
	}
	return -1
}

// LinkModelChild is the child process of the link-model experiment's
// "child" variants, run inside a site's namespace so that the TCP
// endpoints do not share the emulator's Go runtime. args is "recv N"
// (accept N connections on AddrB:5201 and print the bytes received in
// order every 50 ms, after a line "listening") or "send N ALGO" (open N
// connections to AddrB:5201 and write until killed).
func LinkModelChild(ctx context.Context, args []string, w io.Writer) error {
	if len(args) < 2 {
		return errors.New("want recv N or send N ALGO")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(tunemu.AddrB.String(), "5201")
	switch args[0] {
	case "recv":
		ln, err := net.Listen("tcp4", addr)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, "listening")
		var cs []net.Conn
		for range n {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			cs = append(cs, c)
			go io.Copy(io.Discard, c)
		}
		p := &tcpPair{peers: cs}
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			fmt.Fprintln(w, p.received())
			select {
			case <-ctx.Done():
				return nil
			case <-tk.C:
			}
		}
	case "send":
		if len(args) < 3 {
			return errors.New("want send N ALGO")
		}
		d := tcpcc.Dialer(args[2])
		for range n {
			c, err := d.Dial("tcp4", addr)
			if err != nil {
				return err
			}
			go tcpWriteLoop(c, nil, nil)
		}
		<-ctx.Done()
		return nil
	}
	return fmt.Errorf("unknown child role %q", args[0])
}

// childBulk runs n TCP streams of algo through te with both endpoints in
// child processes (child: the command line of LinkModelChild) and returns
// the goodput over duration after warmup.
func childBulk(ctx context.Context, te *tunemu.Emulator, child []string, algo string, n int, warmup, duration time.Duration) (float64, tunemu.Verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, warmup+duration+30*time.Second)
	defer cancel()
	command := func(site tunemu.Site, args ...string) *exec.Cmd {
		return te.Command(ctx, site, child[0], append(append([]string(nil), child[1:]...), args...)...)
	}
	recv := command(tunemu.SiteB, "recv", strconv.Itoa(n))
	out, err := recv.StdoutPipe()
	if err != nil {
		return 0, tunemu.Verdict{}, err
	}
	if err := recv.Start(); err != nil {
		return 0, tunemu.Verdict{}, err
	}
	defer func() { recv.Process.Kill(); recv.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "listening" {
	}
	send := command(tunemu.SiteA, "send", strconv.Itoa(n), algo)
	if err := send.Start(); err != nil {
		return 0, tunemu.Verdict{}, err
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
		return 0, tunemu.Verdict{}, err
	}
	return bps, h1.Sub(h0).Check(), nil
}
