package netem

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/mrgw/mrgw/internal/ecn"
)

// sockBufBytes is the kernel buffer asked for on every emulator socket.
// Bursts of thousands of datagrams arrive faster than one goroutine drains
// them on a 2-core machine; a small buffer would add invisible loss that is
// not the model's.
const sockBufBytes = 8 << 20

// sock is one of the emulator's UDP sockets: a stand-in for a real endpoint.
type sock struct {
	uc   *net.UDPConn
	pc   *ipv4.PacketConn
	addr netip.AddrPort
}

// listen opens a UDP socket on bind with an ephemeral port, large kernel
// buffers and TOS reporting (for ECN).
func listen(bind netip.Addr) (*sock, error) {
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(bind, 0)))
	if err != nil {
		return nil, fmt.Errorf("emu: listen: %w", err)
	}
	setBuffers(uc)
	if err := ecn.EnableReceive(uc); err != nil {
		uc.Close()
		return nil, fmt.Errorf("emu: %w", err)
	}
	return &sock{
		uc:   uc,
		pc:   ipv4.NewPacketConn(uc),
		addr: uc.LocalAddr().(*net.UDPAddr).AddrPort(),
	}, nil
}

// setBuffers raises the socket buffers, past rmem_max/wmem_max when the
// process may (root: SO_RCVBUFFORCE); failures leave the defaults, which
// only costs burst tolerance.
func setBuffers(uc *net.UDPConn) {
	_ = uc.SetReadBuffer(sockBufBytes)
	_ = uc.SetWriteBuffer(sockBufBytes)
	rc, err := uc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBufBytes)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBufBytes)
	})
}

// timer is a CLOCK_MONOTONIC timerfd read through the Go netpoller. Go's
// own timers wake about 1 ms late on Linux (the netpoller sleeps in whole
// milliseconds; measured here: a 100 µs time.Sleep takes ~1.1 ms), far too
// coarse for pacing datagrams microseconds apart. A timerfd becomes
// readable at its hrtimer deadline and wakes the poller at once (measured
// here: ~30-60 µs late at the median), and arming it is one syscall that any
// goroutine may make.
type timer struct {
	fd int
	f  *os.File
}

func newTimer() (*timer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("emu: timerfd_create: %w", err)
	}
	// A non-blocking fd given to os.NewFile is registered with the netpoller,
	// so Read parks the goroutine instead of a thread, and Close wakes it.
	return &timer{fd: fd, f: os.NewFile(uintptr(fd), "emu-timerfd")}, nil
}

// arm sets the timer to fire after d (at least 1 ns: 0 would disarm it).
func (t *timer) arm(d int64) {
	if d < 1 {
		d = 1
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d)}
	_ = unix.TimerfdSettime(t.fd, 0, &spec, nil)
}

// disarm stops the timer.
func (t *timer) disarm() {
	_ = unix.TimerfdSettime(t.fd, 0, &unix.ItimerSpec{}, nil)
}

// wait blocks until the timer fires or is closed (then it returns false).
func (t *timer) wait() bool {
	var b [8]byte
	_, err := t.f.Read(b[:])
	return err == nil
}

func (t *timer) close() error { return t.f.Close() }
