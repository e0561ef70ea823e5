//go:build linux

package tunemu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// CPU share on a shared machine. The kernel's autogroup scheduler splits
// the CPUs evenly between sessions first, whatever the nice values of
// their threads: with seven busy sessions on two cores this process got
// about 0.3 of a core for the emulator, the kernel TCP endpoints and their
// stacks together, and the emulator released packets p99 40–650 ms late
// (docs/results/peers.md). Nice on the emulator's own threads changes
// nothing against other sessions; the session's autogroup nice does.

const autogroupPath = "/proc/self/autogroup"

var prio struct {
	sync.Mutex
	users int
	saved int
}

// Prioritize sets this process's autogroup (its session's CPU share
// against other sessions) to nice, -20..19, until the returned restore is
// called; nested calls share the first one's saved value, and the last
// restore puts it back. It needs root to go below 0. It changes the share
// of every process of the session (a shell's children too), so it is for
// measurements that must not starve, on request, not a default.
func Prioritize(nice int) (restore func(), err error) {
	if nice < -20 || nice > 19 {
		return nil, fmt.Errorf("tunemu: nice %d outside [-20, 19]", nice)
	}
	prio.Lock()
	defer prio.Unlock()
	if prio.users == 0 {
		cur, err := readAutogroupNice()
		if err != nil {
			return nil, err
		}
		prio.saved = cur
	}
	if err := os.WriteFile(autogroupPath, []byte(strconv.Itoa(nice)), 0o644); err != nil {
		return nil, fmt.Errorf("tunemu: set autogroup nice %d: %w", nice, err)
	}
	prio.users++
	var once sync.Once
	return func() {
		once.Do(func() {
			prio.Lock()
			defer prio.Unlock()
			if prio.users--; prio.users == 0 {
				_ = os.WriteFile(autogroupPath, []byte(strconv.Itoa(prio.saved)), 0o644)
			}
		})
	}, nil
}

// readAutogroupNice reads "/autogroup-N nice V".
func readAutogroupNice() (int, error) {
	b, err := os.ReadFile(autogroupPath)
	if err != nil {
		return 0, fmt.Errorf("tunemu: autogroup: %w", err)
	}
	return parseAutogroupNice(string(b))
}

func parseAutogroupNice(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) != 3 || f[1] != "nice" {
		return 0, fmt.Errorf("tunemu: autogroup: unexpected %q", s)
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < -20 || n > 19 {
		return 0, fmt.Errorf("tunemu: autogroup: unexpected %q", s)
	}
	return n, nil
}
