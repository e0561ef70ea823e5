//go:build linux

package netio

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
)

// TestCookieAdmission: with cookies on, a bare INIT from an unknown source
// gets a RETRY and costs no peer (AcceptPeer is not asked); an initiator
// running netio echoes the cookie and is admitted; a forged cookie is
// answered with a fresh RETRY, not admitted.
func TestCookieAdmission(t *testing.T) {
	ctx := testCtx(t)
	rb := newRecorder()
	var asked atomic.Int32
	b, err := New(Config{Protocol: protoConfig(true), Listen: loop4, OnEvent: rb.On,
		Cookies: NewCookies(nil),
		AcceptPeer: func(netip.AddrPort) (PeerID, bool) {
			asked.Add(1)
			return 77, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	// A bare INIT from a plain socket: a RETRY comes back, nothing is admitted.
	raw, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	init, _ := metaroce.AppendInit(make([]byte, 0, metaroce.InitLen), &metaroce.Handshake{Conn: 42, MTU: 1200, Paths: 1, Timestamp: 1})
	dst := net.UDPAddrFromAddrPort(b.LocalAddr())
	retry := func(pkt []byte) []byte {
		t.Helper()
		if _, err := raw.WriteToUDP(pkt, dst); err != nil {
			t.Fatal(err)
		}
		_ = raw.SetReadDeadline(time.Now().Add(patience))
		buf := make([]byte, 2048)
		n, _, err := raw.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("no answer to an INIT: %v", err)
		}
		if !isRetry(buf[:n]) {
			t.Fatalf("answer %x is not a RETRY", buf[:n])
		}
		return buf[:n]
	}
	r := retry(init)
	if len(r) > len(init) {
		t.Errorf("RETRY of %d bytes answers an INIT of %d: amplification", len(r), len(init))
	}
	// A forged cookie: another RETRY.
	forged := append(append([]byte{}, init...), cookieMagic...)
	forged = append(forged, make([]byte, CookieLen-4)...)
	retry(forged)
	// The cookie of another connection id: another RETRY.
	ck := cookieOf(r)
	other, _ := metaroce.AppendInit(make([]byte, 0, initWithCookie), &metaroce.Handshake{Conn: 43, MTU: 1200, Paths: 1, Timestamp: 1})
	retry(append(other, ck[:]...))
	if n := asked.Load(); n != 0 {
		t.Fatalf("AcceptPeer asked %d times before a valid cookie", n)
	}
	if st := b.Stats(); st.RetriesSent != 3 || st.BadCookies != 2 {
		t.Fatalf("RetriesSent %d BadCookies %d, want 3 and 2", st.RetriesSent, st.BadCookies)
	}

	// A netio initiator echoes the cookie and gets in.
	a, err := New(Config{Protocol: protoConfig(false), Listen: loop4})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.AddPeer(Peer{ID: 5, Addr: b.LocalAddr()}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Connect(ctx, 5); err != nil {
		t.Fatal(err)
	}
	rb.Wait(t, ctx, "accepted connection", func(evs []metaroce.Event) bool {
		for _, ev := range evs {
			if ev.Kind == metaroce.EventConnected && ev.Conn.Peer() == 77 {
				return true
			}
		}
		return false
	})
	if st := a.Stats(); st.RetriesReceived == 0 {
		t.Fatal("the initiator got in without a RETRY")
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("AcceptPeer asked %d times, want 1", n)
	}
}

// TestCookieExpiry: a cookie is valid in its time bucket and the next,
// across one rotation of the secret, and not after.
func TestCookieExpiry(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	c := NewCookies(func() time.Time { return now })
	ip := netip.MustParseAddr("10.0.0.1")
	var buf [RetryLen]byte
	ck := cookieOf(c.appendRetry(buf[:0], ip, 9))
	if !c.valid(ck[:], ip, 9) {
		t.Fatal("fresh cookie refused")
	}
	if c.valid(ck[:], netip.MustParseAddr("10.0.0.2"), 9) || c.valid(ck[:], ip, 10) {
		t.Fatal("cookie valid for another IP or connection")
	}
	now = now.Add(cookieBucket)
	if !c.valid(ck[:], ip, 9) {
		t.Fatal("cookie refused in the next bucket")
	}
	now = now.Add(cookieBucket)
	if c.valid(ck[:], ip, 9) {
		t.Fatal("cookie valid two buckets later")
	}
	// Minted in the last bucket of a secret period, checked in the first
	// of the next: still valid.
	now = time.Unix(int64(secretBuckets*8*1000+secretBuckets*8-8), 0)
	ck = cookieOf(c.appendRetry(buf[:0], ip, 9))
	now = now.Add(cookieBucket)
	if !c.valid(ck[:], ip, 9) {
		t.Fatal("cookie refused across a secret rotation")
	}
}

// TestJunkINITNeitherAnsweredNorAdmitted: a datagram with an INIT's type
// byte that is not a valid INIT (a 12-byte "EE 03 ...", another version, a
// wrong length, zero paths) is neither admitted (not under load) nor
// answered with a RETRY (under load: 24 bytes for 12 was an
// amplification), and is counted as a bad INIT, not as unknown_source.
func TestJunkINITNeitherAnsweredNorAdmitted(t *testing.T) {
	var require atomic.Bool
	var asked atomic.Int32
	b, err := New(Config{Protocol: protoConfig(true), Listen: loop4,
		Cookies: NewCookies(nil), RequireCookie: require.Load,
		AcceptPeer: func(netip.AddrPort) (PeerID, bool) {
			asked.Add(1)
			return 77, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	raw, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	dst := net.UDPAddrFromAddrPort(b.LocalAddr())
	init, _ := metaroce.AppendInit(make([]byte, 0, metaroce.InitLen), &metaroce.Handshake{Conn: 42, MTU: 1200, Paths: 1, Timestamp: 1})
	v2 := append([]byte{}, init...)
	v2[0] = 2
	noPaths, _ := metaroce.AppendInit(make([]byte, 0, metaroce.InitLen), &metaroce.Handshake{Conn: 43, MTU: 1200, Paths: 0, Timestamp: 1})
	junk := [][]byte{
		{0xEE, 0x03, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8},
		v2,
		append(append([]byte{}, init...), 0, 0, 0, 0, 0, 0),
		noPaths,
	}
	send := func(pkt []byte) {
		t.Helper()
		if _, err := raw.WriteToUDP(pkt, dst); err != nil {
			t.Fatal(err)
		}
	}
	// The answer to the valid INIT that follows the junk on the same
	// socket (served in order) must be the first answer.
	firstAnswer := func() []byte {
		t.Helper()
		send(init)
		_ = raw.SetReadDeadline(time.Now().Add(patience))
		buf := make([]byte, 2048)
		n, _, err := raw.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("no answer to a valid INIT: %v", err)
		}
		return buf[:n]
	}
	for phase, underLoad := range []bool{false, true} {
		require.Store(underLoad)
		for _, j := range junk {
			send(j)
		}
		require.Store(true) // so that the valid INIT is answered
		if a := firstAnswer(); !isRetry(a) || len(a) > len(init) {
			t.Fatalf("under load %v: first answer %x, want the RETRY of the valid INIT", underLoad, a)
		}
		st := b.Stats()
		if n := asked.Load(); n != 0 {
			t.Errorf("under load %v: AcceptPeer asked %d times for junk", underLoad, n)
		}
		// UnknownSource: the valid INITs, answered with a RETRY.
		if st.RetriesSent != uint64(phase+1) || st.BadInits != uint64(len(junk)*(phase+1)) || st.UnknownSource != uint64(phase+1) {
			t.Errorf("under load %v: RetriesSent %d BadInits %d UnknownSource %d, want %d, %d, %d",
				underLoad, st.RetriesSent, st.BadInits, st.UnknownSource, phase+1, len(junk)*(phase+1), phase+1)
		}
		if d := b.ListenDrops(); d.Malformed != st.BadInits {
			t.Errorf("ListenDrops.Malformed %d, Stats.BadInits %d", d.Malformed, st.BadInits)
		}
	}
}
