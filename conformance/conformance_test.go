package conformance

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestVectorsCopyIdentical keeps the suite's copy of the golden vectors
// byte-for-byte equal to metaroce's, so the two cannot drift.
func TestVectorsCopyIdentical(t *testing.T) {
	ours, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile("../metaroce/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ours, theirs) {
		t.Fatal("conformance/testdata/vectors.json differs from metaroce/testdata/vectors.json: copy it over after a deliberate format change")
	}
	if !bytes.Equal(goldenJSON, ours) {
		t.Fatal("embedded vectors differ from testdata/vectors.json")
	}
}

// TestSuiteCodecMatchesVectors checks the suite's own codec against every
// golden vector, and that a one-bit change to any vector is caught.
func TestSuiteCodecMatchesVectors(t *testing.T) {
	bad, n, err := checkVectors(goldenJSON)
	if err != nil || len(bad) > 0 {
		t.Fatalf("%v %v", err, bad)
	}
	if n < len(vectorTypes) {
		t.Fatalf("%d vectors", n)
	}
	// Flip one hex digit of the first vector: the check must notice.
	i := bytes.Index(goldenJSON, []byte(`"hex": "01`))
	if i < 0 {
		t.Fatal("no hex field")
	}
	mut := append([]byte(nil), goldenJSON...)
	mut[i+len(`"hex": "0`)] = '2' // version 1 -> 2
	bad, _, err = checkVectors(mut)
	if err != nil || len(bad) == 0 {
		t.Fatalf("mutated vector not caught: %v %v", err, bad)
	}
}

// TestSilentTargetFailsFast runs the suite against a port nobody answers on:
// every wire case fails, with a message naming the missing ACCEPT, and the
// run gives up on the target by its own bounded mechanism instead of
// waiting out every handshake. It reads no clock: the mechanism is a count
// (connect sends its INIT at most initTries times; once one connect heard
// nothing at all, the runner marks the target silent and later cases fail
// without sending), so the test counts what reaches the silent port.
func TestSilentTargetFailsFast(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	la := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	addr := netip.AddrPortFrom(la.Addr().Unmap(), la.Port()) // bound, read, never answered
	opts := Options{Timeout: 200 * time.Millisecond, Quiet: 50 * time.Millisecond}

	// Every case may send an INIT or two of its own (the handshake,
	// bad-INIT and version cases do), and one connect may wait out its
	// tries; a run that sends more than that to a target that never
	// answered is retrying it without end. The reader stops the test as
	// soon as the budget is spent rather than waiting for the run to end.
	budget := initTries + 2*len(CaseIDs())
	const marker = "end of run"
	var (
		mu      sync.Mutex
		total   int
		inits   = map[uint64]int{} // connect-shaped INITs per conn id
		spent   = make(chan struct{})
		drained = make(chan struct{})
	)
	go func() {
		b := make([]byte, 1<<16)
		for {
			n, err := pc.Read(b)
			if err != nil {
				return
			}
			if string(b[:n]) == marker {
				close(drained)
				continue
			}
			mu.Lock()
			total++
			if h, err := decodeHandshake(b[:n]); err == nil && h.Version == 1 && h.Type == tInit && int(h.MTU) == 1024 {
				inits[h.Conn]++
			}
			if total == budget+1 {
				close(spent)
			}
			mu.Unlock()
		}
	}()

	// Hang guard only, far above a normal run (about a second: a few
	// Timeouts), so that a runner stuck without sending fails with a
	// message rather than at the test binary's -timeout. Nothing here is
	// a performance bound: the assertions below are counts.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type outcome struct {
		res []Result
		err error
	}
	ran := make(chan outcome, 1)
	go func() {
		res, err := Run(ctx, addr, opts)
		ran <- outcome{res, err}
	}()
	var res []Result
	select {
	case o := <-ran:
		if o.err != nil {
			t.Fatalf("run against a silent target did not finish by itself: %v", o.err)
		}
		res = o.res
	case <-spent:
		cancel()
		t.Fatalf("the silent target received more than %d datagrams while the run went on: the runner keeps retrying it", budget)
	}

	// Wait until the reader has seen everything the run sent: the run's
	// writes were queued on the loopback socket before Run returned, so
	// a marker written now is read after all of them.
	mk, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(la))
	if err != nil {
		t.Fatal(err)
	}
	defer mk.Close()
	if _, err := mk.Write([]byte(marker)); err != nil {
		t.Fatal(err)
	}
	<-drained
	mu.Lock()
	defer mu.Unlock()

	if !Failed(res) || res[0].Verdict != Pass {
		t.Fatalf("want the vector case to pass and the rest to fail: %s", Summary(res))
	}
	for _, x := range res[1:] {
		if x.Verdict != Fail || (!strings.Contains(x.Detail, "ACCEPT") && !strings.Contains(x.Detail, "answered no INIT") && !strings.Contains(x.Detail, "VERSION")) {
			t.Errorf("%s: %s %q", x.Case, x.Verdict, x.Detail)
		}
	}
	// The mechanism: exactly one connect sent its INIT initTries times and
	// gave up; no connection id got more (no endless retry); every case
	// after that one failed on the silence verdict without trying again.
	waited := 0
	for id, n := range inits {
		if n > initTries {
			t.Errorf("conn %#x: %d INITs, more than connect's %d tries", id, n, initTries)
		}
		if n == initTries {
			waited++
		}
	}
	if waited != 1 {
		t.Errorf("%d connects waited out all %d tries, want 1 (the first; later ones must fail on the silence verdict): INITs per conn %v", waited, initTries, inits)
	}
	verdict := 0
	for _, x := range res {
		if strings.Contains(x.Detail, "answered no INIT earlier in this run") {
			verdict++
		}
	}
	// All but the cases that handshake on their own before connecting
	// (handshake, bad-INIT, version) and the vector case.
	if want := len(res) - 4; verdict < want {
		t.Errorf("%d cases failed on the silence verdict, want at least %d: %s", verdict, want, Summary(res))
	}
	t.Logf("%d cases, %d datagrams to the silent target (budget %d), INITs per conn %v", len(res), total, budget, inits)
}

func TestOutputFormats(t *testing.T) {
	res := []Result{{"a", "§1", Pass, "fine"}, {"b", "§3", Fail, "cum 3 | want 2"}, {"c", "§2", NA, "one path"}}
	var tb, js strings.Builder
	if err := WriteTable(&tb, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), `cum 3 \| want 2`) || !strings.Contains(tb.String(), "3 cases: 1 pass, 1 fail, 1 n/a") {
		t.Fatalf("table:\n%s", tb.String())
	}
	if err := WriteJSON(&js, res); err != nil {
		t.Fatal(err)
	}
	want := `{"case":"b","section":"§3","verdict":"fail","detail":"cum 3 | want 2"}`
	if lines := strings.Split(strings.TrimSpace(js.String()), "\n"); len(lines) != 3 || lines[1] != want {
		t.Fatalf("json rows:\n%s", js.String())
	}
}

func TestRunRejectsUnknownCase(t *testing.T) {
	_, err := Run(context.Background(), netip.MustParseAddrPort("127.0.0.1:9"), Options{Cases: []string{"no-such-case"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-case") {
		t.Fatalf("err = %v", err)
	}
}

// TestVectorsV2CopyIdentical keeps the suite's copy of the version-2 golden
// vectors equal to metaroce's, and its codec in agreement with them.
func TestVectorsV2CopyIdentical(t *testing.T) {
	ours, err := os.ReadFile("testdata/vectors_v2.json")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile("../metaroce/testdata/vectors_v2.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ours, theirs) || !bytes.Equal(goldenV2JSON, ours) {
		t.Fatal("conformance/testdata/vectors_v2.json differs from metaroce/testdata/vectors_v2.json: copy it over after a deliberate format change")
	}
	bad, n, err := checkVectorsV2(goldenV2JSON)
	if err != nil || len(bad) > 0 || n < 8 {
		t.Fatalf("%d vectors: %v %v", n, err, bad)
	}
	// A one-bit change to a version-2 DATA vector is caught.
	i := bytes.Index(goldenV2JSON, []byte(`"hex": "0201`))
	if i < 0 {
		t.Fatal("no version-2 DATA vector")
	}
	broken := append([]byte(nil), goldenV2JSON...)
	broken[i+len(`"hex": "0201`)+3] ^= 1
	if bad, _, _ := checkVectorsV2(broken); len(bad) == 0 {
		t.Fatal("a changed version-2 vector went unnoticed")
	}
}

// TestUnwrap32 checks the suite's own unwrapping against §12's examples.
func TestUnwrap32(t *testing.T) {
	for _, c := range [][3]uint64{{0, 5, 5}, {1<<32 - 2, 1, 1<<32 + 1}, {1<<32 + 1, 0xfffffffe, 1<<32 - 2}, {10, 3, 3}} {
		if got := unwrap32(c[0], uint32(c[1])); got != c[2] {
			t.Errorf("unwrap32(%#x, %#x) = %#x, want %#x", c[0], c[1], got, c[2])
		}
	}
}
