package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPeersPlotFlags: --plot-format is checked before anything runs, and
// a short real loss-sweep run of mrgw alone (the UDP relay emulator, no
// root needed) writes the documented plots into --plot-dir.
func TestPeersPlotFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plots")
	if _, _, err := run(t, "loadtest", "loss-sweep", "--plot-dir", dir, "--plot-format", "gif"); err == nil || !strings.Contains(err.Error(), "gif") {
		t.Fatalf("--plot-format gif: err = %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("plot dir created by a refused run: %v", err)
	}
	out, errOut, err := run(t, "loadtest", "loss-sweep", "--quick", "--quiet", "--systems", "mrgw", "--rtt", "20ms", "--loss", "0",
		"--extra-cc", "none", "--plot-dir", dir, "--plot-format", "png")
	if err != nil {
		t.Fatalf("loss-sweep: %v\n%s\n%s", err, out, errOut)
	}
	for _, name := range []string{
		"peers-loss-sweep-fraction-rtt-20ms.png",
		"peers-loss-sweep-00-1_plane_rtt_20ms_loss_0-goodput.png",
		"peers-loss-sweep-00-1_plane_rtt_20ms_loss_0-mrgw-path-rtt.png",
		"peers-loss-sweep-00-1_plane_rtt_20ms_loss_0-mrgw-path-cwnd.png",
	} {
		f := filepath.Join(dir, name)
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("%s missing or empty (%v); stderr:\n%s", name, err, errOut)
		}
		if !strings.Contains(errOut, "plot: "+f) {
			t.Errorf("stderr does not list %s", f)
		}
	}
}
