package netem

import (
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/mrgw/mrgw/internal/ecn"
)

// This file exports what another emulator needs to give pairs of
// endpoints their own propagation delay exactly as Config.PairDelays does
// here (loadtest/tunemu's per-flow delays): the validation of a list of
// pair delays and the model's admission with a pair's own wire.

// ValidatePairDelays reports the first entry of pds that Config.PairDelays
// would refuse: more than MaxPairDelays entries, an address that is not
// IPv4, a delay outside [0, MaxDelay], a pair given twice.
func ValidatePairDelays(pds []PairDelay) error {
	if len(pds) > MaxPairDelays {
		return invalid("%d pair delays (at most %d)", len(pds), MaxPairDelays)
	}
	seen := map[[2]netip.Addr]bool{}
	for i, p := range pds {
		k := [2]netip.Addr{p.A.Unmap(), p.B.Unmap()}
		switch {
		case !k[0].Is4() || !k[1].Is4():
			return invalid("pair delay %d: %v-%v is not a pair of IPv4 addresses", i, p.A, p.B)
		case p.Delay < 0 || p.Delay > MaxDelay:
			return invalid("pair delay %d: delay %v outside [0, %v]", i, p.Delay, MaxDelay)
		case seen[k]:
			return invalid("pair delay %d: %v-%v given twice", i, p.A, p.B)
		}
		seen[k] = true
	}
	return nil
}

// AdmitVia is Admit for a datagram that shares the link's queue and
// serialiser but then travels its own wire: propagation delay instead of
// the link's Delay, delivery never before *last (the previous delivery on
// the same wire and link; updated), so each wire keeps its own order.
func (l *Link) AdmitVia(now time.Duration, size int, cp ecn.Codepoint, full bool, rng *rand.Rand, delay time.Duration, last *time.Duration) TraceEvent {
	var ev TraceEvent
	ev.Verdict = l.l.admitVia(now, size, cp, full, rng, &ev, delay, last)
	return ev
}
