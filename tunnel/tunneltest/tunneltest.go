// Package tunneltest holds the test doubles of tunnel/: control sessions
// between two throwaway gateways on loopback, for tests, demos and load
// tests that need an authenticated peer before they build tunnels. It lives
// apart from tunnel/ so the daemon's package carries no test bench. It
// imports only tunnel/control and tunnel/pki (never tunnel itself, whose own
// tests use it), and it never touches an address outside 127.0.0.0/8.
package tunneltest

import (
	"context"
	"time"

	"github.com/mrgw/mrgw/tunnel/control"
	"github.com/mrgw/mrgw/tunnel/pki"
)

// SessionPair is two peer gateways' control sessions, established over
// loopback with a throwaway CA. A is the dialer, B the listener.
type SessionPair struct {
	A, B         *control.Session
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
// 127.0.0.1. Each session reports its events to its callback (a
// tunnel.Router's OnEvent, so key events reach the data plane). It never
// touches any other address.
func LoopbackSessions(ctx context.Context, nameA, nameB string, onEventA, onEventB func(control.Event)) (p *SessionPair, err error) {
	p = &SessionPair{NameA: nameA, NameB: nameB}
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
		Local: control.LocalInfo{Name: nameB}, ExpectedPeers: []string{nameA}, OnEvent: onEventB})
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
		Local: control.LocalInfo{Name: nameA}, ExpectedPeers: []string{nameB}, OnEvent: onEventA})
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
