//go:build linux

package apps

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/units"
	"golang.org/x/sys/unix"
)

// ErrMissingProgram is matched by the error of a workload whose program is
// not installed here; its rows are skipped, the others measured.
var ErrMissingProgram = errors.New("apps: program not installed")

// haveIperf says whether iperf3 can run.
func haveIperf() error {
	if _, err := exec.LookPath("iperf3"); err != nil {
		return fmt.Errorf("%w: iperf3 (apt-get install iperf3): %v", ErrMissingProgram, err)
	}
	return nil
}

// iperfPort is the iperf3 server's port inside tunemu's namespace B (a
// fresh namespace: nothing else listens there).
const iperfPort = 5201

// serverArgs are iperf3's server arguments: one test, then exit (so that
// its CPU time is known once it is waited for); --forceflush so that its
// "Server listening" line arrives while it runs.
func serverArgs(bind string, port int) []string {
	return []string{"-s", "-1", "-B", bind, "-p", strconv.Itoa(port), "--forceflush"}
}

// clientArgs are iperf3's client arguments: n streams, o.Warmup omitted,
// o.Duration measured, JSON on stdout; algo, if set, is the sending
// sockets' congestion control.
func clientArgs(host string, port, n int, o *Options, algo string) []string {
	args := []string{"-c", host, "-p", strconv.Itoa(port), "-P", strconv.Itoa(n),
		"-t", strconv.Itoa(int(o.Duration / time.Second)), "-O", strconv.Itoa(int(o.Warmup / time.Second)), "-J"}
	if algo != "" {
		args = append(args, "-C", algo)
	}
	return args
}

// iperfJSON is the part of iperf3's -J output the rows use.
type iperfJSON struct {
	End struct {
		SumSent struct {
			Bytes       float64 `json:"bytes"`
			Retransmits uint64  `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Bytes         float64 `json:"bytes"`
			Seconds       float64 `json:"seconds"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		SenderCC string `json:"sender_tcp_congestion"`
	} `json:"end"`
	Error string `json:"error"`
}

// lockedBuffer collects a child's output for error messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 64<<10 {
		return len(p), nil // bounded: the start says why a run failed
	}
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// iperfServer is a running iperf3 server.
type iperfServer struct {
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan error
}

// serverPatience bounds the wait for a server to listen and to exit.
const serverPatience = 20 * time.Second

// startIperfServer starts cmd (an iperf3 server) and waits until it
// listens.
func startIperfServer(cmd *exec.Cmd) (*iperfServer, error) {
	s := &iperfServer{cmd: cmd, done: make(chan error, 1)}
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = &s.out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("iperf3 server: %w", err)
	}
	go func() {
		err := cmd.Wait()
		pw.Close()
		s.done <- err
	}()
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			s.out.Write([]byte(line + "\n"))
			if strings.Contains(line, "Server listening") {
				once.Do(func() { close(listening) })
			}
		}
		io.Copy(io.Discard, pr)
	}()
	t := time.NewTimer(serverPatience)
	defer t.Stop()
	select {
	case <-listening:
		return s, nil
	case err := <-s.done:
		s.done <- err
		return nil, fmt.Errorf("iperf3 server exited before listening: %v\n%s", err, s.out.String())
	case <-t.C:
		s.kill()
		return nil, fmt.Errorf("iperf3 server not listening within %v\n%s", serverPatience, s.out.String())
	}
}

// wait waits for the server to exit (it does after one test) and returns
// its CPU seconds; a server still running after serverPatience is killed.
func (s *iperfServer) wait() float64 {
	t := time.NewTimer(serverPatience)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.kill()
	}
	return childCPU(s.cmd.ProcessState)
}

func (s *iperfServer) kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	select {
	case <-s.done:
	case <-time.After(serverPatience):
	}
}

// iperfRun runs the client cmd against the started server srv and returns
// the measurement: goodput at the receiver, the CPU of this process and of
// both iperf3 processes over the client's run, the sender's congestion
// control and retransmissions.
func iperfRun(ctx context.Context, srv *iperfServer, cli *exec.Cmd) (Result, error) {
	var stdout bytes.Buffer
	var stderr lockedBuffer
	cli.Stdout, cli.Stderr = &stdout, &stderr
	cli.WaitDelay = 5 * time.Second
	cpu0, t0 := processCPU(), time.Now()
	err := cli.Run()
	wall, cpu := time.Since(t0), processCPU()-cpu0
	srvCPU := srv.wait()
	var j iperfJSON
	if jerr := json.Unmarshal(stdout.Bytes(), &j); jerr != nil {
		return Result{}, fmt.Errorf("iperf3 client: %v (output: %v)\n%s\n%s", err, jerr, trim(stdout.String()), stderr.String())
	}
	if j.Error != "" || err != nil {
		return Result{}, fmt.Errorf("iperf3 client: %v %s\n%s\nserver:\n%s", err, j.Error, stderr.String(), srv.out.String())
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	r := Result{CPUSelf: cpu, CPUChildren: childCPU(cli.ProcessState) + srvCPU, Wall: wall,
		CC: j.End.SenderCC, Retransmits: j.End.SumSent.Retransmits}
	if s := j.End.SumReceived.Seconds; s > 0 {
		r.GoodputBps = float64(units.Throughput(j.End.SumReceived.Bytes, s))
	}
	return r, nil
}

func trim(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}

// processCPU is this process's CPU time so far, user and system, in
// seconds.
func processCPU() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

func tv(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// childCPU is a waited-for child's CPU time, user and system, in seconds.
func childCPU(ps *os.ProcessState) float64 {
	if ps == nil {
		return 0
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6 + float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
}

// freePort returns a TCP port free on 127.0.0.1 now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
