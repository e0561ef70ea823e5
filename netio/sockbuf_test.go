//go:build linux

package netio

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/mrgw/mrgw/netio/udp"
)

// grantedSocket reports smaller socket buffers than were asked, as the
// kernel grants where net.core.rmem_max caps them.
type grantedSocket struct {
	*udp.Conn
	read int
}

func (s grantedSocket) Stats() udp.Stats {
	st := s.Conn.Stats()
	st.ReadBuffer = s.read
	return st
}

// An endpoint whose listening socket was granted a smaller receive buffer
// than Config.UDP asked says so at warn, naming the sysctl; one granted
// what it asked says nothing.
func TestWarnsOnSmallSocketBuffers(t *testing.T) {
	const asked = 1 << 20
	for _, granted := range []int{asked / 4, asked} {
		var logs bytes.Buffer
		bind := func(local netip.AddrPort, o udp.Options) (Socket, error) {
			c, err := udp.Listen(local, o)
			if err != nil {
				return nil, err
			}
			return grantedSocket{c, granted}, nil
		}
		e, err := New(Config{Protocol: protoConfig(true), Listen: loop4, Bind: bind,
			UDP:    udp.Options{ReadBuffer: asked},
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
		warned := strings.Contains(logs.String(), "net.core.rmem_max")
		if warned != (granted < asked) {
			t.Errorf("granted %d of %d bytes: warned %v; log:\n%s", granted, asked, warned, logs.String())
		}
	}
}
