//go:build linux

package peers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/netem"
)

const quicALPN = "mrgw-peer-bulk"

// quicTLS returns a server and a client TLS configuration for a fresh
// self-signed certificate (the client trusts exactly that certificate).
func quicTLS() (*tls.Config, *tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "peer-b"},
		DNSNames:  []string{"peer-b"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	srv := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{quicALPN}}
	cli := &tls.Config{RootCAs: pool, ServerName: "peer-b", NextProtos: []string{quicALPN}}
	return srv, cli, nil
}

// quicConfig raises the flow-control windows far above any BDP here, so
// that only congestion control limits the transfer.
func quicConfig() *quic.Config {
	return &quic.Config{
		InitialStreamReceiveWindow:     4 << 20,
		MaxStreamReceiveWindow:         64 << 20,
		InitialConnectionReceiveWindow: 8 << 20,
		MaxConnectionReceiveWindow:     128 << 20,
		MaxIdleTimeout:                 30 * time.Second,
		KeepAlivePeriod:                time.Second,
	}
}

// quicConn is one QUIC connection from A to B through te.
type quicConn struct {
	cc, sc   *net.UDPConn
	ln       *quic.Listener
	cli, srv *quic.Conn
}

func (q *quicConn) close() {
	if q.cli != nil {
		q.cli.CloseWithError(0, "done")
	}
	if q.srv != nil {
		q.srv.CloseWithError(0, "done")
	}
	if q.ln != nil {
		q.ln.Close()
	}
	if q.cc != nil {
		q.cc.Close()
	}
	if q.sc != nil {
		q.sc.Close()
	}
}

func dialQUIC(ctx context.Context, te *tunemu.Emulator) (*quicConn, error) {
	return dialQUICFrom(ctx, te, tunemu.AddrA)
}

// dialQUICFrom is dialQUIC from site A's address local.
func dialQUICFrom(ctx context.Context, te *tunemu.Emulator, local netip.Addr) (*quicConn, error) {
	srvTLS, cliTLS, err := quicTLS()
	if err != nil {
		return nil, err
	}
	q := &quicConn{}
	if q.sc, err = te.ListenUDP(tunemu.SiteB, &net.UDPAddr{IP: tunemu.AddrB.AsSlice()}); err != nil {
		return nil, err
	}
	if q.cc, err = te.ListenUDP(tunemu.SiteA, &net.UDPAddr{IP: local.AsSlice()}); err != nil {
		q.close()
		return nil, err
	}
	if q.ln, err = quic.Listen(q.sc, srvTLS, quicConfig()); err != nil {
		q.close()
		return nil, err
	}
	acc := make(chan error, 1)
	go func() {
		c, err := q.ln.Accept(ctx)
		q.srv = c
		acc <- err
	}()
	q.cli, err = quic.Dial(ctx, q.cc, q.sc.LocalAddr(), cliTLS, quicConfig())
	if err != nil {
		q.ln.Close()
		<-acc
		q.close()
		return nil, err
	}
	if err := <-acc; err != nil {
		q.close()
		return nil, err
	}
	return q, nil
}

// quicBulk sends on n streams of one QUIC connection from A to B.
func quicBulk(ctx context.Context, n int, l Link, warmup, duration time.Duration) (Result, error) {
	te, err := tunemu.New(ctx, l.tunConfig())
	if err != nil {
		return Result{}, err
	}
	defer te.Close()
	q, err := dialQUIC(ctx, te)
	if err != nil {
		return Result{}, err
	}
	defer q.close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got atomic.Uint64
	var wg sync.WaitGroup
	perStream := q.countStreams(runCtx, &wg, &got)
	const writeBuf = 64 << 10
	buf := make([]byte, writeBuf)
	written := map[uint64]*atomic.Uint64{}
	for range n {
		s, err := q.cli.OpenStreamSync(ctx)
		if err != nil {
			cancel()
			q.close()
			wg.Wait()
			return Result{}, err
		}
		w := new(atomic.Uint64)
		written[uint64(s.StreamID())] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				k, err := s.Write(buf)
				w.Add(uint64(k))
				if err != nil {
					return
				}
			}
		}()
	}
	wrote := func() map[uint64]uint64 {
		m := make(map[uint64]uint64, len(written))
		for id, w := range written {
			m[id] = w.Load()
		}
		return m
	}
	// Bytes sent and delivered inside the window only, per stream: quic-go
	// takes a write's bytes as it packs them, so what the application had
	// written (and a write's buffer in progress) bounds what was sent.
	bps, err := measureSent(ctx, got.Load, writtenWindow(perStream, wrote, writeBuf), l.RTT/2, warmup, duration, func() {}, func() {})
	cancel()
	q.close()
	wg.Wait()
	if err != nil {
		return Result{}, err
	}
	la := q.cc.LocalAddr().(*net.UDPAddr).AddrPort()
	ra := q.sc.LocalAddr().(*net.UDPAddr).AddrPort()
	_ = te.PlaneOf(netem.AtoB, netem.ProtoUDP, la, ra)
	return Result{GoodputBps: bps, CC: "quic-go", Emulator: EmuTUN, PlanesUsed: 1}, nil
}

// countStreams accepts the client's streams until ctx ends or the
// connection closes, and counts every byte read from them into got; wg
// tracks the goroutines it starts. It returns a reader of the bytes read
// so far per stream, by stream ID.
func (q *quicConn) countStreams(ctx context.Context, wg *sync.WaitGroup, got *atomic.Uint64) func() map[uint64]uint64 {
	var mu sync.Mutex
	per := map[uint64]*atomic.Uint64{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			s, err := q.srv.AcceptStream(ctx)
			if err != nil {
				return
			}
			c := new(atomic.Uint64)
			mu.Lock()
			per[uint64(s.StreamID())] = c
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				countBoth(s, got, c)
			}()
		}
	}()
	return func() map[uint64]uint64 {
		mu.Lock()
		defer mu.Unlock()
		m := make(map[uint64]uint64, len(per))
		for id, c := range per {
			m[id] = c.Load()
		}
		return m
	}
}

// countBoth reads r until it fails, adding every byte read to total and
// to one.
func countBoth(r io.Reader, total, one *atomic.Uint64) {
	buf := make([]byte, 256<<10)
	for {
		k, err := r.Read(buf)
		total.Add(uint64(k))
		one.Add(uint64(k))
		if err != nil {
			return
		}
	}
}
