//go:build linux

package udp

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkWrite compares three ways to send 1400-byte datagrams over
// loopback: one WriteTo per datagram, WriteBatch (sendmmsg) and WriteBatch
// with GSO. One op is one batch of 64 datagrams; MB/s counts payload the
// sender handed to the kernel, and the Gbit/s metrics are sender and
// receiver payload rates (the receiver drains with GRO on a second
// goroutine; on loopback it shares the machine's cores with the sender).
func BenchmarkWrite(b *testing.B) {
	const size, batch = 1400, 64
	for _, mode := range []string{"WriteTo", "WriteBatch", "WriteBatchGSO"} {
		b.Run(mode, func(b *testing.B) {
			tx := open(b, loop4, Options{DisableGSO: mode != "WriteBatchGSO"})
			rx := open(b, loop4, Options{})
			if mode == "WriteBatchGSO" && !tx.Stats().GSO {
				b.Skip("no UDP GSO")
			}
			var rxBytes atomic.Uint64
			var wg sync.WaitGroup
			wg.Go(func() {
				msgs := make([]Message, 128)
				for i := range msgs {
					msgs[i].Buf = make([]byte, 2048)
				}
				for {
					n, err := rx.ReadBatch(msgs)
					if errors.Is(err, net.ErrClosed) {
						return
					}
					for _, m := range msgs[:n] {
						rxBytes.Add(uint64(m.N))
					}
				}
			})
			msgs := make([]Message, batch)
			for i := range msgs {
				msgs[i] = Message{Buf: make([]byte, size), N: size, Addr: rx.LocalAddr()}
			}
			dst := net.UDPAddrFromAddrPort(rx.LocalAddr())
			b.SetBytes(size * batch)
			b.ReportAllocs()
			for b.Loop() {
				if mode == "WriteTo" {
					for i := range msgs {
						if _, err := tx.udp.WriteTo(msgs[i].Buf, dst); err != nil {
							b.Fatal(err)
						}
					}
					continue
				}
				if _, err := tx.WriteBatch(msgs); err != nil {
					b.Fatal(err)
				}
			}
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)*size*batch*8/secs/1e9, "tx-Gbit/s")
			b.ReportMetric(float64(rxBytes.Load())*8/secs/1e9, "rx-Gbit/s")
			rx.Close()
			wg.Wait()
		})
	}
}

// BenchmarkReadBatch measures the receive side with and without GRO: one
// op is one ReadBatch call. It allocates nothing (x/net's ReadBatch, used
// before, built a *net.UDPAddr per received message).
func BenchmarkReadBatch(b *testing.B) {
	const size = 1400
	for _, gro := range []bool{false, true} {
		name := "plain"
		if gro {
			name = "GRO"
		}
		b.Run(name, func(b *testing.B) {
			tx := open(b, loop4, Options{})
			rx := open(b, loop4, Options{DisableGRO: !gro})
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Go(func() {
				msgs := make([]Message, 64)
				for i := range msgs {
					msgs[i] = Message{Buf: make([]byte, size), N: size, Addr: rx.LocalAddr()}
				}
				for !stop.Load() {
					if _, err := tx.WriteBatch(msgs); err != nil {
						return
					}
				}
			})
			msgs := make([]Message, 64)
			for i := range msgs {
				msgs[i].Buf = make([]byte, 2048)
			}
			var bytes uint64
			b.ReportAllocs()
			for b.Loop() {
				n, err := rx.ReadBatch(msgs)
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range msgs[:n] {
					bytes += uint64(m.N)
				}
			}
			b.ReportMetric(float64(bytes)*8/b.Elapsed().Seconds()/1e9, "rx-Gbit/s")
			b.ReportMetric(float64(bytes)/size/float64(b.N), "datagrams/op")
			stop.Store(true)
			wg.Wait()
		})
	}
}
