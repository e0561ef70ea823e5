package control

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/quic-go/quic-go"
)

// One socket for the control channel: the listener's quic.Transport,
// bound to control.listen, also dials (Listener.Dial). So a multi-homed
// gateway's control connections leave from the address its peers know
// and allow (their ACLs, their control.peer addresses), not from a
// wildcard socket whose source the kernel's routing would choose.

// listenTransport binds addr and listens on it, guarded by g (guard.go):
// a Retry for every Initial without a token, a bound on handshakes in
// progress, quic-go's drops counted.
func listenTransport(addr string, tlsConf *tls.Config, qc *quic.Config, g *guard) (*quic.Transport, *quic.Listener, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, nil, err
	}
	uc, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, nil, err
	}
	tr := &quic.Transport{
		Conn:                uc,
		VerifySourceAddress: g.verifySourceAddress,
		ConnContext:         g.connContext,
		Tracer:              dropRecorder{g},
	}
	ql, err := tr.Listen(tlsConf, qc)
	if err != nil {
		tr.Close()
		uc.Close()
		return nil, nil, err
	}
	return tr, ql, nil
}

// dialQUIC dials addr through c.via, the listener's transport, or from a
// socket of its own when there is none.
func (c *Config) dialQUIC(ctx context.Context, addr string, tlsConf *tls.Config) (*quic.Conn, error) {
	if c.via == nil {
		return quic.DialAddr(ctx, addr, tlsConf, c.quicConfig(false))
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("control: resolve %s: %w", addr, err)
	}
	return c.via.Dial(ctx, ua, tlsConf, c.quicConfig(false))
}

// Dial is Dial (the package function) from the listener's socket: the
// connection's source address is the listener's (control.listen). The
// session outlives nothing: closing the listener ends it.
func (l *Listener) Dial(ctx context.Context, addr, peer string) (*Session, error) {
	c := *l.cfg
	c.via = l.tr
	log := c.Logger.With("peer", peer, "addr", addr)
	if !c.expected(peer) {
		return nil, fmt.Errorf("%w: refusing to dial %q: not in the expected peers", ErrUnknownPeer, peer)
	}
	return dial(ctx, addr, peer, &c, c.Credentials.ClientTLS(peer), log)
}
