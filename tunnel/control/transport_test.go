package control

import (
	"net"
	"testing"
)

// TestListenerDialSource: a session dialled through the listener leaves
// from control.listen's address (here 127.0.0.7, one address of a
// multi-homed host, towards a peer on 127.0.0.1), so the peer sees the
// source its ACLs allow; a dial from a socket of its own leaves from
// whatever the routing chooses (127.0.0.1 here, another port).
func TestListenerDialSource(t *testing.T) {
	c := newCerts(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu-west", "gw-b")
	b := newSide(c.creds(t, c.ca, "gw-b"), "us-east", "gw-a")
	ctx := testCtx(t)
	la, err := Listen(ctx, "127.0.0.7:0", a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	lb, err := Listen(ctx, "127.0.0.1:0", b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()

	ds, err := la.Dial(ctx, lb.Addr().String(), "gw-b")
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	ls, err := lb.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	if got, want := ls.Peer().Addr.String(), la.Addr().String(); got != want {
		t.Fatalf("the peer sees the session from %s, want control.listen %s", got, want)
	}

	// The package Dial: a wildcard socket of its own.
	ds2, err := Dial(ctx, lb.Addr().String(), "gw-b", a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ds2.Close()
	ls2, err := lb.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ls2.Close()
	if src := ls2.Peer().Addr.(*net.UDPAddr); src.String() == la.Addr().String() {
		t.Fatalf("a dial from its own socket came from the listener's address %s", src)
	}
	t.Logf("through the listener: %s; own socket: %s", ls.Peer().Addr, ls2.Peer().Addr)
}

// Closing a listener releases control.listen: quic-go does not close a
// socket it did not create, so the listener must (a gateway restarted in
// the same process, or a test reusing the port, failed with "address
// already in use").
func TestListenerCloseReleasesTheAddress(t *testing.T) {
	c := newCerts(t)
	a := newSide(c.creds(t, c.ca, "gw-a"), "eu-west", "gw-b")
	ctx := testCtx(t)
	l, err := Listen(ctx, "127.0.0.7:0", a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	again, err := Listen(ctx, addr, a.cfg)
	if err != nil {
		t.Fatalf("listen again on %s after Close: %v", addr, err)
	}
	again.Close()
}
