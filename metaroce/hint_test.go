package metaroce

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
)

// hintedRate connects A to B (B's receive capacity 8 Mbit/s), sends one
// message and returns the pacing rate of A's fixed, unpaced controller,
// which is the rate hint B sent (0 if none); then, if raise, B's capacity
// goes to 16 Mbit/s live and a second message brings the new hint.
func hintedRate(t *testing.T, noHint, raise bool, scale float64) float64 {
	t.Helper()
	cfgA := Config{Paths: 2, CC: cc.NewFixed(1<<20, 0), Seed: 1}
	cfgB := Config{Paths: 2, CC: cc.NewFixed(1<<20, 0), Seed: 2, ReceiveCapacity: 8e6,
		AcceptOptions: func(PeerID) ConnOptions { return ConnOptions{NoRateHint: noHint, RateHintScale: scale} }}
	n := newTestNet(t, cfgA, cfgB, 2, 1)
	c, err := n.eps[0].Connect(n.now, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag := uint64(0)
	send := func() {
		t.Helper()
		seq, err := c.Send(n.now, 1, tag, make([]byte, 3000))
		tag++
		if err != nil {
			t.Fatal(err)
		}
		if !n.run(time.Second, func() bool { return c.Queued() == 0 }) {
			t.Fatalf("message %d not complete", seq)
		}
	}
	if !n.run(time.Second, func() bool { return c.Established() }) {
		t.Fatal("not established")
	}
	for _, ev := range drain(n.eps[1]) {
		if ev.Kind == EventConnected {
			for tag := range uint64(2) {
				if err := ev.Conn.PostRecv(tag, make([]byte, 8192)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	send()
	if raise {
		n.eps[1].SetReceiveCapacity(16e6)
		send()
	}
	return float64(c.Controller().PacingRate())
}

func TestReceiveCapacityHintsLiveScaledAndNone(t *testing.T) {
	if got := hintedRate(t, false, false, 0); got != 1e6 {
		t.Fatalf("hint %v B/s, want the whole 8 Mbit/s = 1e6 B/s for the only sender", got)
	}
	if got := hintedRate(t, false, true, 0); got != 2e6 {
		t.Fatalf("hint %v B/s after SetReceiveCapacity(16e6), want 2e6", got)
	}
	if got := hintedRate(t, true, false, 0); got != 0 {
		t.Fatalf("a NoRateHint connection was hinted %v B/s", got)
	}
	if got := hintedRate(t, false, false, 3); got != 3e6 {
		t.Fatalf("hint %v B/s with RateHintScale 3, want 3e6", got)
	}
}
