package deploy_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// gossipReadBuffer is the largest socket buffer a gateway asks for (its
// gossip socket's, region.udpRecvBuf); the LAN and WAN sockets ask 4 MiB.
const gossipReadBuffer = 8 << 20

// The sysctl file lets an unprivileged gateway have the socket buffers it
// asks for, and the Terraform host module installs and applies it before
// the gateway restarts.
func TestSysctlAllowsTheGatewaysBuffers(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("sysctl", "60-mrgw.conf"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("60-mrgw.conf:%d: not key = value: %q", n+1, line)
		}
		i, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			t.Fatalf("60-mrgw.conf:%d: %v", n+1, err)
		}
		got[strings.TrimSpace(k)] = i
	}
	for _, k := range []string{"net.core.rmem_max", "net.core.wmem_max"} {
		if got[k] < gossipReadBuffer {
			t.Errorf("%s = %d, want at least %d", k, got[k], gossipReadBuffer)
		}
	}
	tf, err := os.ReadFile(filepath.Join("terraform", "modules", "gateway-host", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	install := strings.Index(string(tf), "/etc/sysctl.d/60-mrgw.conf")
	apply := strings.Index(string(tf), "sysctl -q -p /etc/sysctl.d/60-mrgw.conf")
	restart := strings.Index(string(tf), "systemctl restart mrgw.service")
	if install < 0 || apply < install || restart < apply {
		t.Errorf("gateway-host does not install and apply 60-mrgw.conf before restarting mrgw (at %d, %d, %d)", install, apply, restart)
	}
}
