//go:build linux

package hostcap

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
)

// Job is one generator process's share of the hosts: hosts First to
// First+Count-1 of the run, registered with the gateway at Gateway.
type Job struct {
	First, Count int
	Gateway      netip.AddrPort
	KeyID        string
	Secret       []byte
	SourceIPs    int
	Parallel     int
	Stall        time.Duration
}

// Report is what a generator process did: its registrations, their
// times (seconds, registered hosts only), the failures by reason, and
// its own Go heap in use and resident memory (bytes) before the first
// host and with every host registered.
type Report struct {
	Registered   int               `json:"registered"`
	Retries      int               `json:"retries"`
	RegisterSecs []float64         `json:"register_seconds"`
	Failures     map[string]int    `json:"failures,omitempty"`
	Examples     map[string]string `json:"examples,omitempty"`
	HeapBefore   uint64            `json:"heap_before"`
	HeapAfter    uint64            `json:"heap_after"`
	RSSBefore    uint64            `json:"rss_before"`
	RSSAfter     uint64            `json:"rss_after"`
}

// The generator's hosts are idle: registered, PINGing, never sending or
// receiving a flow, thousands to a process on a machine that may be busy.
// At the host library's defaults each woke every 10 ms and PINGed every
// 62.5 ms: 2,000 of them in a starved process fell behind, their paths
// timed out and re-rolled new sockets, their receive buffers grew with the
// backlog, and the gateway reclaimed hosts it had not heard from for 30 s.
// So they check their housekeeping every 500 ms, PING every 5 s (the
// gateway reclaims a host silent for 30 s, 3 s only when its table is
// full), give a gateway up after 20 s of silence, and let a path time out
// after 200 ms at the least. Received holds 16 deliveries: nothing is
// delivered.
const (
	genTick       = 500 * time.Millisecond
	genPing       = 5 * time.Second
	genDeadAfter  = 20 * time.Second
	genMinPTO     = 200 * time.Millisecond
	genDelivery   = 16
	genOpenWithin = 30 * time.Second
)

// hostConfig is host i's configuration.
func (j *Job) hostConfig(i int) host.Config {
	// 127.0.1.0/24 upwards: one source IP per SourceIPs hosts.
	k := i % j.SourceIPs
	ip := netip.AddrFrom4([4]byte{127, 0, byte(1 + k/250), byte(1 + k%250)})
	proto := lab.HostProtocol()
	proto.Path.MinPTO = max(proto.Path.MinPTO, genMinPTO)
	return host.Config{Name: fmt.Sprintf("h%05d", i), Region: "r1", Gateways: []netip.AddrPort{j.Gateway},
		Listen: netip.AddrPortFrom(ip, 0), Key: &host.Key{ID: j.KeyID, Secret: j.Secret}, Protocol: proto,
		OpenTimeout: genOpenWithin, DeadAfter: genDeadAfter, PingEvery: genPing, TickEvery: genTick, DeliveryQueue: genDelivery}
}

// failureReason classifies a registration error.
func failureReason(err error) string {
	switch {
	case errors.Is(err, host.ErrRefused):
		return "refused"
	case errors.Is(err, host.ErrNoGateway):
		return "no_gateway"
	}
	return "error"
}

// generator registers a Job's hosts in this process and holds them.
type generator struct {
	job      Job
	progress func(registered int) // every 500 registrations; may be nil
	hosts    []*host.Host
}

// run registers the hosts. A registration that times out (ErrNoGateway)
// is tried again as long as some host of this process registered within
// Stall: on a slow machine the gateway answers late, not never.
func (g *generator) run(ctx context.Context) (*Report, error) {
	j := &g.job
	rep := &Report{Failures: map[string]int{}, Examples: map[string]string{}}
	rep.HeapBefore, rep.RSSBefore = selfUsage()
	g.hosts = make([]*host.Host, j.Count)
	var mu sync.Mutex
	lastOK := time.Now()
	sem := make(chan struct{}, max(j.Parallel, 1))
	var wg sync.WaitGroup
	for n := range j.Count {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cfg := j.hostConfig(j.First + n)
			t0 := time.Now()
			for {
				h, err := host.New(cfg)
				mu.Lock()
				if err == nil {
					g.hosts[n] = h
					rep.Registered++
					rep.RegisterSecs = append(rep.RegisterSecs, time.Since(t0).Seconds())
					lastOK = time.Now()
					if g.progress != nil && rep.Registered%500 == 0 {
						g.progress(rep.Registered)
					}
					mu.Unlock()
					return
				}
				why := failureReason(err)
				if why == "no_gateway" && time.Since(lastOK) < j.Stall && ctx.Err() == nil {
					rep.Retries++
					mu.Unlock()
					continue
				}
				rep.Failures[why]++
				if _, ok := rep.Examples[why]; !ok {
					rep.Examples[why] = err.Error()
				}
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.HeapAfter, rep.RSSAfter = selfUsage()
	return rep, nil
}

// stats sums the hosts' counters.
func (g *generator) stats() host.Stats {
	var t host.Stats
	for _, h := range g.hosts {
		if h == nil {
			continue
		}
		addStats(&t, h.Stats())
	}
	return t
}

// addStats adds the counters the run reports.
func addStats(t *host.Stats, st host.Stats) {
	t.Registrations += st.Registrations
	t.Connects += st.Connects
	t.ConnectFailures += st.ConnectFailures
	t.SilentGateways += st.SilentGateways
}

// close closes the hosts, in parallel (each Close waits up to half a
// second for its gateway).
func (g *generator) close() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, h := range g.hosts {
		if h != nil {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				h.Close()
			})
		}
	}
	wg.Wait()
	g.hosts = nil
}

// workerMsg is a line from a generator process: progress, or its report.
type workerMsg struct {
	Progress int         `json:"progress,omitempty"`
	Report   *Report     `json:"report,omitempty"`
	Stats    *host.Stats `json:"stats,omitempty"`
	Err      string      `json:"error,omitempty"`
}

// ServeWorker is a generator process: it reads a Job (one JSON line) from
// in, registers its hosts, writes progress lines and then its Report to
// out, and holds the hosts until in is closed.
func ServeWorker(ctx context.Context, in io.Reader, out io.Writer) error {
	rd := bufio.NewReader(in)
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("hostcap worker: reading the job: %w", err)
	}
	var j Job
	if err := json.Unmarshal(line, &j); err != nil {
		return fmt.Errorf("hostcap worker: bad job: %w", err)
	}
	if j.Count <= 0 || j.SourceIPs <= 0 || !j.Gateway.IsValid() {
		return fmt.Errorf("hostcap worker: bad job: %d hosts, %d source IPs, gateway %v", j.Count, j.SourceIPs, j.Gateway)
	}
	// A generator process's heap is its hosts' buffers: collecting at half
	// again the live heap instead of twice it keeps the garbage of hosts
	// tried again, and of sockets re-opened, from doubling its memory.
	debug.SetGCPercent(50)
	enc := json.NewEncoder(out)
	var mu sync.Mutex
	send := func(m workerMsg) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(m)
	}
	g := &generator{job: j, progress: func(n int) { send(workerMsg{Progress: n}) }}
	defer g.close()
	rep, err := g.run(ctx)
	if err != nil {
		send(workerMsg{Err: err.Error()})
		return err
	}
	send(workerMsg{Report: rep})
	// Hold the hosts until the parent has measured: it asks for their
	// counters ("stats"), then closes our input.
	for {
		line, err := rd.ReadString('\n')
		if strings.TrimSpace(line) == "stats" {
			st := g.stats()
			send(workerMsg{Stats: &st})
		}
		if err != nil {
			return nil
		}
	}
}

// workers are the generator processes of a run.
type workers struct {
	procs   []*exec.Cmd
	stdins  []io.WriteCloser
	reports []*Report
	errs    []*strings.Builder
	msgs    chan workerLine
}

// workerLine is a line from generator process w.
type workerLine struct {
	w int
	m workerMsg
}

// startWorkers starts ceil(Hosts/PerProcess) generator processes, gives
// each its share and waits for every report.
func startWorkers(ctx context.Context, o Options, base Job, t0 time.Time) (*workers, error) {
	n := (o.Hosts + o.PerProcess - 1) / o.PerProcess
	msgs := make(chan workerLine, 64)
	ws := &workers{msgs: msgs}
	var readers sync.WaitGroup
	for w := range n {
		j := base
		j.Parallel = max((o.Parallel+w)/n, 1) // o.Parallel in all
		j.First = w * o.Hosts / n
		j.Count = (w+1)*o.Hosts/n - j.First
		cmd := exec.Command(o.Worker[0], o.Worker[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		errOut := &strings.Builder{}
		cmd.Stderr = errOut
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return ws, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return ws, err
		}
		if err := cmd.Start(); err != nil {
			return ws, fmt.Errorf("hostcap: starting a generator process: %w", err)
		}
		ws.procs, ws.stdins, ws.errs = append(ws.procs, cmd), append(ws.stdins, stdin), append(ws.errs, errOut)
		b, _ := json.Marshal(j)
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			return ws, fmt.Errorf("hostcap: generator process %d: %w", w, err)
		}
		readers.Go(func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 16<<20) // a report holds a time per host
			for sc.Scan() {
				var m workerMsg
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					m.Err = fmt.Sprintf("bad line: %v", err)
				}
				select {
				case msgs <- workerLine{w, m}:
				case <-ctx.Done():
					return
				}
			}
			select {
			case msgs <- workerLine{w, workerMsg{Err: "exited"}}:
			case <-ctx.Done():
			}
		})
	}
	go func() {
		readers.Wait()
		close(msgs)
	}()
	o.say("  %d generator processes, %d hosts each", n, (o.Hosts+n-1)/n)
	ws.reports = make([]*Report, n)
	progress := make([]int, n)
	for done := 0; done < n; {
		var m workerLine
		var ok bool
		select {
		case m, ok = <-msgs:
		case <-ctx.Done():
			return ws, ctx.Err()
		}
		if !ok {
			return ws, errors.New("hostcap: the generator processes exited before reporting")
		}
		switch {
		case m.m.Report != nil:
			ws.reports[m.w] = m.m.Report
			progress[m.w] = m.m.Report.Registered
			done++
		case m.m.Err != "":
			if ws.reports[m.w] != nil {
				continue // its end after the report: stopped later
			}
			return ws, fmt.Errorf("hostcap: generator process %d: %s: %s", m.w, m.m.Err, strings.TrimSpace(ws.errs[m.w].String()))
		default:
			progress[m.w] = m.m.Progress
			total := 0
			for _, p := range progress {
				total += p
			}
			o.say("  %d hosts registered (%.0f s)", total, time.Since(t0).Seconds())
		}
	}
	return ws, nil
}

// stats asks every generator process for its hosts' counters and sums
// them.
func (ws *workers) stats(ctx context.Context) (host.Stats, error) {
	var t host.Stats
	for _, in := range ws.stdins {
		if _, err := io.WriteString(in, "stats\n"); err != nil {
			return t, err
		}
	}
	for got := 0; got < len(ws.stdins); {
		var m workerLine
		var ok bool
		select {
		case m, ok = <-ws.msgs:
		case <-ctx.Done():
			return t, ctx.Err()
		}
		switch {
		case !ok:
			return t, errors.New("hostcap: the generator processes exited before reporting their hosts' counters")
		case m.m.Stats != nil:
			addStats(&t, *m.m.Stats)
			got++
		case m.m.Err != "":
			return t, fmt.Errorf("hostcap: generator process %d: %s: %s", m.w, m.m.Err, strings.TrimSpace(ws.errs[m.w].String()))
		}
	}
	return t, nil
}

// stop closes the generator processes' input (they close their hosts and
// exit) and waits for them, killing those still there after 30 s.
func (ws *workers) stop() {
	for _, in := range ws.stdins {
		in.Close()
	}
	if ws.msgs != nil {
		// The readers end when the processes exit.
		go func() {
			for range ws.msgs {
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		for _, p := range ws.procs {
			_ = p.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		for _, p := range ws.procs {
			_ = p.Process.Signal(os.Kill)
		}
		<-done
	}
}
