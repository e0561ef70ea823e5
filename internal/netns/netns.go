package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Dir is where `ip netns add` pins named namespaces.
const Dir = "/run/netns"

// ipTimeout bounds one ip invocation: a wedged netlink call must fail the
// run with the command named, not hang it.
const ipTimeout = 10 * time.Second

// Path is the file of the named namespace, for Do.
func Path(name string) string { return filepath.Join(Dir, name) }

// IP runs `ip args...` with a time limit. The error names the command and
// carries ip's own output, which is where the reason is.
func IP(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// CleanStale deletes the namespaces in Dir named prefix + site + "-" + pid
// + "-" + n whose creating process is gone (a run killed before its Close).
// Errors are ignored: a namespace that cannot be deleted now is tried again
// by the next run.
func CleanStale(prefix string) {
	ents, err := os.ReadDir(Dir)
	if err != nil {
		return
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	for _, name := range Stale(prefix, names, alive) {
		_ = IP("netns", "del", name)
	}
}

// Stale returns the names among names that CleanStale deletes: those of the
// form prefix + site + "-" + pid + "-" + n whose pid is neither this
// process (its own live namespaces: their Close deletes them) nor one that
// isAlive says still runs. Names of any other form are never stale.
func Stale(prefix string, names []string, isAlive func(pid int) bool) []string {
	var out []string
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(name, prefix), "-")
		if len(parts) != 3 {
			continue
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if isAlive(pid) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// alive reports whether process pid exists (in this PID namespace).
func alive(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return err == nil
}
