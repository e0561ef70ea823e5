//go:build linux

package tunemu

import "net"

// UDPListener returns a net.ListenUDP that opens its sockets inside site s's
// namespace (each call runs on a fresh thread there, as Do does). It is for
// code that opens UDP sockets on demand on goroutines of its own: an mrgw
// tunnel's endpoint takes it as udp.Options.ListenUDP and then opens every
// path socket in the namespace, so that its datagrams cross the emulated
// link like any kernel flow's. Calls after Close fail (the namespace is
// gone).
func (e *Emulator) UDPListener(s Site) func(network string, laddr *net.UDPAddr) (*net.UDPConn, error) {
	return func(network string, laddr *net.UDPAddr) (*net.UDPConn, error) {
		var c *net.UDPConn
		err := e.Do(s, func() (err error) {
			c, err = net.ListenUDP(network, laddr)
			return err
		})
		return c, err
	}
}
