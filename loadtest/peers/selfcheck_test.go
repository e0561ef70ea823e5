//go:build linux

package peers

import (
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrgw/mrgw/loadtest/tunemu"
	"github.com/mrgw/mrgw/netem"
)

// TestTCPGoodputCountsKernelBytes: the TCP figure counts what the
// receiving kernel took in order, even while the reading application is
// held off the CPU (here: it does not read at all), so that a reader
// starved at one edge of the window cannot carry a socket buffer of bytes
// into it. The readers' own count, what the figure used to be, saw none.
func TestTCPGoodputCountsKernelBytes(t *testing.T) {
	if err := tunemu.Check(); err != nil {
		t.Skip(err)
	}
	ctx := testCtx(t)
	te, err := tunemu.New(ctx, tunemu.Config{Seed: 1, Link: netem.LinkConfig{Rate: 100e6, Delay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer te.Close()
	var read atomic.Uint64
	release := make(chan struct{})
	p, err := dialTCP(ctx, te, "cubic", 1, func(c net.Conn) {
		<-release // an application that does not get to read
		countReads(c, &read)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	defer close(release)
	const size = 48 << 10 // inside the window an unread socket advertises (tcp_rmem 128 KiB)
	if _, err := p.conns[0].Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	for p.received() < size {
		if ctx.Err() != nil {
			t.Fatalf("the receiving kernel took %d of %d bytes", p.received(), size)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if read.Load() != 0 {
		t.Fatalf("the application read %d bytes", read.Load())
	}
	if got := p.received(); got != size {
		t.Errorf("counted %d bytes, sent %d", got, size)
	}
}

// TestRowEmulatorCheck: a row carries the self-check of its window as
// emulator_ok and emulator_check, and a failed check is named in its note.
func TestRowEmulatorCheck(t *testing.T) {
	l := Link{Planes: 1, RateBps: 200e6, RTT: 100 * time.Millisecond}
	bad := tunemu.Verdict{OK: false, Why: []string{"released late: p99 4ms > 1ms"}, LateP50: 8 * time.Microsecond,
		LateP99: 4 * time.Millisecond, LateMax: 30 * time.Millisecond, WriterBusy: 0.5, Packets: 1000}
	rw := row("peers-loss-sweep", Peer{TCPBBR, 8}, l, Result{GoodputBps: 1e8, Emulator: EmuTUN, Check: &bad})
	b, err := json.Marshal(rw)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	ck, _ := m["emulator_check"].(map[string]any)
	if m["emulator_ok"] != false || ck == nil || ck["late_p99_us"] != 4000.0 || ck["writer_busy"] != 0.5 || ck["packets"] != 1000.0 {
		t.Fatalf("row JSON %s", b)
	}
	if !strings.Contains(rw.Note, "emulator not ok: released late") {
		t.Errorf("note %q", rw.Note)
	}
	good := tunemu.Verdict{OK: true}
	rw = row("peers-loss-sweep", Peer{TCPBBR, 8}, l, Result{GoodputBps: 1e8, Emulator: EmuTUN, Check: &good})
	if rw.EmulatorOK == nil || !*rw.EmulatorOK || rw.Note != "" {
		t.Errorf("good check: ok %v note %q", rw.EmulatorOK, rw.Note)
	}
	rw = row("peers-loss-sweep", Peer{KCP, 0}, l, Result{GoodputBps: 1e8, Emulator: EmuUDP})
	if b, _ := json.Marshal(rw); strings.Contains(string(b), "emulator_ok") {
		t.Errorf("a row without a self-check has emulator_ok: %s", b)
	}
}
