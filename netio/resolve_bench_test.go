//go:build linux

package netio

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
)

// BenchmarkResolveRun is what attributing a run of 64 unsealed DATA
// datagrams of one source costs the owner (a host's datagrams reach its
// gateway from path sockets, so each is resolved): "each" resolves every
// datagram (the lookups by IP, connection and peer), "run" through the
// batch's resolveCache as receiveBatch does. ns/op is per datagram.
func BenchmarkResolveRun(b *testing.B) {
	p := newPair(b, nil, nil, nil)
	ctx := testCtx(b)
	pkt, err := metaroce.AppendData(make([]byte, 0, 1400), &metaroce.DataHeader{Conn: 77, Path: 1, Seq: 1}, make([]byte, 1200))
	if err != nil {
		b.Fatal(err)
	}
	src := netip.AddrPortFrom(p.b.LocalAddr().Addr(), 40000)
	const run = 64
	for _, bc := range []struct {
		name   string
		cached bool
	}{{"each", false}, {"run", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var bad int
			if err := p.a.Call(ctx, func(time.Duration, *metaroce.Endpoint) {
				e, s := p.a, p.a.listen
				b.ResetTimer()
				var rc resolveCache
				for i := range b.N {
					if i%run == 0 {
						rc = resolveCache{}
					}
					var ok bool
					if bc.cached {
						_, ok, _ = rc.resolve(e, s, src, pkt)
					} else {
						_, ok, _ = e.resolve(s, src, pkt, s.primary)
					}
					if !ok {
						bad++
					}
				}
				b.StopTimer()
			}); err != nil {
				b.Fatal(err)
			}
			if bad > 0 {
				b.Fatalf("%d datagrams not attributed", bad)
			}
		})
	}
}
