//go:build linux

package chaos

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/host"
)

// startHosts starts the in-process hosts (one per region, each writing
// Flows flows to the other) and the host process of region A.
func (r *run) startHosts(ctx context.Context) error {
	ips := map[string]netip.Addr{RegionA: netip.MustParseAddr("127.13.0.1"), RegionB: netip.MustParseAddr("127.13.0.2")}
	for _, reg := range []string{RegionA, RegionB} {
		h, err := host.New(hostConfig(r.names[reg], reg, r.cl.hostGateways(reg), netip.AddrPortFrom(ips[reg], 0), r.o.HostDeadAfter, r.o.Logger))
		if err != nil {
			return fmt.Errorf("chaos: host %s: %w", r.names[reg], err)
		}
		r.hosts[reg] = h
		if err := h.RegisterMemory(memoryKey, make([]byte, uint64(r.writers())*r.lay.areaSize())); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	r.recvCancel = cancel
	for _, h := range r.hosts {
		r.recvWG.Add(1)
		go func() { defer r.recvWG.Done(); r.ck.receive(rctx, h) }()
	}
	for i, reg := range []string{RegionA, RegionB} {
		other := RegionB
		if reg == RegionB {
			other = RegionA
		}
		for f := range r.o.Flows {
			w := &writer{id: i*r.o.Flows + f, lay: r.lay, h: r.hosts[reg], region: other, dst: r.names[other],
				onFlow: func(int, uint64) {}, onDone: r.ck.completed, onFail: r.ck.fail}
			r.inproc = append(r.inproc, w)
			r.writersWG.Add(1)
			go func() { defer r.writersWG.Done(); w.run(ctx, r.writersStop) }()
		}
	}
	r.child = &hostProc{r: r}
	return r.child.start(0)
}

func (r *run) closeHosts() {
	if r.child != nil {
		r.child.stop()
	}
	for _, h := range r.hosts {
		h.Close()
	}
	if r.recvCancel != nil {
		r.recvCancel()
	}
	r.recvWG.Wait()
}

// hostProc runs the host process (RunChild) of region A, writing to the
// in-process host of region B, and reads its completions.
type hostProc struct {
	r           *run
	mu          sync.Mutex
	cmd         *exec.Cmd
	stdin       io.WriteCloser
	read        chan struct{} // closed when its stdout is read to the end
	incarnation int
	since       time.Time
	stderr      *os.File
	gw          netip.AddrPort // the gateway its flow went through, as it last said
}

func (h *hostProc) start(incarnation int) error {
	r := h.r
	id := r.childID(incarnation)
	var gws []string
	for _, a := range r.cl.hostGateways(RegionA) {
		gws = append(gws, a.String())
	}
	args := append(slices.Clone(ChildArgs),
		"--gateways", strings.Join(gws, ","), "--region", RegionA, "--name", "a-proc",
		"--listen", "127.13.0.3:0", "--to", RegionB+"/"+r.names[RegionB],
		"--writer", strconv.Itoa(id), "--size", strconv.Itoa(r.lay.size), "--slots", strconv.Itoa(r.lay.slots),
		"--window", strconv.Itoa(r.lay.window), "--dead-after", r.o.HostDeadAfter.String(), "--log-level", cmp.Or(r.o.LogLevel, "warn"))
	cmd := exec.Command(r.o.LabBinary, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	ef, err := os.OpenFile(filepath.Join(r.dir, "a-proc.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(ef, "=== chaos: host process incarnation %d (writer %d) at %s\n", incarnation, id, time.Now().Format(time.RFC3339Nano))
	cmd.Stderr = ef
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		ef.Close()
		return err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		ef.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		ef.Close()
		return fmt.Errorf("chaos: host process: %w", err)
	}
	read := make(chan struct{})
	h.mu.Lock()
	h.cmd, h.stdin, h.read, h.incarnation, h.since, h.stderr = cmd, stdin, read, incarnation, time.Now(), ef
	h.mu.Unlock()
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "gateway" {
				if a, err := netip.ParseAddrPort(f[1]); err == nil {
					h.mu.Lock()
					h.gw = a
					h.mu.Unlock()
				}
			}
			if len(f) == 5 && f[0] == "done" {
				var v [4]uint64
				ok := true
				for i := range 4 {
					var perr error
					if v[i], perr = strconv.ParseUint(f[i+1], 10, 64); perr != nil {
						ok = false
					}
				}
				if ok {
					r.ck.completed(int(v[0]), v[1], v[2], v[3])
				}
			}
		}
	}()
	return nil
}

// current returns the running incarnation's writer id and start time.
func (h *hostProc) current() (id int, since time.Time, ok bool) {
	if h == nil {
		return 0, time.Time{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return 0, time.Time{}, false
	}
	return h.r.childID(h.incarnation), h.since, true
}

// kill9 kills the process with SIGKILL and reads what it printed.
func (h *hostProc) kill9() error {
	h.mu.Lock()
	cmd, read, ef := h.cmd, h.read, h.stderr
	h.cmd = nil
	h.mu.Unlock()
	if cmd == nil {
		return errors.New("chaos: no host process")
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-read
	_ = cmd.Wait()
	ef.Close()
	return nil
}

// stop ends the process by closing its stdin (it stops writing and exits),
// SIGKILL after 5 s.
func (h *hostProc) stop() {
	h.mu.Lock()
	cmd, stdin, read, ef := h.cmd, h.stdin, h.read, h.stderr
	h.cmd = nil
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	stdin.Close()
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-read
	}
	_ = cmd.Wait()
	ef.Close()
}
