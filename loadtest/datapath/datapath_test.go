//go:build linux

package datapath

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mrgw/mrgw/internal/report"
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

// TestRun runs a short measurement and checks that every row carries its
// figures (no performance threshold: this machine is shared).
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := Run(ctx, Options{Duration: 300 * time.Millisecond, Plain: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 {
		t.Fatalf("%d rows, want 5 (raw, tunnel, plain, seal, open)", len(rows))
	}
	raw, tun := rows[0], rows[1]
	if raw.GoodputBps <= 0 || raw.CPUPerGbps <= 0 {
		t.Errorf("raw row incomplete: %+v", raw)
	}
	if tun.GoodputBps <= 0 || tun.RawUDPBps != raw.GoodputBps || tun.RatioToRawUDP != tun.GoodputBps/raw.GoodputBps {
		t.Errorf("tunnel row incomplete: %+v", tun)
	}
	if rows[3].NsPerPacket <= 0 || rows[4].NsPerPacket <= 0 {
		t.Errorf("AEAD rows incomplete: %+v %+v", rows[3], rows[4])
	}
	for _, r := range rows {
		t.Logf("%s: %.2f Gbit/s ratio %.2f cpu/Gbps %.2f allocs/pkt %.2f ns/pkt %.0f (%s)",
			r.System, r.GoodputBps/1e9, r.RatioToRawUDP, r.CPUPerGbps, r.AllocsPerPacket, r.NsPerPacket, r.Note)
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
	if _, err := RawUDP(ctx, udp.Options{}, 1504, time.Second); err == nil {
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

// TestReport prints the full report as JSON lines, as `mrgw loadtest
// datapath --json` does; it runs only when MRGW_DATAPATH_REPORT is set:
// MRGW_DATAPATH_REPORT=1 go test -run TestReport -v ./loadtest/datapath.
// MRGW_DATAPATH_MTU overrides the MTU.
func TestReport(t *testing.T) {
	if os.Getenv("MRGW_DATAPATH_REPORT") == "" {
		t.Skip("set MRGW_DATAPATH_REPORT=1 to measure")
	}
	o := Options{Plain: true}
	if m, err := strconv.Atoi(os.Getenv("MRGW_DATAPATH_MTU")); err == nil {
		o.MTU = m
	}
	rows, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := report.WriteJSON(os.Stdout, rows); err != nil {
		t.Fatal(err)
	}
}
