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

// TestTCPWindowLeavesOutBytesSentBefore: bytes a sender had sent when a
// window opened do not count in it, even when they arrive inside it (a
// window of data in flight at the start), and bytes sent inside it and
// delivered before its end do, exactly. The receiving kernel's count over
// the window, what the figure used to be, took the first ones too.
func TestTCPWindowLeavesOutBytesSentBefore(t *testing.T) {
	if err := tunemu.Check(); err != nil {
		t.Skip(err)
	}
	ctx := testCtx(t)
	// A long one-way delay keeps the first bytes in flight while the
	// window opens; no rate limit, no loss.
	te, err := tunemu.New(ctx, tunemu.Config{Seed: 1, Link: netem.LinkConfig{Delay: 400 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer te.Close()
	var read atomic.Uint64
	p, err := dialTCP(ctx, te, "cubic", 1, func(c net.Conn) { countReads(c, &read) })
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	const size = 8 << 10 // inside the initial window: sent at once
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	sentBytes := func() uint64 {
		in := tcpInfo(p.conns[0])
		return in.Bytes_sent - in.Bytes_retrans
	}
	// Open the window while the first bytes are in flight; on a machine
	// so slow that they arrived first, try again with new bytes.
	var end func() uint64
	var before, recv0 uint64
	for attempt := 0; ; attempt++ {
		if _, err := p.conns[0].Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		before += size
		waitFor("the sender to send", func() bool { return sentBytes() >= before })
		recv0 = p.received()
		end = p.window()
		if recv0 < before {
			break
		}
		if attempt == 5 {
			t.Fatalf("the data arrived before the window opened in %d attempts", attempt+1)
		}
	}
	waitFor("the bytes sent before the window", func() bool { return p.received() >= before })
	if got := end(); got != 0 {
		t.Errorf("counted %d bytes sent before the window (the kernel's count over it took %d)", got, p.received()-recv0)
	}
	if _, err := p.conns[0].Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	waitFor("the bytes sent inside the window", func() bool { return p.received() >= before+size })
	if got := end(); got != size {
		t.Errorf("counted %d bytes sent and delivered inside the window, want %d", got, size)
	}
}
