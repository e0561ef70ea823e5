package control

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/mrgw/mrgw/tunnel/control/wire"
	"github.com/mrgw/mrgw/tunnel/pki"
)

func (c *Config) quicConfig(listener bool) *quic.Config {
	q := &quic.Config{
		HandshakeIdleTimeout: c.HandshakeTimeout,
		MaxIdleTimeout:       c.idleTimeout(),
		// Exactly one stream, opened by the dialer: the listener accepts
		// one, the dialer none; no unidirectional streams at all.
		MaxIncomingStreams:    -1,
		MaxIncomingUniStreams: -1,
	}
	if listener {
		q.MaxIncomingStreams = 1
		// A handshake in progress holds one of MaxHandshakes slots
		// (guard.go): a silent peer gives it back sooner.
		q.HandshakeIdleTimeout = min(c.HandshakeTimeout, listenerHandshakeIdle)
	}
	return q
}

func (c *Config) hello() wire.Hello {
	return wire.Hello{
		Version: wire.ProtocolVersion, Name: c.Local.Name, Region: c.Local.Region,
		Capabilities: c.Local.Capabilities, Planes: c.Local.Planes, NumPaths: c.Local.NumPaths,
	}
}

// verifyPeer checks the peer's certificate after the QUIC handshake: it must
// chain to our CA (for the role it plays) and certify a name we expect.
func (c *Config) verifyPeer(conn *quic.Conn, usage x509.ExtKeyUsage) (pki.PeerIdentity, error) {
	chain := conn.ConnectionState().TLS.PeerCertificates
	id, err := pki.VerifyPeer(chain, c.Credentials.Pool, usage, c.Now())
	if err != nil {
		return pki.PeerIdentity{}, fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	if c.AcceptPeer != nil {
		if err := c.AcceptPeer(id); err != nil {
			if !errors.Is(err, ErrUnknownPeer) {
				err = fmt.Errorf("%w: %w", ErrUnknownPeer, err)
			}
			return id, err
		}
		return id, nil
	}
	if !c.expected(id.Name) {
		return id, fmt.Errorf("%w: %q is not in the expected peers %v", ErrUnknownPeer, id.Name, c.ExpectedPeers)
	}
	return id, nil
}

// checkHello validates the peer's Hello against its certificate: the same
// name, and the same region when the certificate names one.
func checkHello(h wire.Hello, cert pki.PeerIdentity, addr net.Addr) (PeerInfo, error) {
	if h.Version != wire.ProtocolVersion {
		return PeerInfo{}, fmt.Errorf("%w: peer speaks %d, we speak %d", ErrVersionMismatch, h.Version, wire.ProtocolVersion)
	}
	if h.Name != cert.Name {
		return PeerInfo{}, fmt.Errorf("%w: Hello names %q but the certificate is %q", ErrUnknownPeer, h.Name, cert.Name)
	}
	if cert.Region != "" && h.Region != cert.Region {
		return PeerInfo{}, fmt.Errorf("%w: Hello says region %q but the certificate is %s", ErrIdentityMismatch, h.Region, pki.IdentityURI(cert.Region, cert.Name))
	}
	return PeerInfo{
		Version: h.Version, Name: h.Name, Region: h.Region, Capabilities: h.Capabilities,
		Planes: h.Planes, NumPaths: h.NumPaths, Addr: addr, Serial: cert.Serial,
	}, nil
}

// Dial connects to the gateway called peer at addr (host:port, UDP), checks
// its certificate and name, and exchanges Hello. It returns only once the
// listener has accepted us: a listener that refuses our certificate or our
// name makes Dial fail with ErrBadCertificate or ErrUnknownPeer.
func Dial(ctx context.Context, addr, peer string, cfg Config) (*Session, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := c.Logger.With("peer", peer, "addr", addr)
	if !c.expected(peer) {
		return nil, fmt.Errorf("%w: refusing to dial %q: not in the expected peers", ErrUnknownPeer, peer)
	}
	return dial(ctx, addr, peer, c, c.Credentials.ClientTLS(peer), log)
}

// dial is Dial after validation; tests pass a TLS config Dial would never
// build (no client certificate) to check the listener refuses it.
func dial(ctx context.Context, addr, peer string, c *Config, tlsConf *tls.Config, log *slog.Logger) (*Session, error) {
	// A dial the caller called off (the gateway stopping) is not a
	// failure worth a warning: it logs at debug.
	parent := ctx
	warn := func(msg string, args ...any) {
		if parent.Err() != nil {
			log.Debug(msg, append(args, "cause", "dial cancelled")...)
			return
		}
		log.Warn(msg, args...)
	}
	ctx, cancel := context.WithTimeout(ctx, c.HandshakeTimeout)
	defer cancel()
	tlsConf, verdict := c.clientTLS(tlsConf, addr, peer)
	conn, err := c.dialQUIC(ctx, addr, tlsConf)
	if err != nil {
		if rerr := verdict(); rerr != nil {
			// We refused the listener's certificate inside TLS: logged
			// and reported by the hook already.
			return nil, fmt.Errorf("%w: %w", ErrRefusedLocally, rerr)
		}
		err = classify(err)
		warn("control: dial failed", "err", err)
		return nil, err
	}
	fail := func(err error) (*Session, error) {
		if refusedByPeer(err) && (errors.Is(err, ErrBadCertificate) || errors.Is(err, ErrUnknownPeer)) {
			// The listener's verdict on us can arrive at any step after
			// the handshake (TLS 1.3): it is the listener's refusal.
			c.Refusals.Warn("peer_refused_us", "control: peer refused us", "peer", peer, "addr", addr, "err", err)
			_ = conn.CloseWithError(CodeNoError, "")
			return nil, err
		}
		_ = conn.CloseWithError(codeFor(err), err.Error())
		if isRefusal(err) {
			c.refused("dialer", conn.RemoteAddr(), err)
			return nil, fmt.Errorf("%w: %w", ErrRefusedLocally, err)
		}
		warn("control: dial failed", "err", err)
		return nil, err
	}
	id, err := c.verifyPeer(conn, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return fail(err)
	}
	name := id.Name
	if name != peer {
		// crypto/tls checked ServerName already; this guards config drift.
		return fail(fmt.Errorf("%w: dialed %q but the certificate is %q", ErrUnknownPeer, peer, name))
	}
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fail(classify(err))
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = str.SetDeadline(dl)
	}
	b, err := wire.Append(nil, c.hello())
	if err == nil {
		_, err = str.Write(b)
	}
	if err != nil {
		return fail(classify(err))
	}
	// The listener's verdict on our certificate and name arrives here.
	m, err := wire.Read(str)
	if err != nil {
		err = classify(err)
		if errors.Is(err, ErrBadCertificate) || errors.Is(err, ErrUnknownPeer) {
			c.Refusals.Warn("peer_refused_us", "control: peer refused us", "peer", peer, "addr", addr, "err", err)
			_ = conn.CloseWithError(CodeNoError, "")
			return nil, err
		}
		return fail(err)
	}
	ack, ok := m.(wire.HelloAck)
	if !ok {
		return fail(fmt.Errorf("%w: got %v, want HelloAck", ErrProtocol, m.Type()))
	}
	info, err := checkHello(ack.Hello, id, conn.RemoteAddr())
	if err != nil {
		return fail(err)
	}
	_ = str.SetDeadline(time.Time{})
	s, err := newSession(conn, str, c, info, true, log)
	if err != nil {
		return fail(err)
	}
	log.Info("control: session established", "region", info.Region, "role", "dialer")
	return s, nil
}

// Listener accepts control sessions from peer gateways.
type Listener struct {
	ql     *quic.Listener
	tr     *quic.Transport // the socket: listens and dials (transport.go)
	cfg    *Config
	guard  *guard // what reaches the socket before a connection (guard.go)
	ready  chan *Session
	ctx    context.Context
	cancel context.CancelFunc
	stop   func() bool
	wg     sync.WaitGroup
	once   sync.Once
}

// Listen listens on addr (host:port, UDP). Peers are authenticated and
// greeted in the background; Accept returns only sessions that passed.
// The listener closes when ctx is done or Close is called.
func Listen(ctx context.Context, addr string, cfg Config) (*Listener, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := newGuard(c.Refusals, MaxHandshakes)
	tr, ql, err := listenTransport(addr, c.serverTLS(), c.quicConfig(true), g)
	if err != nil {
		return nil, fmt.Errorf("control: listen %s: %w", addr, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &Listener{ql: ql, tr: tr, cfg: c, guard: g, ready: make(chan *Session, acceptQueue), ctx: lctx, cancel: cancel}
	l.stop = context.AfterFunc(ctx, func() { l.Close() })
	l.wg.Add(1)
	go l.acceptLoop()
	c.Logger.Info("control: listening", "addr", ql.Addr().String(), "name", c.Local.Name)
	return l, nil
}

// Stats returns the listener's counters: packets dropped before a
// connection held state, by reason, and the handshakes in progress and
// timed out (guard.go). Safe for concurrent use.
func (l *Listener) Stats() ListenerStats { return l.guard.stats() }

// Draining tells the listener its gateway is shutting down: packets of the
// connections it is closing and of the dials it cancelled still arrive for
// a while, and are then counted but not warned about.
func (l *Listener) Draining() { l.guard.draining.Store(true) }

// SyscallConn is the listening socket's, for reading its kernel drop count.
func (l *Listener) SyscallConn() (syscall.RawConn, error) {
	return l.tr.Conn.(*net.UDPConn).SyscallConn()
}

// Addr returns the UDP address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ql.Addr() }

// Accept returns the next authenticated session.
func (l *Listener) Accept(ctx context.Context) (*Session, error) {
	select {
	case s := <-l.ready:
		return s, nil
	case <-l.ctx.Done():
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting, aborts handshakes in progress and closes sessions
// not yet returned by Accept, then closes the listener's socket, which
// ends every session still on it (accepted or dialled through Dial): close
// those first to say goodbye.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.stop()
		l.cancel()
		_ = l.ql.Close()
		l.wg.Wait()
		defer func() {
			// After the queued sessions: it ends every connection on it.
			// quic-go leaves a socket it did not create open: ours is
			// closed here, or control.listen stays bound.
			_ = l.tr.Close()
			_ = l.tr.Conn.Close()
		}()
		for {
			select {
			case s := <-l.ready:
				s.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	sem := make(chan struct{}, maxPendingHandshakes)
	for {
		conn, err := l.ql.Accept(l.ctx)
		if err != nil {
			return // listener closed
		}
		l.guard.accepted(conn)
		select {
		case sem <- struct{}{}:
		case <-l.ctx.Done():
			_ = conn.CloseWithError(CodeNoError, "listener closed")
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-sem }()
			s, err := l.handshake(conn)
			if err != nil {
				l.refuse(conn, err)
				return
			}
			select {
			case l.ready <- s:
			case <-l.ctx.Done():
				s.Close()
			}
		}()
	}
}

func (l *Listener) refuse(conn *quic.Conn, err error) {
	_ = conn.CloseWithError(codeFor(err), err.Error())
	l.cfg.refused("listener", conn.RemoteAddr(), err)
}

// isRefusal: err is a verdict on the peer (its certificate, name, version),
// not a network failure.
func isRefusal(err error) bool {
	return errors.Is(err, ErrBadCertificate) || errors.Is(err, ErrUnknownPeer) || errors.Is(err, ErrVersionMismatch)
}

// refused logs a refusal by this side (role: listener or dialer) at warn,
// at most one line per reason per second, and reports it to OnRefused.
func (c *Config) refused(role string, remote net.Addr, err error) {
	reason := RefusalReason(err)
	addr := ""
	if remote != nil {
		addr = remote.String()
	}
	c.Refusals.Warn(reason, "control: refused peer", "role", role, "remote", addr, "err", err)
	if c.OnRefused != nil {
		c.OnRefused(remote, err)
	}
}

// verifyChain is the check both sides run inside the TLS handshake
// (VerifyConnection): the peer's chain must lead to our CA, for the role
// it plays, and be valid now.
func (c *Config) verifyChain(cs tls.ConnectionState, usage x509.ExtKeyUsage) (string, error) {
	name, err := pki.PeerName(cs.PeerCertificates, c.Credentials.Pool, usage, c.Now())
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	return name, nil
}

// serverTLS is the listener's TLS configuration. crypto/tls, left to
// verify client certificates itself (RequireAndVerifyClientCert), refuses a
// missing, expired or foreign one inside the handshake, where quic-go never
// hands the connection to Accept: the refusal went unlogged and uncounted.
// So the certificate is requested but checked by our VerifyConnection,
// which refuses it just the same (a bad_certificate alert) and reports it
// with the dialer's address (quic-go fills ClientHelloInfo.Conn).
func (c *Config) serverTLS() *tls.Config {
	tmpl := c.Credentials.ServerTLS()
	tmpl.ClientAuth = tls.RequestClientCert
	tmpl.ClientCAs = nil
	verify := func(remote net.Addr) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			if _, err := c.verifyChain(cs, x509.ExtKeyUsageClientAuth); err != nil {
				c.refused("listener", remote, err)
				return err
			}
			return nil
		}
	}
	base := tmpl.Clone()
	base.VerifyConnection = verify(nil)
	base.GetConfigForClient = func(info *tls.ClientHelloInfo) (*tls.Config, error) {
		var remote net.Addr
		if info.Conn != nil {
			remote = info.Conn.RemoteAddr()
		}
		conf := tmpl.Clone()
		conf.VerifyConnection = verify(remote)
		return conf, nil
	}
	return base
}

// clientTLS makes the dialer's TLS configuration check the listener's
// certificate in our own VerifyConnection (chain, validity, the name
// dialed) instead of crypto/tls's, so that a refusal is logged and
// reported; verdict returns the refusal, if the hook made one.
func (c *Config) clientTLS(conf *tls.Config, addr, peer string) (*tls.Config, func() error) {
	conf = conf.Clone()
	var mu sync.Mutex
	var refusal error
	remote, _ := net.ResolveUDPAddr("udp", addr)
	// InsecureSkipVerify only turns crypto/tls's own chain check off:
	// VerifyConnection below runs on every handshake and refuses exactly
	// what it refused (and an expired certificate by name).
	conf.InsecureSkipVerify = true
	conf.VerifyConnection = func(cs tls.ConnectionState) error {
		name, err := c.verifyChain(cs, x509.ExtKeyUsageServerAuth)
		if err == nil && name != peer {
			err = fmt.Errorf("%w: %w: dialed %q but the certificate is %q", ErrBadCertificate, ErrUnknownPeer, peer, name)
		}
		if err != nil {
			mu.Lock()
			refusal = err
			mu.Unlock()
			c.refused("dialer", remote, err)
		}
		return err
	}
	return conf, func() error {
		mu.Lock()
		defer mu.Unlock()
		return refusal
	}
}

func (l *Listener) handshake(conn *quic.Conn) (*Session, error) {
	c := l.cfg
	id, err := c.verifyPeer(conn, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(l.ctx, c.HandshakeTimeout)
	defer cancel()
	str, err := conn.AcceptStream(ctx)
	if err != nil {
		return nil, classify(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = str.SetDeadline(dl)
	}
	m, err := wire.Read(str)
	if err != nil {
		return nil, classify(err)
	}
	h, ok := m.(wire.Hello)
	if !ok {
		return nil, fmt.Errorf("%w: got %v, want Hello", ErrProtocol, m.Type())
	}
	info, err := checkHello(h, id, conn.RemoteAddr())
	if err != nil {
		return nil, err
	}
	b, err := wire.Append(nil, wire.HelloAck{Hello: c.hello()})
	if err == nil {
		_, err = str.Write(b)
	}
	if err != nil {
		return nil, classify(err)
	}
	_ = str.SetDeadline(time.Time{})
	log := c.Logger.With("peer", id.Name, "addr", conn.RemoteAddr().String())
	s, err := newSession(conn, str, c, info, false, log)
	if err != nil {
		return nil, err
	}
	log.Info("control: session established", "region", info.Region, "role", "listener")
	return s, nil
}
