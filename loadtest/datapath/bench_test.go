//go:build linux

package datapath

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
)

// benchLink is the link of the benchmarks: two namespaces over a veth of
// MRGW_DATAPATH_MTU (default 1400) bytes, or loopback without root.
func benchLink(b *testing.B) *link {
	mtu := 1400
	if m, err := strconv.Atoi(os.Getenv("MRGW_DATAPATH_MTU")); err == nil {
		mtu = m
	}
	l, err := newLink(mtu)
	if errors.Is(err, errNoNetns) {
		b.Logf("on loopback: %v", err)
		return loopback(mtu)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	return l
}

// BenchmarkFloorVsTunnel measures, in one run, the floor (raw UDP with the
// AEAD) and mrgw's tunnel (1 s each per iteration; use -benchtime=1x) and
// reports CPU per Gbit/s of each and their ratio.
func BenchmarkFloorVsTunnel(b *testing.B) {
	o := Options{Duration: time.Second}
	o.defaults()
	l := benchLink(b)
	opts := udp.Options{ReadBuffer: 4 << 20, WriteBuffer: 4 << 20}
	for b.Loop() {
		fl, err := RawUDPAEAD(context.Background(), l, opts, o.Suite, o.Duration)
		if err != nil {
			b.Fatal(err)
		}
		tun, err := Tunnel(context.Background(), o, l, opts, true)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(fl.CPUPerGbps(), "floor-cores/Gbit/s")
		b.ReportMetric(fl.Bps()/1e9, "floor-Gbit/s")
		b.ReportMetric(tun.CPUPerGbps(), "mrgw-cores/Gbit/s")
		b.ReportMetric(tun.CPUPerGbps()/fl.CPUPerGbps(), "ratio")
		b.ReportMetric(tun.Bps()/1e9, "mrgw-Gbit/s")
		b.ReportMetric(tun.AllocsPerPacket(), "allocs/datagram")
		b.ReportMetric(tun.perWrite, "datagrams/write")
		b.ReportMetric(tun.perRead, "datagrams/read")
	}
}

// BenchmarkSeal is the AEAD's cost per 1476-byte packet, sealed in place
// as netio does.
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

// BenchmarkTunnel runs only mrgw's tunnel (1 s per iteration), for
// profiling the datapath alone: go test -run - -bench 'Tunnel$'
// -benchtime 3x -cpuprofile cpu.out ./loadtest/datapath
// (MRGW_DATAPATH_MTU=9000 for jumbo frames).
func BenchmarkTunnel(b *testing.B) {
	o := Options{Duration: time.Second}
	o.defaults()
	l := benchLink(b)
	opts := udp.Options{ReadBuffer: 4 << 20, WriteBuffer: 4 << 20}
	for b.Loop() {
		tun, err := Tunnel(context.Background(), o, l, opts, true)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(tun.Bps()/1e9, "tunnel-Gbit/s")
		b.ReportMetric(tun.CPUPerGbps(), "cores/Gbit/s")
		b.ReportMetric(tun.ackRatio, "acks/DATA")
		b.ReportMetric(tun.AllocsPerPacket(), "allocs/datagram")
		b.ReportMetric(tun.perWrite, "datagrams/write")
		b.ReportMetric(tun.perRead, "datagrams/read")
	}
}
