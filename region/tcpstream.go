package region

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

func (t *guardTransport) acceptLoop() {
	defer t.wg.Done()
	var pause time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closed.Load() {
				return
			}
			t.warns.Warn("accept", "accepting a gossip stream", "err", err)
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			select {
			case <-t.done:
				return
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		ip := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		if !t.openStream(ip) {
			_ = conn.Close()
			t.refuse(rStreamLimit, ip.String(), "refused a gossip stream: too many open",
				"limit", maxStreams, "per_address", maxStreamsPerIP)
			continue
		}
		t.wg.Add(1)
		go t.serveStream(&streamConn{TCPConn: conn, t: t, ip: ip})
	}
}

func (t *guardTransport) openStream(ip netip.Addr) bool {
	t.streamMu.Lock()
	defer t.streamMu.Unlock()
	if t.streams >= maxStreams || t.streamsBy[ip] >= maxStreamsPerIP {
		return false
	}
	t.streams++
	t.streamsBy[ip]++
	return true
}

func (t *guardTransport) closeStream(ip netip.Addr) {
	t.streamMu.Lock()
	defer t.streamMu.Unlock()
	t.streams--
	if t.streamsBy[ip]--; t.streamsBy[ip] <= 0 {
		delete(t.streamsBy, ip)
	}
}

// serveStream authenticates a stream's first message when gossip is
// encrypted, then hands the stream to memberlist. A stream no key
// decrypts, or a clear one, is counted and logged but still handed over:
// memberlist answers it with an error, which is how the other gateway
// learns why it was refused.
func (t *guardTransport) serveStream(c *streamConn) {
	defer t.wg.Done()
	if keys := t.keys.Load(); keys != nil {
		_ = c.SetDeadline(time.Now().Add(t.streamWait))
		first, r, err := readFirstMessage(c.TCPConn, *keys)
		t.strRecv.Add(uint64(len(first)))
		switch {
		case r == rStreamTimeout || r == rStreamSize:
			t.refuse(r, c.ip.String(), "refused a gossip stream", "err", err)
			_ = c.Close()
			return
		case r == rKeyring:
			t.refuse(r, c.ip.String(), "refused gossip from a gateway with another keyring: no installed key decrypts its stream")
		case r == rUnencrypted:
			t.refuse(r, c.ip.String(), "refused a clear gossip stream: this gateway encrypts gossip (is the other one missing gossip.keyring?)")
		case err != nil: // closed before saying anything
			_ = c.Close()
			return
		}
		c.first = first
		_ = c.SetDeadline(time.Time{}) // memberlist sets its own
	}
	select {
	case t.streamCh <- c:
	case <-t.done:
		_ = c.Close()
	}
}

// readFirstMessage reads a stream's first message (memberlist's
// encryptMsg: type, big-endian length, then the sealed payload, whose
// additional data is the 5-byte header) and tries the keys on it. It
// returns the bytes read, to be replayed to memberlist, and a refusal
// reason or -1.
func readFirstMessage(r io.Reader, keys []cipher.AEAD) ([]byte, int, error) {
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return nil, timeoutReason(err), err
	}
	if hdr[0] != mlEncryptMsg {
		return hdr[:1], rUnencrypted, nil
	}
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		return nil, timeoutReason(err), err
	}
	size := binary.BigEndian.Uint32(hdr[1:])
	if size > maxStreamMessage {
		return nil, rStreamSize, fmt.Errorf("first message of %d bytes, limit %d", size, maxStreamMessage)
	}
	msg := make([]byte, 5+int(size))
	copy(msg, hdr)
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return nil, timeoutReason(err), err
	}
	body := msg[5:]
	if len(body) < mlMinEncrypted || body[0] > 1 {
		return msg, rKeyring, nil
	}
	for _, k := range keys {
		if _, err := k.Open(nil, body[1:1+mlNonceSize], body[1+mlNonceSize:], hdr); err == nil {
			return msg, -1, nil
		}
	}
	return msg, rKeyring, nil
}

// timeoutReason: a stream that stalls is refused; one closed early (a port
// scan) is only closed.
func timeoutReason(err error) int {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return rStreamTimeout
	}
	return -1
}

// streamConn is an accepted stream: what the guard read first is replayed
// to memberlist, and closing it frees its place under the stream limits.
type streamConn struct {
	*net.TCPConn
	t     *guardTransport
	ip    netip.Addr
	first []byte
	once  sync.Once
}

func (c *streamConn) Read(b []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(b, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	n, err := c.TCPConn.Read(b)
	c.t.strRecv.Add(uint64(n))
	return n, err
}

func (c *streamConn) Write(b []byte) (int, error) {
	n, err := c.TCPConn.Write(b)
	c.t.strSent.Add(uint64(n))
	return n, err
}

func (c *streamConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(func() { c.t.closeStream(c.ip) })
	return err
}
