package main

import (
	"os/exec"
	"strings"
	"testing"
)

// labOnly are import paths (or path fragments) the daemon must not link: the
// lab's transports, codecs, plotting and fonts, and the lab's own packages.
// A CVE scanner covers whatever an edge host's binary links; these belong
// to cmd/mrgw-lab.
var labOnly = []string{
	"github.com/xtaci/kcp-go",
	"github.com/tjfoc/gmsm",
	"github.com/klauspost/reedsolomon",
	"gonum.org/",
	"go-fonts",
	"golang.org/x/image/font",
	"github.com/golang/freetype",
	"github.com/schollz/progressbar",
	"github.com/pion/",
	"golang.zx2c4.com/", // wireguard-go: the datapath load test's comparison
	"github.com/mrgw/mrgw/loadtest",
	"github.com/mrgw/mrgw/sim",
	"github.com/mrgw/mrgw/conformance",
	"github.com/mrgw/mrgw/netem",
	"github.com/mrgw/mrgw/internal/plot",
	"github.com/mrgw/mrgw/internal/report",
}

// TestDaemonLinksNoLabCode lists every package the daemon binary links and
// fails on any lab dependency.
func TestDaemonLinksNoLabCode(t *testing.T) {
	if testing.Short() {
		t.Skip("go list in -short mode")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/mrgw/mrgw/cmd/mrgw").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps printed %d packages: %s", len(deps), out)
	}
	for _, d := range deps {
		for _, bad := range labOnly {
			if strings.Contains(d, bad) {
				t.Errorf("cmd/mrgw links %s (lab-only: %s)", d, bad)
			}
		}
	}
}
