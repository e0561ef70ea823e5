//go:build linux

package netns

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestStale: only names of the caller's form, whose process is gone and is
// not this one, are deleted; a live run's, a malformed and another
// caller's namespace are left alone.
func TestStale(t *testing.T) {
	me := os.Getpid()
	dead := map[int]bool{4242: true, 7: true}
	isAlive := func(pid int) bool { return !dead[pid] }
	names := []string{
		"mrgw-dp-a-4242-1",                        // dead: stale
		"mrgw-dp-b-4242-1",                        // dead: stale
		"mrgw-dp-a-7-12",                          // dead: stale
		"mrgw-dp-a-" + strconv.Itoa(me) + "-1",    // ours, live
		"mrgw-dp-a-1-1",                           // alive
		"mrgw-lt-a-4242-1",                        // another caller's prefix
		"mrgw-dp-a-4242",                          // too few parts
		"mrgw-dp-a-4242-1-x",                      // too many parts
		"mrgw-dp-a-x-1",                           // pid not a number
		"mrgw-dp-a-0-1",                           // pid not positive
		"mrgw-dp-a--4242-1",                       // negative pid: the split sees an empty pid
		"other",                                   // not ours at all
		"xmrgw-dp-a-4242-1",                       // prefix not at the start
		"mrgw-dp-a-" + strconv.Itoa(me) + "-1000", // ours, live, later n
	}
	got := Stale("mrgw-dp-", names, isAlive)
	want := []string{"mrgw-dp-a-4242-1", "mrgw-dp-b-4242-1", "mrgw-dp-a-7-12"}
	if !slices.Equal(got, want) {
		t.Fatalf("Stale = %q, want %q", got, want)
	}
	if got := Stale("mrgw-lt-", names, isAlive); !slices.Equal(got, []string{"mrgw-lt-a-4242-1"}) {
		t.Fatalf("Stale(mrgw-lt-) = %q, want only the mrgw-lt- name", got)
	}
}

// TestAlive: this process and pid 1 run; a pid above the kernel's pid_max
// never can.
func TestAlive(t *testing.T) {
	if !alive(os.Getpid()) || !alive(1) {
		t.Fatal("alive says this process or pid 1 is gone")
	}
	if alive(pidNeverUsed(t)) {
		t.Fatal("alive says a pid above pid_max runs")
	}
}

// pidNeverUsed returns a pid no process can have: one above pid_max.
func pidNeverUsed(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Skipf("no pid_max: %v", err)
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return max + 1
}

func needIP(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2's ip is not installed")
	}
}

// TestIPError: a failing ip names its arguments and carries ip's own
// message (the reason an operator needs).
func TestIPError(t *testing.T) {
	needIP(t)
	if err := IP("-V"); err != nil {
		t.Fatalf("ip -V: %v", err)
	}
	err := IP("no-such-object")
	if err == nil {
		t.Fatal("ip no-such-object succeeded")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "ip no-such-object: ") || !strings.Contains(msg, "no-such-object\" is unknown") {
		t.Fatalf("error %q: want the command and ip's own message", msg)
	}
}

// TestDoMissingNamespace: a namespace that is not there is an error naming
// it, and fn never runs.
func TestDoMissingNamespace(t *testing.T) {
	ran := false
	err := Do(Path("mrgw-nstest-missing-1-1"), func() error { ran = true; return nil })
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "mrgw-nstest-missing-1-1") {
		t.Fatalf("Do on a missing namespace: %v, want a not-exist error naming it", err)
	}
	if ran {
		t.Fatal("fn ran although the namespace could not be joined")
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) to create network namespaces; CI runs as root")
	}
	needIP(t)
}

// addNS creates a named namespace that the test deletes when done.
func addNS(t *testing.T, name string) {
	t.Helper()
	if err := IP("netns", "add", name); err != nil {
		t.Skipf("cannot create a namespace here: %v", err)
	}
	t.Cleanup(func() { _ = IP("netns", "del", name) })
}

// nsIno is the inode of a network namespace file: equal inodes, same
// namespace.
func nsIno(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestDoJoinsNamespace: fn runs inside the named namespace (its thread's
// namespace is that file's), and the caller's thread stays where it was.
func TestDoJoinsNamespace(t *testing.T) {
	needRoot(t)
	name := "mrgw-nstest-a-" + strconv.Itoa(os.Getpid()) + "-1"
	addNS(t, name)
	want := nsIno(t, Path(name))
	root := nsIno(t, "/proc/self/ns/net")
	if want == root {
		t.Fatal("the new namespace is the root namespace")
	}
	var in uint64
	if err := Do(Path(name), func() error {
		in = nsIno(t, "/proc/thread-self/ns/net")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if in != want {
		t.Fatalf("fn ran in namespace inode %d, want %d (root %d)", in, want, root)
	}
	if errFn := errors.New("fn failed"); !errors.Is(Do(Path(name), func() error { return errFn }), errFn) {
		t.Fatal("Do does not return fn's error")
	}
}

// TestCleanStale: a namespace of a process that cannot exist is deleted;
// this process's own and another prefix's are kept.
func TestCleanStale(t *testing.T) {
	needRoot(t)
	prefix := "mrgw-nstest-" + strconv.Itoa(os.Getpid()) + "x-"
	stale := prefix + "a-" + strconv.Itoa(pidNeverUsed(t)) + "-1"
	own := prefix + "a-" + strconv.Itoa(os.Getpid()) + "-1"
	other := "mrgw-nstest-other-" + strconv.Itoa(os.Getpid()) + "-a-" + strconv.Itoa(pidNeverUsed(t)) + "-1"
	for _, n := range []string{stale, own, other} {
		addNS(t, n)
	}
	CleanStale(prefix)
	if _, err := os.Stat(Path(stale)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale namespace %s is still there (%v)", stale, err)
	}
	for _, n := range []string{own, other} {
		if _, err := os.Stat(Path(n)); err != nil {
			t.Errorf("namespace %s was deleted: %v", n, err)
		}
	}
}
