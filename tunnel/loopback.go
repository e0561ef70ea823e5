package tunnel

import (
	"context"
	"time"

	"github.com/mrgw/mrgw/tunnel/control"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// SessionPair is two peer gateways' control sessions, established over
// loopback with a throwaway CA: what demos, tests and load tests need before
// they build tunnels. A is the dialer, B the listener; each Router is the
// one its session reports key events to (pass it in the tunnel's Config).
type SessionPair struct {
	A, B         *control.Session
	RouterA      *Router
	RouterB      *Router
	NameA, NameB string
	stops        []func()
}

// Close ends both sessions and the listener.
func (p *SessionPair) Close() {
	for i := len(p.stops) - 1; i >= 0; i-- {
		p.stops[i]()
	}
	p.stops = nil
}

// LoopbackSessions mints a development CA and a certificate for nameA and
// nameB, and runs the mutual-TLS control handshake between them on
// 127.0.0.1. It never touches any other address.
func LoopbackSessions(ctx context.Context, nameA, nameB string) (p *SessionPair, err error) {
	p = &SessionPair{NameA: nameA, NameB: nameB, RouterA: NewRouter(), RouterB: NewRouter()}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	now := time.Now().Add(-time.Hour)
	ca, err := pki.NewCA("mrgw loopback CA", now, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	idA, err := ca.Issue(nameA, now, 12*time.Hour)
	if err != nil {
		return nil, err
	}
	idB, err := ca.Issue(nameB, now, 12*time.Hour)
	if err != nil {
		return nil, err
	}
	l, err := control.Listen(ctx, "127.0.0.1:0", control.Config{Credentials: ca.Credentials(idB),
		Local: control.LocalInfo{Name: nameB}, ExpectedPeers: []string{nameA}, OnEvent: p.RouterB.OnEvent})
	if err != nil {
		return nil, err
	}
	p.stops = append(p.stops, func() { l.Close() })
	type res struct {
		s   *control.Session
		err error
	}
	acc := make(chan res, 1)
	go func() {
		s, err := l.Accept(ctx)
		acc <- res{s, err}
	}()
	sa, err := control.Dial(ctx, l.Addr().String(), nameB, control.Config{Credentials: ca.Credentials(idA),
		Local: control.LocalInfo{Name: nameA}, ExpectedPeers: []string{nameB}, OnEvent: p.RouterA.OnEvent})
	if err != nil {
		<-acc
		return nil, err
	}
	p.A = sa
	p.stops = append(p.stops, func() { sa.Close() })
	r := <-acc
	if r.err != nil {
		return nil, r.err
	}
	p.B = r.s
	p.stops = append(p.stops, func() { r.s.Close() })
	return p, nil
}
