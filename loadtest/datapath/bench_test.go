//go:build linux

package datapath

import (
	"context"
	"testing"
	"time"

	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
)

// BenchmarkTunnelVsRaw measures, in one run, raw batched UDP and the
// sealed tunnel on loopback (1 s each per iteration; use -benchtime=1x)
// and reports both rates, their ratio, CPU per Gbit/s and allocations per
// datagram.
func BenchmarkTunnelVsRaw(b *testing.B) {
	o := Options{Duration: time.Second}
	o.defaults()
	opts := udp.Options{ReadBuffer: 4 << 20, WriteBuffer: 4 << 20}
	for b.Loop() {
		raw, err := RawUDP(context.Background(), opts, o.MTU+metaroce.DataHeaderLen+seal.Overhead, o.Duration)
		if err != nil {
			b.Fatal(err)
		}
		tun, err := Tunnel(context.Background(), o, opts, true)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(raw.Bps()/1e9, "raw-Gbit/s")
		b.ReportMetric(tun.Bps()/1e9, "tunnel-Gbit/s")
		b.ReportMetric(tun.Bps()/raw.Bps(), "ratio")
		b.ReportMetric(tun.CPUPerGbps(), "cores/Gbit/s")
		b.ReportMetric(tun.AllocsPerPacket(), "allocs/datagram")
	}
}

// BenchmarkSeal is the AEAD's cost per 1476-byte packet (MTU 1400 plus the
// MetaRoCE header), sealed in place as netio does.
func BenchmarkSeal(b *testing.B) {
	s, err := seal.NewSealer(seal.Key{Suite: seal.AES128GCM, Secret: make([]byte, 16)}, 0)
	if err != nil {
		b.Fatal(err)
	}
	const n = 1476
	buf := make([]byte, seal.HeaderLen+n+seal.TagLen)
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Seal(buf[:0], buf[seal.HeaderLen:seal.HeaderLen+n]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTunnel runs only the sealed tunnel (1 s per iteration), for
// profiling the datapath alone: go test -run - -bench 'Tunnel$'
// -benchtime 1x -cpuprofile cpu.out ./loadtest/datapath
func BenchmarkTunnel(b *testing.B) {
	o := Options{Duration: time.Second}
	o.defaults()
	opts := udp.Options{ReadBuffer: 4 << 20, WriteBuffer: 4 << 20}
	for b.Loop() {
		tun, err := Tunnel(context.Background(), o, opts, true)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(tun.Bps()/1e9, "tunnel-Gbit/s")
		b.ReportMetric(tun.CPUPerGbps(), "cores/Gbit/s")
		b.ReportMetric(tun.AllocsPerPacket(), "allocs/datagram")
	}
}
