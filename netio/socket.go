//go:build linux

package netio

import (
	"net/netip"

	"github.com/mrgw/mrgw/netio/udp"
)

// Socket is what the Endpoint needs of a UDP socket, in the spirit of
// wireguard-go's conn.Bind: batched reads and writes of datagrams with
// their ECN codepoints (udp.Message; segmentation offload, where there is
// any, stays inside the socket), its address and its counters.
// *udp.Conn is the real one; netio/netiotest has an in-memory one, so that
// the driver's logic can be tested without the kernel.
//
// The Endpoint calls ReadBatchBorrow from one reader goroutine per socket
// and WriteBatch from one sender goroutine per socket, concurrently with
// each other and with Close.
type Socket interface {
	// ReadBatchBorrow blocks until at least one datagram is available and
	// fills msgs[:n]: Buf[:N] the datagram, Addr its source, ECN its
	// codepoint. It may leave a datagram in the socket's own memory and
	// point Buf at it, valid until the next read (see
	// udp.Conn.ReadBatchBorrow). Once the socket is closed it returns an
	// error that wraps net.ErrClosed.
	ReadBatchBorrow(msgs []udp.Message) (int, error)
	// WriteBatch sends msgs (Buf[:N] to Addr, with codepoint ECN, NotECT
	// meaning the socket's default) in order and returns how many were
	// sent.
	WriteBatch(msgs []udp.Message) (int, error)
	// LocalAddr is the bound address (with the port chosen for port 0).
	LocalAddr() netip.AddrPort
	// Stats are the socket's counters (the Endpoint reports GSO and GRO).
	Stats() udp.Stats
	Close() error
}

// Bind opens a Socket on local (port 0: an ephemeral port, a fresh path
// entropy) with the Endpoint's Config.UDP.
type Bind func(local netip.AddrPort, o udp.Options) (Socket, error)

// BindUDP opens real UDP sockets (udp.Listen); it is the default Bind.
func BindUDP(local netip.AddrPort, o udp.Options) (Socket, error) {
	c, err := udp.Listen(local, o)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return c, nil
}

// BindOf adapts a function that opens sockets of a concrete type (such as
// netiotest.Network.Listen) to a Bind.
func BindOf[S Socket](listen func(local netip.AddrPort, o udp.Options) (S, error)) Bind {
	return func(local netip.AddrPort, o udp.Options) (Socket, error) {
		s, err := listen(local, o)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

var _ Socket = (*udp.Conn)(nil)

// warnSmallBuffers logs, once per endpoint, listening sockets whose
// buffers the kernel granted below Config.UDP's: such a socket drops a
// burst from many peers at once, which they read as dead paths. Sockets
// that do not say what they were granted (0) are not judged.
func (e *Endpoint) warnSmallBuffers() {
	want := e.cfg.UDP
	for _, s := range e.listens {
		st := s.c.Stats()
		if (st.ReadBuffer > 0 && st.ReadBuffer < want.ReadBuffer) || (st.WriteBuffer > 0 && st.WriteBuffer < want.WriteBuffer) {
			e.log.Warn("netio: socket buffers smaller than asked: raise net.core.rmem_max and wmem_max, or run with CAP_NET_ADMIN",
				"local", s.c.LocalAddr(), "receive", st.ReadBuffer, "receive_asked", want.ReadBuffer,
				"send", st.WriteBuffer, "send_asked", want.WriteBuffer)
			return
		}
	}
}
