//go:build linux

package tunemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/netns"
)

// ErrUnavailable is matched (errors.Is) by every error saying that the TUN
// emulator cannot run on this machine or with these privileges.
var ErrUnavailable = errors.New("tunemu: unavailable")

// UnavailableError says why the emulator cannot run.
type UnavailableError struct {
	Reason string
	Err    error
}

func (e *UnavailableError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("tunemu unavailable: %s: %v", e.Reason, e.Err)
	}
	return "tunemu unavailable: " + e.Reason
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

func (e *UnavailableError) Unwrap() error { return e.Err }

func unavailable(reason string, err error) error { return &UnavailableError{Reason: reason, Err: err} }

// Prefix starts the name of every namespace this package creates.
const Prefix = "mrgw-lt-"

const netnsDir = netns.Dir

// Check reports whether the emulator can run here (root, /dev/net/tun,
// iproute2), without creating anything. The error matches ErrUnavailable.
func Check() error {
	if os.Geteuid() != 0 {
		return unavailable("needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) to create network namespaces and TUN devices", nil)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return unavailable("no /dev/net/tun", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return unavailable("iproute2's `ip` is not installed (apt-get install iproute2)", err)
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return unavailable("the kernel has no network namespaces", err)
	}
	return nil
}

// ipCmd runs `ip args...` with a time limit (internal/netns).
func ipCmd(args ...string) error { return netns.IP(args...) }

// cleanStale deletes namespaces with our prefix whose creating process is
// gone. Names are Prefix + site + "-" + pid + "-" + n.
func cleanStale() { netns.CleanStale(Prefix) }

// inNS runs fn on a fresh OS thread that has joined the network namespace
// at nsPath (internal/netns.Do).
func inNS(nsPath string, fn func() error) error { return netns.Do(nsPath, fn) }

// writeSysctl writes a /proc/sys file; run it inside inNS so that the
// per-namespace net.* settings of that namespace are the ones changed.
func writeSysctl(key, val string) error {
	p := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	return os.WriteFile(p, []byte(val), 0o644)
}

// openTUN creates a TUN device (no packet information header) in the
// calling thread's network namespace and returns it as a non-blocking
// file served by the netpoller.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, unavailable("open /dev/net/tun", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, unavailable("TUNSETIFF", err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

// Do runs fn on an OS thread inside site s's namespace (see the package
// documentation): sockets fn creates belong to that namespace.
func (e *Emulator) Do(s Site, fn func() error) error {
	return inNS(e.nsPath(s), fn)
}

// Listen is net.Listen inside site s's namespace.
func (e *Emulator) Listen(s Site, network, address string) (net.Listener, error) {
	var l net.Listener
	err := e.Do(s, func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// ListenUDP is net.ListenUDP inside site s's namespace.
func (e *Emulator) ListenUDP(s Site, laddr *net.UDPAddr) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := e.Do(s, func() (err error) {
		c, err = net.ListenUDP("udp4", laddr)
		return err
	})
	return c, err
}

// Dial dials from site s's namespace with d (its Control hook may set
// socket options, such as TCP_CONGESTION, before connect).
func (e *Emulator) Dial(ctx context.Context, s Site, d *net.Dialer, network, address string) (net.Conn, error) {
	var c net.Conn
	err := e.Do(s, func() (err error) {
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Command returns a command that runs name with args inside site s's
// namespace (`ip netns exec`), for code that opens sockets on goroutines
// of its own.
func (e *Emulator) Command(ctx context.Context, s Site, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", e.Namespace(s), name}, args...)...)
}
