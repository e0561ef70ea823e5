//go:build linux

package netio

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"sync"
	"time"

	"github.com/mrgw/mrgw/metaroce"
)

// Stateless admission cookies (docs/PROTOCOL.md, "Admission cookies").
//
// An Endpoint that accepts peers (Config.AcceptPeer) and has Config.Cookies
// set answers an INIT from an unknown source, while Config.RequireCookie
// says so, with a RETRY instead of admitting it: a datagram that carries a
// cookie, an HMAC over the source IP, the INIT's connection id and a time
// bucket, under a secret that rotates. It keeps no state for it. The
// initiator's netio appends the cookie to its INITs to that peer (at once,
// and to every retransmission) and the INIT is admitted only if the cookie
// is valid: a peer costs a slot only after it has proved that it receives
// at the address it sends from. A RETRY is no larger than the INIT it
// answers, so it amplifies nothing.
//
// Wire (big-endian):
//
//	RETRY:          0x00 0xC0 0x00 0x00 | bucket (4) | mac (16)         = 24 bytes
//	INIT + cookie:  INIT (24)           | "MRCK" | bucket (4) | mac (16) = 48 bytes
//
// A RETRY starts with version 0, which no MetaRoCE packet but VERSION
// uses, and a type VERSION does not: a v1 initiator drops it (and answers
// with a VERSION packet, which the acceptor drops). The cookie is
// stripped before the INIT reaches the state machine.
const (
	RetryLen       = 24
	CookieLen      = 24
	retryType      = 0xC0
	cookieMAC      = 16
	cookieMagic    = "MRCK"
	cookieBucket   = 8 * time.Second // a cookie is valid in its bucket and the next
	secretBuckets  = 16              // the secret rotates every 16 buckets (128 s)
	initWithCookie = metaroce.InitLen + CookieLen
)

// A RETRY is never larger than the (valid) INIT it answers: this fails to
// compile if it were.
const _ = uint(metaroce.InitLen - RetryLen)

// Cookies mints and checks admission cookies. It is safe for concurrent
// use; its secret is random and rotates by itself (the previous one stays
// valid for one period, so a cookie minted just before a rotation works).
type Cookies struct {
	mu        sync.Mutex
	now       func() time.Time
	period    uint32 // the secret period of cur
	cur, prev [32]byte
	havePrev  bool
}

// NewCookies returns a Cookies with a fresh random secret. now may be nil
// (time.Now).
func NewCookies(now func() time.Time) *Cookies {
	if now == nil {
		now = time.Now
	}
	c := &Cookies{now: now}
	c.period = c.bucket() / secretBuckets
	_, _ = rand.Read(c.cur[:])
	return c
}

func (c *Cookies) bucket() uint32 { return uint32(c.now().Unix() / int64(cookieBucket/time.Second)) }

// key returns the secret for a bucket, rotating first if its period began.
// Called with mu held.
func (c *Cookies) key(b, nowBucket uint32) ([]byte, bool) {
	if p := nowBucket / secretBuckets; p != c.period {
		if p == c.period+1 {
			c.prev, c.havePrev = c.cur, true
		} else {
			c.havePrev = false
		}
		_, _ = rand.Read(c.cur[:])
		c.period = p
	}
	switch b / secretBuckets {
	case c.period:
		return c.cur[:], true
	case c.period - 1:
		if c.havePrev {
			return c.prev[:], true
		}
	}
	return nil, false
}

func cookieMACOf(key []byte, ip netip.Addr, conn uint64, b uint32) [cookieMAC]byte {
	m := hmac.New(sha256.New, key)
	a := ip.Unmap().As16()
	m.Write(a[:])
	var tail [12]byte
	binary.BigEndian.PutUint64(tail[:], conn)
	binary.BigEndian.PutUint32(tail[8:], b)
	m.Write(tail[:])
	var out [cookieMAC]byte
	copy(out[:], m.Sum(nil))
	return out
}

// appendRetry appends the RETRY for an INIT of connection conn from ip.
func (c *Cookies) appendRetry(dst []byte, ip netip.Addr, conn uint64) []byte {
	c.mu.Lock()
	b := c.bucket()
	key, _ := c.key(b, b)
	mac := cookieMACOf(key, ip, conn, b)
	c.mu.Unlock()
	dst = append(dst, 0, retryType, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, b)
	return append(dst, mac[:]...)
}

// valid checks a cookie trailer (CookieLen bytes) of an INIT of connection
// conn from ip.
func (c *Cookies) valid(trailer []byte, ip netip.Addr, conn uint64) bool {
	if len(trailer) != CookieLen || string(trailer[:4]) != cookieMagic {
		return false
	}
	b := binary.BigEndian.Uint32(trailer[4:])
	c.mu.Lock()
	now := c.bucket()
	if b != now && b+1 != now {
		c.mu.Unlock()
		return false
	}
	key, ok := c.key(b, now)
	var mac [cookieMAC]byte
	if ok {
		mac = cookieMACOf(key, ip, conn, b)
	}
	c.mu.Unlock()
	return ok && hmac.Equal(mac[:], trailer[8:])
}

// isRetry reports whether pkt is a RETRY.
func isRetry(pkt []byte) bool {
	return len(pkt) == RetryLen && pkt[0] == 0 && pkt[1] == retryType
}

// cookieOf turns a RETRY into the trailer an INIT carries.
func cookieOf(retry []byte) (t [CookieLen]byte) {
	copy(t[:], cookieMagic)
	copy(t[4:], retry[4:RetryLen])
	return t
}

// splitCookie returns an INIT's length without its cookie and the cookie,
// if it carries one.
func splitCookie(pkt []byte) (n int, cookie []byte) {
	if len(pkt) == initWithCookie && metaroce.PacketType(pkt[1]) == metaroce.TypeInit &&
		string(pkt[metaroce.InitLen:metaroce.InitLen+4]) == cookieMagic {
		return metaroce.InitLen, pkt[metaroce.InitLen:]
	}
	return len(pkt), nil
}
