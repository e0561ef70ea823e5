//go:build linux

package relaycost

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/loadtest/datapath"
)

// gatewayEnv (not MRGW_: the configuration refuses unknown MRGW_
// variables) marks a re-exec of this test binary as one gateway process
// (RunGateway), so that the test needs no binary built beside it.
const gatewayEnv = "RELAYCOST_TEST_GATEWAY"

func TestMain(m *testing.M) {
	if os.Getenv(gatewayEnv) == "1" {
		var cfg string
		for i, a := range os.Args {
			if a == "--config" && i+1 < len(os.Args) {
				cfg = os.Args[i+1]
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := RunGateway(ctx, cfg, os.Stderr)
		stop()
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRelayCostRow is the load test in small: the floor and the tunnel
// alone, then one relay row through two gateway processes (this binary,
// re-executed), with a CPU profile of each. It checks that the row is
// produced and consistent, not how fast anything ran.
func TestRelayCostRow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two gateway processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prof := t.TempDir()
	res, err := Run(ctx, Options{
		Gateway: []string{os.Args[0]}, GatewayEnv: []string{gatewayEnv + "=1"},
		Duration: time.Second, Warmup: 500 * time.Millisecond, FloorDuration: 300 * time.Millisecond,
		Procs: []int{1}, Flows: 1, Window: 2, MessageBytes: 256 << 10,
		ProfileDir: prof, Dir: t.TempDir(),
		Datapath: func(ctx context.Context, mtu int, d time.Duration) ([]report.Row, float64, error) {
			rows, err := datapath.Run(ctx, datapath.Options{Duration: d, MTUs: []int{mtu}, Loopback: true,
				Systems: []string{datapath.SysRawUDP, datapath.SysFloor, datapath.SysMRGW}})
			var out []report.Row
			var floor float64
			for _, r := range rows {
				if r.CPUPerGbps > 0 {
					out = append(out, r)
				}
				if r.System == datapath.SysFloor {
					floor = r.CPUPerGbps
				}
			}
			return out, floor, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 {
		t.Fatalf("%d relay rows, want 1", len(res.Rows))
	}
	if res.FloorCPUPerGbps <= 0 || len(res.Datapath) != 3 {
		t.Fatalf("datapath rows %+v, floor %v", res.Datapath, res.FloorCPUPerGbps)
	}
	r := res.Rows[0]
	t.Logf("%+v", r)
	if r.GOMAXPROCS != 1 || r.GoodputBps <= 0 || r.HostsCores <= 0 {
		t.Errorf("row %+v", r)
	}
	for _, g := range []GatewayCost{r.Send, r.Recv} {
		if g.Cores <= 0 || g.CPUPerGbps <= 0 || g.XFloor <= 0 || g.KernelShare < 0 || g.KernelShare > 1 {
			t.Errorf("gateway cost %+v", g)
		}
		if abs(g.CPUPerGbps-g.Cores/(r.GoodputBps/1e9)) > 1e-9*g.CPUPerGbps {
			t.Errorf("cores per Gbit/s %v is not cores %v over %v Gbit/s", g.CPUPerGbps, g.Cores, r.GoodputBps/1e9)
		}
		if st, err := os.Stat(g.Profile); err != nil || st.Size() == 0 || filepath.Dir(g.Profile) != prof {
			t.Errorf("profile %q: %v", g.Profile, err)
		}
	}
	if r.LoadStart < 0 || r.LoadEnd < 0 {
		t.Errorf("load average %v → %v", r.LoadStart, r.LoadEnd)
	}
	if r.RecvDrops == nil || !strings.Contains(r.Note, "receiving gateway: WAN drops ") || !strings.Contains(r.Note, "sending gateway: datagrams the kernel refused ") {
		t.Errorf("the gateways' counters were not read from their /metrics: drops %v, note %q", r.RecvDrops, r.Note)
	}
}

// The drops note lists reasons in order, and says none for none.
func TestDropsNote(t *testing.T) {
	if got := dropsNote(map[string]uint64{"queue": 3, "buffer": 12}); got != "buffer 12, queue 3" {
		t.Errorf("dropsNote = %q", got)
	}
	if got := dropsNote(map[string]uint64{}); got != "none" {
		t.Errorf("dropsNote of none = %q", got)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestParseStat reads utime and stime past a command name that holds
// spaces and parentheses.
func TestParseStat(t *testing.T) {
	line := "4242 (my (odd) gw) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 9 0 100 0 0"
	c, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if c.user != 2500*time.Millisecond || c.sys != 750*time.Millisecond {
		t.Errorf("user %v sys %v, want 2.5s and 750ms", c.user, c.sys)
	}
	for _, bad := range []string{"", "4242 no name", "1 (x) S 1 2"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
	own, err := procCPU(os.Getpid())
	if err != nil || own.total() < 0 {
		t.Errorf("own /proc stat: %v %v", own, err)
	}
}

// TestWANMTU: the relay's wan.mtu is the tunnel's payload in
// loadtest/datapath at the same link MTU.
func TestWANMTU(t *testing.T) {
	for _, mtu := range []int{1400, 9000} {
		if got, want := WANMTU(mtu), datapath.PayloadMTU(mtu, true, 2); got != want {
			t.Errorf("WANMTU(%d) = %d, want %d", mtu, got, want)
		}
	}
}
