package netem

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/internal/ecn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds every wait in these tests. It is a failure deadline on
// a noisy shared machine, never a performance threshold.
const patience = 10 * time.Second

func start(t testing.TB, cfg Config) *Emulator {
	t.Helper()
	em, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := em.Close(); err != nil {
			t.Error(err)
		}
	})
	return em
}

// udpSock is a test endpoint: a loopback UDP socket that reports TOS.
func udpSock(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	setBuffers(c)
	if err := ecn.EnableReceive(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func addrOf(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

func expose(t testing.TB, em *Emulator, site Site, c *net.UDPConn) netip.AddrPort {
	t.Helper()
	a, err := em.Expose(site, addrOf(c))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func send(t testing.TB, c *net.UDPConn, to netip.AddrPort, payload []byte) {
	t.Helper()
	if _, err := c.WriteToUDPAddrPort(payload, to); err != nil {
		t.Fatal(err)
	}
}

// sendECN sends one datagram with the given ECN codepoint.
func sendECN(t testing.TB, c *net.UDPConn, to netip.AddrPort, payload []byte, cp ecn.Codepoint) {
	t.Helper()
	oob := ecn.AppendECN(nil, false, cp)
	if _, _, err := c.WriteMsgUDPAddrPort(payload, oob, to); err != nil {
		t.Fatal(err)
	}
}

type datagram struct {
	data []byte
	from netip.AddrPort
	ecn  ecn.Codepoint
	at   time.Time
}

// recv reads one datagram, failing the test after wait.
func recv(t testing.TB, c *net.UDPConn, wait time.Duration) datagram {
	t.Helper()
	d, err := tryRecv(c, wait)
	if err != nil {
		t.Fatalf("receive on %v: %v", c.LocalAddr(), err)
	}
	return d
}

func tryRecv(c *net.UDPConn, wait time.Duration) (datagram, error) {
	buf := make([]byte, 65536)
	oob := make([]byte, ecn.RecvSpace)
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return datagram{}, err
	}
	n, nn, _, from, err := c.ReadMsgUDPAddrPort(buf, oob)
	if err != nil {
		return datagram{}, err
	}
	at := time.Now()
	ctl, err := ecn.ParseControl(oob[:nn])
	if err != nil {
		return datagram{}, err
	}
	return datagram{data: buf[:n], from: netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), ecn: ctl.ECN, at: at}, nil
}

// collector drains a socket in the background until stopped.
type collector struct {
	mu   sync.Mutex
	got  []datagram
	stop chan struct{}
	done chan struct{}
}

func collect(c *net.UDPConn) *collector {
	k := &collector{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		for {
			select {
			case <-k.stop:
				return
			default:
			}
			d, err := tryRecv(c, 20*time.Millisecond)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if err != nil {
				return
			}
			k.mu.Lock()
			k.got = append(k.got, d)
			k.mu.Unlock()
		}
	}()
	return k
}

func (k *collector) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.got)
}

// close stops the collector and returns what it received.
func (k *collector) close() []datagram {
	close(k.stop)
	<-k.done
	return k.got
}

// waitFor polls cond until it holds or patience runs out.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func seqPayload(seq uint32, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, seq)
	for i := 4; i < size; i++ {
		b[i] = byte(seq) ^ byte(i)
	}
	return b
}
