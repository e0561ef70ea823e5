//go:build linux

package tunemu

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"time"
)

// UDPListener returns a net.ListenUDP that opens its sockets inside site s's
// namespace (each call runs on a fresh thread there, as Do does). It is for
// code that opens UDP sockets on demand on goroutines of its own: an mrgw
// tunnel's endpoint takes it as udp.Options.ListenUDP and then opens every
// path socket in the namespace, so that its datagrams cross the emulated
// link like any kernel flow's. Calls after Close fail (the namespace is
// gone).
func (e *Emulator) UDPListener(s Site) func(network string, laddr *net.UDPAddr) (*net.UDPConn, error) {
	return func(network string, laddr *net.UDPAddr) (*net.UDPConn, error) {
		var c *net.UDPConn
		err := e.Do(s, func() (err error) {
			c, err = net.ListenUDP(network, laddr)
			return err
		})
		return c, err
	}
}

// DeviceStats are the kernel's counters of one site's TUN device.
type DeviceStats struct {
	// TxPackets are the packets the site's stack handed to the device;
	// TxDropped those the device dropped because this process had not
	// read them yet (its ring, txqueuelen packets, was full): losses
	// before the link model, caused by a reader that fell behind, which
	// the model's counters never see.
	TxPackets, TxDropped uint64
	// RxDropped are packets written into the device that the site's stack
	// dropped.
	RxDropped uint64
}

// DeviceStats reads site s's TUN device counters (`ip -s link`).
func (e *Emulator) DeviceStats(s Site) (DeviceStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "-j", "-s", "-n", e.Namespace(s), "link", "show", "dev", Device).Output()
	if err != nil {
		return DeviceStats{}, fmt.Errorf("tunemu: ip -s link in %s: %w", e.Namespace(s), err)
	}
	var links []struct {
		Stats64 struct {
			Rx struct {
				Dropped uint64 `json:"dropped"`
			} `json:"rx"`
			Tx struct {
				Packets uint64 `json:"packets"`
				Dropped uint64 `json:"dropped"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return DeviceStats{}, fmt.Errorf("tunemu: ip -s link in %s: unexpected output %q", e.Namespace(s), out)
	}
	st := links[0].Stats64
	return DeviceStats{TxPackets: st.Tx.Packets, TxDropped: st.Tx.Dropped, RxDropped: st.Rx.Dropped}, nil
}
