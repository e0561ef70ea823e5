//go:build linux

package datapath

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/netio/seal"
	"github.com/mrgw/mrgw/netio/udp"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The control listener's QUIC transport (quic.ListenAddr: single
		// use) stops only once the connections it accepted have finished
		// closing, which happens asynchronously after Session.Close; on a
		// loaded machine that can outlast goleak's retries. The tunnel and
		// control packages' own tests check those goroutines strictly.
		goleak.IgnoreAnyFunction("github.com/quic-go/quic-go.(*Transport).listen"),
		goleak.IgnoreAnyFunction("github.com/quic-go/quic-go.(*Transport).runSendQueue"),
	)
}

// TestRun runs a short measurement of every system at both MTUs and
// checks that every row carries its figures. No performance threshold
// (this machine is shared): the one comparison is within the run and of
// CPU time, not wall clock (the floor, raw UDP plus an AEAD pass on each
// side, cannot cost less CPU per Gbit/s than raw UDP).
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rows, err := Run(ctx, Options{Duration: 300 * time.Millisecond})
	netns := true
	if errors.Is(err, errNoNetns) {
		t.Logf("without wireguard-go: %v", err)
		netns = false
	} else if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		t.Logf("%s %s: %.2f Gbit/s cpu/Gbps %.3f allocs/pkt %.3f ns/pkt %.0f (%s)",
			r.Variant, r.System, r.GoodputBps/1e9, r.CPUPerGbps, r.AllocsPerPacket, r.NsPerPacket, r.Note)
	}
	for _, mtu := range DefaultMTUs {
		got := map[string]float64{}
		for _, r := range rows {
			if r.Variant != mtuVariant(mtu) || r.NsPerPacket > 0 {
				continue
			}
			if r.GoodputBps <= 0 || r.CPUPerGbps <= 0 {
				t.Errorf("mtu %d: %s row incomplete: %+v", mtu, r.System, r)
			}
			got[r.System] = r.CPUPerGbps
			if r.System == SysMRGW && !strings.Contains(r.Note, "wire v2") {
				t.Errorf("mtu %d: mrgw did not run wire version 2: %s", mtu, r.Note)
			}
		}
		want := []string{SysRawUDP, SysFloor, SysMRGW}
		if netns {
			want = append(want, SysWireGuard)
		}
		for _, s := range want {
			if _, ok := got[s]; !ok {
				t.Errorf("mtu %d: no %s row", mtu, s)
			}
		}
		if raceEnabled {
			t.Logf("mtu %d: floor against raw UDP not compared under the race detector", mtu)
			continue
		}
		if got[SysFloor] < got[SysRawUDP] {
			t.Errorf("mtu %d: the floor (%.3f cores per Gbit/s) below raw UDP (%.3f)", mtu, got[SysFloor], got[SysRawUDP])
		}
	}
}

// TestPlaneFailure runs a short plane-failure measurement: no message may
// be lost, duplicated or failed, and the row carries its figures (the
// recovery itself is asserted by the tunnel's TestPlaneFailure; here it is
// only reported).
func TestPlaneFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := PlaneFailure(ctx, PlaneFailureOptions{Before: 500 * time.Millisecond, After: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.MessagesLost == nil || *r.MessagesLost != 0 || r.MessagesDuplicated == nil || *r.MessagesDuplicated != 0 || r.MessagesFailed != 0 {
		t.Errorf("messages lost %v, duplicated %v, failed %d: want none", r.MessagesLost, r.MessagesDuplicated, r.MessagesFailed)
	}
	if r.Messages == 0 || r.CapacityBps <= 0 || r.Fault == "" || r.Note == "" {
		t.Errorf("row incomplete: %+v", r)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RawUDP(ctx, loopback(1500), udp.Options{}, time.Second); err == nil {
		t.Fatal("a cancelled measurement returned no error")
	}
}

func TestAEADCost(t *testing.T) {
	s, o, err := AEADCost(seal.AES128GCM, 1476, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if s <= 0 || o <= 0 {
		t.Fatalf("seal %v ns, open %v ns", s, o)
	}
}
