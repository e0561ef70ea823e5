//go:build linux

package datapath

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/crypto/curve25519"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/mrgw/mrgw/netio/udp"
)

// wireguard-go (golang.zx2c4.com/wireguard, the userspace WireGuard the
// wireguard-go daemon is built from) as a library, in this process: one
// device per site, each with its TUN device ("wg0") created inside the
// site's namespace and its UDP socket (the standard bind: GSO and GRO
// where the kernel has them) opened there, so its encrypted datagrams
// cross the same veth as every other system's. The TUN devices have
// wireguard-go's offloads (virtio headers, TSO and USO): a GSO
// super-datagram written into wg0 reaches wireguard-go whole.
//
// The traffic is the raw-udp measurement's: a netio/udp sender in site A
// sends batched (GSO) datagrams to a receiver in site B (GRO), but to B's
// tunnel address, through wg0. The process's CPU is therefore wireguard-go
// at both ends plus the application's sending and receiving sockets.

// nsBind opens wireguard-go's sockets inside a site's namespace whatever
// goroutine asks: the device re-opens its bind when its TUN device goes
// down and up again (its netlink listener sees the link's initial state
// and then ip's "link set up"), from a goroutine on any thread, and a
// socket opened there landed in the root namespace (no handshake, in two
// runs of five at MTU 9000).
type nsBind struct {
	conn.Bind
	l    *link
	site int
}

func (b nsBind) Open(port uint16) (fns []conn.ReceiveFunc, actual uint16, err error) {
	if derr := b.l.do(b.site, func() error {
		fns, actual, err = b.Bind.Open(port)
		return nil
	}); derr != nil {
		return nil, 0, derr
	}
	return fns, actual, err
}

// WireGuardOverhead is what WireGuard adds to an inner IP packet: its
// data header (16 bytes) and the Poly1305 tag (16), plus the outer IPv4 and
// UDP headers (28). wg0's MTU is the link MTU minus this (1420 on a
// 1500-byte link, as wg-quick sets it).
const WireGuardOverhead = 16 + 16 + 28

// The tunnel's inner addresses.
var wgAddr = [2]netip.Addr{netip.MustParseAddr("10.215.0.1"), netip.MustParseAddr("10.215.0.2")}

const wgPort = 51820

// wgKeys returns a fresh Curve25519 key pair (private key clamped).
func wgKeys() (priv, pub [32]byte, err error) {
	if _, err = crand.Read(priv[:]); err != nil {
		return
	}
	priv[0] &= 248
	priv[31] = (priv[31] & 127) | 64
	p, err := curve25519.X25519(priv[:], curve25519.Basepoint)
	if err != nil {
		return
	}
	copy(pub[:], p)
	return priv, pub, nil
}

// WireGuard measures wireguard-go carrying UDP datagrams of the largest
// size wg0 takes from site A to site B over l for d (after a warm-up of
// d/5, which also covers the handshake).
func WireGuard(ctx context.Context, l *link, opts udp.Options, d time.Duration) (Result, error) {
	if l.ns[0] == "" {
		return Result{}, fmt.Errorf("%w: wireguard-go needs its TUN devices in two namespaces", errNoNetns)
	}
	wgMTU := l.mtu - WireGuardOverhead
	var priv, pub [2][32]byte
	for s := range 2 {
		var err error
		if priv[s], pub[s], err = wgKeys(); err != nil {
			return Result{}, err
		}
	}
	var devs []*device.Device
	defer func() {
		for _, dev := range devs {
			dev.Close()
		}
	}()
	for s := range 2 {
		o := 1 - s
		cfg := fmt.Sprintf("private_key=%s\nlisten_port=%d\nreplace_peers=true\npublic_key=%s\nendpoint=%s\nallowed_ip=%s/32\n",
			hex.EncodeToString(priv[s][:]), wgPort, hex.EncodeToString(pub[o][:]),
			netip.AddrPortFrom(l.addr[o], wgPort), wgAddr[o])
		var dev *device.Device
		err := l.do(s, func() error {
			// The TUN device, its netlink listener and the bind's sockets
			// are created on this thread: inside the site's namespace.
			td, err := tun.CreateTUN("wg0", wgMTU)
			if err != nil {
				return fmt.Errorf("wireguard-go: create tun: %w", err)
			}
			dev = device.NewDevice(td, nsBind{Bind: conn.NewDefaultBind(), l: l, site: s}, device.NewLogger(device.LogLevelSilent, ""))
			if err := dev.IpcSet(cfg); err != nil {
				dev.Close()
				return fmt.Errorf("wireguard-go: configure: %w", err)
			}
			if err := dev.Up(); err != nil {
				dev.Close()
				return fmt.Errorf("wireguard-go: up: %w", err)
			}
			return nil
		})
		if err != nil {
			return Result{}, err
		}
		devs = append(devs, dev)
		if err := ip("-n", l.ns[s], "addr", "add", wgAddr[s].String()+"/30", "dev", "wg0"); err != nil {
			return Result{}, err
		}
		if err := ip("-n", l.ns[s], "link", "set", "wg0", "up"); err != nil {
			return Result{}, err
		}
	}
	tx, rx, err := socketPair(l, opts, wgAddr)
	if err != nil {
		return Result{}, err
	}
	defer tx.Close()
	defer rx.Close()
	if err := wgHandshake(ctx, tx, rx); err != nil {
		return Result{}, err
	}
	r, err := blast(ctx, tx, rx, wgMTU-28, d, nil)
	return r, err
}

// wgHandshake sends a small datagram through the tunnel every 100 ms until
// one arrives: the devices have completed their handshake (wireguard-go
// resends a lost initiation only after 5 s, longer than a measurement; a
// run that started before it measured nothing at all).
func wgHandshake(ctx context.Context, tx, rx *udp.Conn) error {
	got := make(chan struct{})
	go func() {
		msgs := []udp.Message{{Buf: make([]byte, 1<<16)}}
		if _, err := rx.ReadBatch(msgs); err == nil {
			close(got)
		}
	}()
	ping := []udp.Message{{Buf: []byte("handshake"), N: 9, Addr: rx.LocalAddr()}}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for {
		_, _ = tx.WriteBatch(ping)
		select {
		case <-got:
			return nil
		case <-t.C:
		case <-deadline.C:
			return errors.New("wireguard-go: no handshake within 15 s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
