//go:build linux

package flood

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/mrgw/mrgw/metaroce"
)

// payload says what a datagram flood carries.
type payload int

const (
	payloadJunk payload = iota // random bytes of random length (1..1400)
	payloadInit                // a well-formed MetaRoCE INIT, a fresh connection id each; every other one with a forged admission cookie
	payloadQUIC                // a QUIC v1 Initial-looking long header packet of 1200 bytes, random DCID, undecryptable
)

// batch is the sendmmsg batch.
const batch = 64

// udpFlood sends count datagrams to dst within duration, at count/duration
// a second, from many source ports, with sendmmsg
// (ipv4.PacketConn.WriteBatch).
type udpFlood struct {
	dst      netip.AddrPort
	what     payload
	count    uint64
	duration time.Duration
	workers  int
	// raw: send from raw sockets (root only) so that every datagram has
	// its own source (IP, port): 16 source IPs, ports 1024..65535.
	raw bool
	// srcIPs are the addresses the pool sockets bind (not raw).
	srcIPs []netip.Addr
	// spoofIP, if valid, is the only source IP (a peer gateway's: the
	// datagrams come from an address the gateway knows).
	spoofIP netip.Addr

	sent   atomic.Uint64
	errs   atomic.Uint64
	seq    atomic.Uint64
	lastEr atomic.Value
}

// socketsPerWorker is how many UDP sockets (source ports) each pool
// worker rotates through, one per batch.
const socketsPerWorker = 256

// run floods until count is sent, duration has passed or ctx ends; it
// returns the time from the first to the last send.
func (f *udpFlood) run(ctx context.Context) (time.Duration, error) {
	if f.workers <= 0 {
		f.workers = 2
	}
	type src struct {
		pcs  []*ipv4.PacketConn
		cls  []net.PacketConn
		dsts []net.Addr
	}
	srcs := make([]*src, f.workers)
	defer func() {
		for _, s := range srcs {
			if s == nil {
				continue
			}
			for _, c := range s.cls {
				c.Close()
			}
		}
	}()
	for w := range f.workers {
		s := &src{}
		srcs[w] = s
		switch {
		case f.raw:
			// 8 source IPs per worker, one raw socket each.
			for i := range 8 {
				ip := netip.AddrFrom4([4]byte{127, 3, byte(w), byte(i + 1)})
				c, err := net.ListenPacket("ip4:udp", ip.String())
				if err != nil {
					return 0, fmt.Errorf("flood: raw socket (needs root or CAP_NET_RAW): %w", err)
				}
				if rc, ok := c.(*net.IPConn); ok {
					_ = rc.SetReadBuffer(4096)
				}
				s.cls = append(s.cls, c)
				s.pcs = append(s.pcs, ipv4.NewPacketConn(c))
				s.dsts = append(s.dsts, &net.IPAddr{IP: f.dst.Addr().AsSlice()})
			}
		default:
			ips := f.srcIPs
			if f.spoofIP.IsValid() {
				ips = []netip.Addr{f.spoofIP}
			}
			for i := range socketsPerWorker {
				ip := ips[(w*socketsPerWorker+i)%len(ips)]
				c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
				if err != nil {
					return 0, fmt.Errorf("flood: source socket: %w", err)
				}
				_ = c.SetReadBuffer(4096) // replies (RETRYs) are dropped here
				_ = c.SetWriteBuffer(1 << 20)
				s.cls = append(s.cls, c)
				s.pcs = append(s.pcs, ipv4.NewPacketConn(c))
				s.dsts = append(s.dsts, net.UDPAddrFromAddrPort(f.dst))
			}
		}
	}
	rate := float64(f.count) / f.duration.Seconds()
	start := time.Now()
	deadline := start.Add(f.duration)
	var last atomic.Int64
	var wg sync.WaitGroup
	for w := range f.workers {
		quota := f.count / uint64(f.workers)
		if w == 0 {
			quota += f.count % uint64(f.workers)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.worker(ctx, w, srcs[w].pcs, srcs[w].dsts, quota, rate/float64(f.workers), start, deadline, &last)
		}()
	}
	wg.Wait()
	if l := last.Load(); l > 0 {
		return time.Duration(l - start.UnixNano()), nil
	}
	return 0, nil
}

func (f *udpFlood) worker(ctx context.Context, w int, pcs []*ipv4.PacketConn, dsts []net.Addr, quota uint64, rate float64,
	start, deadline time.Time, last *atomic.Int64) {
	rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(time.Now().UnixNano())))
	hdr := 0
	if f.raw {
		hdr = 8
	}
	// Junk is drawn from a pool of random datagrams; INITs and QUIC
	// Initials are built in place per message with a fresh id.
	var junk [][]byte
	if f.what == payloadJunk {
		junk = make([][]byte, 1024)
		for i := range junk {
			b := make([]byte, hdr+1+rng.IntN(1400))
			for j := hdr; j < len(b); j++ {
				b[j] = byte(rng.Uint32())
			}
			junk[i] = b
		}
	}
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, hdr+1200)
	}
	ms := make([]ipv4.Message, batch)
	port := uint16(1024 + rng.IntN(1000))
	var mySent uint64
	sock := 0
	for mySent < quota && ctx.Err() == nil {
		now := time.Now()
		if !now.Before(deadline) {
			return
		}
		// Pace: never ahead of rate × elapsed.
		if ahead := float64(mySent) - rate*now.Sub(start).Seconds(); ahead > 0 {
			time.Sleep(time.Duration(ahead / rate * float64(time.Second)))
			continue
		}
		n := int(min(uint64(batch), quota-mySent))
		pc := pcs[sock%len(pcs)]
		dst := dsts[sock%len(dsts)]
		sock++
		for i := range n {
			var b []byte
			switch f.what {
			case payloadJunk:
				b = junk[rng.IntN(len(junk))]
			case payloadInit:
				n := f.seq.Add(1)
				b = appendInit(bufs[i][:hdr], n)
				if n%2 == 0 {
					b = appendForgedCookie(b, rng)
				}
			case payloadQUIC:
				b = appendQUICInitial(bufs[i][:hdr], rng)
			}
			if f.raw {
				binary.BigEndian.PutUint16(b[0:], port)
				binary.BigEndian.PutUint16(b[2:], f.dst.Port())
				binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
				binary.BigEndian.PutUint16(b[6:], 0) // no checksum
				port++
				if port == 0 {
					port = 1024
				}
			}
			ms[i] = ipv4.Message{Buffers: [][]byte{b}, Addr: dst}
		}
		k, err := pc.WriteBatch(ms[:n], 0)
		if k > 0 {
			mySent += uint64(k)
			f.sent.Add(uint64(k))
			last.Store(time.Now().UnixNano())
		}
		if err != nil {
			f.errs.Add(1)
			f.lastEr.Store(err.Error())
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// appendInit appends a bare INIT with connection id derived from n.
func appendInit(b []byte, n uint64) []byte {
	h := metaroce.Handshake{Conn: splitmix(n) | 1, MTU: 1400, Paths: 4, Timestamp: n}
	out, err := metaroce.AppendInit(b[len(b):len(b):cap(b)], &h)
	if err != nil {
		panic(err)
	}
	return b[:len(b)+len(out)]
}

// appendForgedCookie appends an admission cookie trailer ("MRCK", a time
// bucket and a MAC) of random bytes: the gateway finds it invalid, counts
// it as a bad cookie and answers with a challenge.
func appendForgedCookie(b []byte, rng *rand.Rand) []byte {
	b = append(b, "MRCK"...)
	for range 5 {
		b = binary.BigEndian.AppendUint32(b, rng.Uint32())
	}
	return b
}

// appendQUICInitial appends a QUIC v1 Initial long header (random 8-byte
// DCID and SCID, no token) padded to 1200 bytes with random bytes that no
// key decrypts.
func appendQUICInitial(b []byte, rng *rand.Rand) []byte {
	const size = 1200
	start := len(b)
	b = b[:start+size]
	p := b[start:]
	p[0] = 0xC0 | byte(rng.IntN(4)) // long header, fixed bit, Initial, packet number length
	binary.BigEndian.PutUint32(p[1:], 1)
	p[5] = 8
	binary.BigEndian.PutUint64(p[6:], rng.Uint64())
	p[14] = 8
	binary.BigEndian.PutUint64(p[15:], rng.Uint64())
	p[23] = 0 // token length
	rest := size - 26
	binary.BigEndian.PutUint16(p[24:], 0x4000|uint16(rest))
	for i := 26; i+8 <= size; i += 8 {
		binary.BigEndian.PutUint64(p[i:], rng.Uint64())
	}
	return b
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// lastErr is the last send error, if any.
func (f *udpFlood) lastErr() error {
	if s, ok := f.lastEr.Load().(string); ok {
		return errors.New(s)
	}
	return nil
}
