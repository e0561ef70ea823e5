package region

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func newTestGuard(t *testing.T, keys [][]byte, streamWait time.Duration) (*guardTransport, *logRecorder) {
	t.Helper()
	rec := &logRecorder{}
	g, err := newGuardTransport(netip.MustParseAddrPort("127.0.0.1:0"), keys, streamWait, slog.New(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown() })
	return g, rec
}

// seal is memberlist's encrypted packet (version 1): version, nonce,
// AES-GCM of msg.
func seal(t *testing.T, key, msg, ad []byte) []byte {
	t.Helper()
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, _ := cipher.NewGCM(block)
	nonce := bytes.Repeat([]byte{9}, 12)
	return gcm.Seal(append([]byte{1}, nonce...), nonce, msg, ad)
}

func udpFrom(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (g *guardTransport) udpAddr() *net.UDPAddr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: g.port}
}

func dropCount(g *guardTransport, reason string) uint64 {
	_, d, _ := g.stats()
	return d[reason]
}

func TestGuardDatagrams(t *testing.T) {
	key := bytes.Repeat([]byte{3}, 16)
	other := bytes.Repeat([]byte{4}, 16)
	g, _ := newTestGuard(t, [][]byte{key}, time.Second)
	stranger := udpFrom(t)
	send := func(c *net.UDPConn, b []byte) {
		t.Helper()
		if _, err := c.WriteToUDP(b, g.udpAddr()); err != nil {
			t.Fatal(err)
		}
	}

	// Authenticated: passed on as sent, from its source.
	valid := seal(t, key, []byte("\x00ping"), nil)
	send(stranger, valid)
	select {
	case p := <-g.PacketCh():
		if !bytes.Equal(p.Buf, valid) || p.From.String() != stranger.LocalAddr().String() {
			t.Fatalf("got %x from %s", p.Buf, p.From)
		}
	case <-time.After(deadline):
		t.Fatal("authenticated datagram not passed on")
	}

	// Junk of every kind, each counted under its reason. The stranger
	// is trusted now (it authenticated), so it is never rate-limited.
	send(stranger, []byte{1, 2, 3})
	send(stranger, append([]byte{7}, make([]byte, 60)...))
	send(stranger, seal(t, other, []byte("\x00ping"), nil))
	send(stranger, make([]byte, maxDatagram+100))
	for r, want := range map[string]uint64{DropTooShort: 1, DropFormat: 1, DropDecrypt: 1, DropTooLong: 1} {
		waitFor(t, r+" counted", func() bool { return dropCount(g, r) == want })
	}

	// A new stranger gets a budget of attempts a second; beyond it, its
	// datagrams are not even decrypted.
	flooder := udpFrom(t)
	junk := seal(t, other, []byte("\x00junk"), nil)
	for range 2 * untrustedPerIP {
		send(flooder, junk)
	}
	waitFor(t, "the flooder's datagrams counted", func() bool {
		return dropCount(g, DropDecrypt)-1+dropCount(g, DropRate) == 2*untrustedPerIP
	})
	// The budget is by address (ports are free to pick), and the
	// stranger, on the same address, spent one before it was trusted.
	if d := dropCount(g, DropDecrypt) - 1; d < untrustedPerIP-1 {
		t.Errorf("only %d of the flooder's datagrams were decrypted; its budget is %d", d, untrustedPerIP-1)
	}
	// ... but the flooder's address is not the trusted stranger's.
	send(stranger, valid)
	select {
	case <-g.PacketCh():
	case <-time.After(deadline):
		t.Fatal("the trusted stranger's datagram was dropped after the flood")
	}

	// A key installed later is used at once.
	if err := g.setKeys([][]byte{key, other}); err != nil {
		t.Fatal(err)
	}
	send(stranger, seal(t, other, []byte("\x00ping"), nil))
	select {
	case <-g.PacketCh():
	case <-time.After(deadline):
		t.Fatal("datagram sealed with the new key dropped")
	}
}

// A member's datagrams arrive on a socket of its own, not in the port's
// socket with the junk.
func TestGuardMemberSocket(t *testing.T) {
	if !memberSockets {
		t.Skip("no member sockets on this system")
	}
	key := bytes.Repeat([]byte{3}, 16)
	g, _ := newTestGuard(t, [][]byte{key}, time.Second)
	member, stranger := udpFrom(t), udpFrom(t)
	// A member first seen elsewhere, then at member's address.
	g.setMember("m", stranger.LocalAddr().(*net.UDPAddr).AddrPort(), true, false)
	g.setMember("m", member.LocalAddr().(*net.UDPAddr).AddrPort(), true, false)
	if n := g.memberSocketCount(); n != 1 {
		t.Fatalf("%d member sockets", n)
	}
	valid := seal(t, key, []byte("\x00ping"), nil)
	for _, c := range []*net.UDPConn{member, stranger} {
		if _, err := c.WriteToUDP(valid, g.udpAddr()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.PacketCh():
		case <-time.After(deadline):
			t.Fatal("datagram not passed on")
		}
	}
	if got := g.acceptedMember.Load(); got != 1 {
		t.Errorf("%d datagrams came through a member socket, want 1 (the member's)", got)
	}
	g.setMember("m", member.LocalAddr().(*net.UDPAddr).AddrPort(), false, false)
	if n := g.memberSocketCount(); n != 0 {
		t.Fatalf("%d member sockets after the member left", n)
	}
	// Its datagrams now come through the port's socket.
	if _, err := member.WriteToUDP(valid, g.udpAddr()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.PacketCh():
	case <-time.After(deadline):
		t.Fatal("datagram from a former member not passed on")
	}
}

// Streams are bounded in number per address and in time, and a first
// message larger than any gateway sends is refused.
func TestGuardStreams(t *testing.T) {
	key := bytes.Repeat([]byte{3}, 16)
	g, rec := newTestGuard(t, [][]byte{key}, 300*time.Millisecond)
	addr := g.tcp.Addr().String()
	refused := func(r string) uint64 { _, _, ref := g.stats(); return ref[r] }

	// Silent connections hold their place until they time out.
	var silent []net.Conn
	for range maxStreamsPerIP {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	waitFor(t, "the silent streams to be admitted", func() bool {
		g.streamMu.Lock()
		defer g.streamMu.Unlock()
		return g.streams == maxStreamsPerIP
	})
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(deadline))
	if _, err := extra.Read(make([]byte, 1)); err == nil {
		t.Error("a stream over the per-address limit was served")
	}
	waitFor(t, "the refusal counted", func() bool { return refused(RefuseStreamLimit) == 1 })
	for _, c := range silent {
		_ = c.SetReadDeadline(time.Now().Add(deadline))
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("silent stream not closed by the guard: %v", err)
		}
	}
	waitFor(t, "the silent streams to time out", func() bool { return refused(RefuseStreamTimeout) == maxStreamsPerIP })
	var lines []string
	for _, l := range rec.find(slog.LevelWarn, "refused a gossip stream") {
		if strings.Contains(l, "reason="+RefuseStreamTimeout) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Errorf("%d warn lines for %d timeouts; want one (rate-limited): %q", len(lines), maxStreamsPerIP, lines)
	}

	// Their places are free again; a giant first message is refused
	// before it is read.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hdr := []byte{mlEncryptMsg, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[1:], maxStreamMessage+1)
	if _, err := c.Write(hdr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the giant message refused", func() bool { return refused(RefuseStreamSize) == 1 })

	// An authenticated stream is handed to memberlist with its first
	// message intact.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	body := seal(t, key, []byte("\x06state"), nil)
	msg := make([]byte, 5, 5+len(body))
	msg[0] = mlEncryptMsg
	binary.BigEndian.PutUint32(msg[1:], uint32(len(body)))
	// The additional data is the 5-byte header.
	body = seal(t, key, []byte("\x06state"), msg[:5])
	msg = append(msg, body...)
	if _, err := c2.Write(msg); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-g.StreamCh():
		defer s.Close()
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, msg) {
			t.Errorf("memberlist reads %x, %v; want %x", got, err, msg)
		}
	case <-time.After(deadline):
		t.Fatal("authenticated stream not handed over")
	}
	if r := refused(RefuseKeyring); r != 0 {
		t.Errorf("%d keyring refusals for an authenticated stream", r)
	}
}
