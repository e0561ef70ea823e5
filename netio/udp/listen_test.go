//go:build linux

package udp

import (
	"errors"
	"net"
	"testing"
)

// Options.ListenUDP opens the socket: the Conn uses exactly the socket it
// returned, and its error reaches the caller.
func TestListenUDPHook(t *testing.T) {
	var calls int
	var opened *net.UDPConn
	var gotNetwork string
	hook := func(network string, laddr *net.UDPAddr) (*net.UDPConn, error) {
		calls++
		gotNetwork = network
		c, err := net.ListenUDP(network, laddr)
		opened = c
		return c, err
	}
	c := open(t, loop4, Options{ListenUDP: hook})
	if calls != 1 || gotNetwork != "udp4" {
		t.Fatalf("hook called %d times with %q, want once with udp4", calls, gotNetwork)
	}
	if c.udp != opened || c.LocalAddr().Port() != uint16(opened.LocalAddr().(*net.UDPAddr).Port) {
		t.Fatalf("Conn does not use the hook's socket")
	}
	refused := errors.New("refused by hook")
	_, err := Listen(loop4, Options{ListenUDP: func(string, *net.UDPAddr) (*net.UDPConn, error) { return nil, refused }})
	if !errors.Is(err, refused) {
		t.Fatalf("Listen error %v, want the hook's", err)
	}
}
