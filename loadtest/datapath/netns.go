//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/mrgw/mrgw/internal/netns"
)

// The link every system crosses: two network namespaces joined by a veth
// pair whose MTU is the link MTU being measured. Site A is 10.214.0.1,
// site B 10.214.0.2 (inside the namespaces only; nothing is added to the
// root namespace). Sockets are opened inside a namespace by a thread that
// joined it and is never given back to the runtime (as loadtest/tunemu
// does); without root, or without iproute2, the systems that can run on
// loopback do and wireguard-go is skipped with the reason.

// nsPrefix starts the name of every namespace this package creates:
// nsPrefix + site + "-" + pid + "-" + n.
const nsPrefix = "mrgw-dp-"

var (
	siteAddr = [2]netip.Addr{netip.MustParseAddr("10.214.0.1"), netip.MustParseAddr("10.214.0.2")}
	nsSeq    atomic.Uint64
)

// errNoNetns matches (errors.Is) every reason the namespaces cannot be made.
var errNoNetns = errors.New("datapath: network namespaces unavailable")

type nsUnavailable struct{ reason string }

func (e *nsUnavailable) Error() string        { return "network namespaces unavailable: " + e.reason }
func (e *nsUnavailable) Is(target error) bool { return target == errNoNetns }

// link is where the systems' two ends meet: two namespaces over a veth of
// the link MTU, or loopback (ns empty).
type link struct {
	mtu  int
	ns   [2]string
	addr [2]netip.Addr
}

// listenUDP returns a net.ListenUDP that opens its sockets in site s (for
// udp.Options.ListenUDP); nil on loopback.
func (l *link) listenUDP(s int) func(network string, laddr *net.UDPAddr) (*net.UDPConn, error) {
	if l.ns[s] == "" {
		return nil
	}
	return func(network string, laddr *net.UDPAddr) (*net.UDPConn, error) {
		var c *net.UDPConn
		err := l.do(s, func() (err error) {
			c, err = net.ListenUDP(network, laddr)
			return err
		})
		return c, err
	}
}

// do runs fn on a fresh OS thread inside site s's namespace (or on this
// goroutine on loopback).
func (l *link) do(s int, fn func() error) error {
	if l.ns[s] == "" {
		return fn()
	}
	return netns.Do(netns.Path(l.ns[s]), fn)
}

// loopback is the link without namespaces.
func loopback(mtu int) *link {
	lo := netip.MustParseAddr("127.0.0.1")
	return &link{mtu: mtu, addr: [2]netip.Addr{lo, lo}}
}

// ip runs `ip args...` with a time limit (internal/netns).
func ip(args ...string) error { return netns.IP(args...) }

// newLink creates the two namespaces joined by a veth pair of MTU mtu.
// Close deletes them (and every device and socket in them).
func newLink(mtu int) (l *link, err error) {
	if os.Geteuid() != 0 {
		return nil, &nsUnavailable{"needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, &nsUnavailable{"iproute2's ip is not installed"}
	}
	cleanStale()
	n := nsSeq.Add(1)
	l = &link{mtu: mtu, addr: siteAddr}
	for s, name := range []string{"a", "b"} {
		l.ns[s] = fmt.Sprintf("%s%s-%d-%d", nsPrefix, name, os.Getpid(), n)
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for _, ns := range l.ns {
		if err := ip("netns", "add", ns); err != nil {
			return nil, &nsUnavailable{err.Error()}
		}
		if err := ip("-n", ns, "link", "set", "lo", "up"); err != nil {
			return nil, err
		}
	}
	if err := ip("link", "add", "dp0", "netns", l.ns[0], "mtu", strconv.Itoa(mtu), "type", "veth",
		"peer", "name", "dp0", "netns", l.ns[1], "mtu", strconv.Itoa(mtu)); err != nil {
		return nil, err
	}
	for s, ns := range l.ns {
		if err := ip("-n", ns, "addr", "add", l.addr[s].String()+"/30", "dev", "dp0"); err != nil {
			return nil, err
		}
		if err := ip("-n", ns, "link", "set", "dp0", "up"); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Close deletes the namespaces.
func (l *link) Close() {
	for i, ns := range l.ns {
		if ns != "" {
			_ = ip("netns", "del", ns)
			l.ns[i] = ""
		}
	}
}

// cleanStale deletes namespaces of this package whose process is gone.
func cleanStale() { netns.CleanStale(nsPrefix) }

// rcvbufErrors returns the datagrams site s's kernel dropped because a
// UDP socket's receive buffer was full (RcvbufErrors of /proc/net/snmp, the
// namespace's own counters, read from a thread inside it); ok is false on
// loopback, where the counter would be the whole machine's.
func (l *link) rcvbufErrors(s int) (n uint64, ok bool) {
	if l.ns[s] == "" {
		return 0, false
	}
	err := l.do(s, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		var names []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != "Udp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i := 1; i < len(f) && i < len(names); i++ {
				if names[i] == "RcvbufErrors" {
					n, err = strconv.ParseUint(f[i], 10, 64)
					return err
				}
			}
		}
		return errors.New("no Udp RcvbufErrors in snmp")
	})
	return n, err == nil
}
