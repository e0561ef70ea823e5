package scenario

import (
	"testing"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/units"
)

// TestCCCoexistence: mrgw's WAN controllers must leave room for classic
// traffic (the simulator half). On the 200 Mbit/s, 50 ms
// bottleneck of `mrgw-lab sim coexistence`, with drop-tail (the classic
// flow then reacts to loss only, as a non-ECN flow) and with CE marking
// above 0.1 BDP (a classic-ECN flow), each with the receiver loop off and
// on, the classic flow must keep at least 0.4 of an equal share of the link
// against each long-RTT controller, and each controller alone must still
// fill at least 0.95 of the link. Fractions of the link are of its payload
// capacity at this MTU (the header ceiling, 0.949 of the wire rate at MTU
// 1400). Before markedShare (cc/aimd_equilibrium.go) the classic-ECN flow held 0.002
// of the pair; with it 0.271 (htcp) and 0.233 (scalable) with the receiver
// loop off. With hints on, the receiver hint's half-gap rise lifted the
// connection back while it yielded (the trace of docs/CC.md §7 on real
// sockets): with half-gap rises the classic-ECN flow kept 0.069 of the
// pair with hints on (0.14 of an equal share); with the rise taking 1/32 of
// the gap while marks are remembered (cc.AIMD.setHint), 0.271 (htcp).
func TestCCCoexistence(t *testing.T) {
	t.Parallel()
	rows, err := Coexistence(Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	logRows(t, rows)
	alone, _ := checkCoexistRows(t, rows, 0.95, 0.8)
	if want := len(LongRTTControllers) * 4; alone != want {
		t.Errorf("%d rows of a controller alone, want %d", alone, want)
	}
}

// checkCoexistRows checks coexistence rows against the coexistence target: a
// controller alone keeps at least aloneLink of the link (the payload
// ceiling), and in every pair with the classic flow (the classic pair
// itself skipped) that flow keeps at least 0.4 of an equal share while the
// pair keeps at least pairLink of the link busy. It returns the numbers of
// rows alone and of pairs checked.
func checkCoexistRows(t *testing.T, rows []report.Row, aloneLink, pairLink float64) (alone, pairs int) {
	t.Helper()
	ceiling := float64(CoexistMTU) / float64(CoexistMTU+metaroce.DataHeaderLen)
	for _, r := range rows {
		if r.CC == CoexistClassic+"+"+CoexistClassic {
			continue
		}
		if r.Note == CoexistAlone {
			alone++
			if link := r.Fraction / ceiling; link < aloneLink {
				t.Errorf("%s alone, %s: %.3f of the link, want >= %.3f", r.CC, r.Variant, link, aloneLink)
			}
			continue
		}
		pairs++
		if len(r.Shares) != 2 {
			t.Fatalf("%s, %s: shares %v, want two flows", r.CC, r.Variant, r.Shares)
		}
		classic := r.Shares[1] * r.Fraction / ceiling
		if classic < 0.4*0.5 {
			t.Errorf("%s, %s: classic flow keeps %.3f of the link (%.3f of an equal share), want >= 0.4 of an equal share",
				r.CC, r.Variant, classic, classic/0.5)
		}
		if r.Fraction/ceiling < pairLink {
			t.Errorf("%s, %s: link %.3f busy, want >= %.2f", r.CC, r.Variant, r.Fraction/ceiling, pairLink)
		}
	}
	return alone, pairs
}

// StallFlows stalls only the senders it marks: the coexistence-stalls
// scenario's classic flow and receiver must run as an unstalled kernel
// would. A stalled pacer forfeits send time (PacingForfeitNs); one that
// never stalls forfeits none.
func TestStallFlowsStallOnlyThoseFlows(t *testing.T) {
	rate, rtt := 50e6, 20*time.Millisecond
	bdp := units.BitRate(rate).Bytes().BytesIn(rtt)
	s := Setup{Planes: 1, RateBps: rate, RTT: rtt, Flows: 2, Paths: 4, MTU: CoexistMTU, QueueBytes: int(bdp),
		Duration: time.Second, Warmup: 200 * time.Millisecond, Seed: 3,
		HostStalls: CoexistStalls, StallFlows: []bool{true, false}}
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	stalled, free := r.Senders[0].Stats.PacingForfeitNs, r.Senders[1].Stats.PacingForfeitNs
	t.Logf("pacing forfeit: stalled flow %v, unstalled flow %v", time.Duration(stalled), time.Duration(free))
	if stalled == 0 || free != 0 {
		t.Errorf("pacing forfeit %v on the stalled flow, %v on the other: want some, none", time.Duration(stalled), time.Duration(free))
	}
}

// TestCCCoexistenceClassicFallback: with the classic fallback on
// (cc.Params.ClassicFallback), the classic-ECN flow keeps at least the
// coexistence target's 0.4 of an equal share with the receiver loop off
// and on, the pair keeps at least three quarters of the link busy (neither
// flow leaves it idle; cutting by 30% per marked round trip, and keeping
// the headroom, idles more of it than a classic pair does), and alone the
// controller loses no more than the fallback's headroom.
func TestCCCoexistenceClassicFallback(t *testing.T) {
	rows, err := CoexistenceFallback(Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	logRows(t, rows)
	alone, pairs := checkCoexistRows(t, rows, 0.95*(1-cc.FallbackHeadroom), 0.75)
	if want := len(LongRTTControllers) * 2; alone != want || pairs != want {
		t.Errorf("%d rows alone and %d pairs, want %d of each", alone, pairs, want)
	}
}
