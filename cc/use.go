package cc

import (
	"math"
	"time"

	"github.com/mrgw/mrgw/units"
)

// MaxRate bounds every rate a controller in this package holds or paces at,
// in bytes per second (1 Pbit/s). It is far above any link, and it keeps a
// rate times any round trip a time.Duration can hold below int64's range
// when the product is taken in float64 and converted (windowBytes), so a
// rate that a driver or a receiver's hint makes absurd stays a number.
const MaxRate = 1.25e14

// MaxWindow bounds every window a controller in this package returns, in
// bytes (64 TiB): far above any bandwidth-delay product, far below the
// range of int, so that a caller may add a packet size or an in-flight
// count to it without overflow.
const MaxWindow = 1 << 46

// windowBytes converts a window computed in float64 to bytes, never below
// floor and never above MaxWindow. NaN gives the floor. A plain int(w)
// overflows above 2^63 to the smallest int (a rate of 1e22 bytes/s over a
// millisecond), which the floor then turned into a 4-packet window while
// pacing was unlimited.
func windowBytes(w float64, floor int) int {
	switch {
	case math.IsNaN(w) || w <= float64(floor):
		return floor
	case w >= MaxWindow:
		return max(MaxWindow, floor)
	default:
		return int(w)
	}
}

// MaxRTT bounds the round trips a controller in this package accepts from an
// ack (smoothed, minimum and sample): an hour is no network's round trip,
// and the bound keeps every small multiple of a round trip, and every
// deadline one round trip ahead, inside time.Duration's range.
const MaxRTT = time.Hour

// clampRTTs bounds the round trips of an ack sample by MaxRTT.
func clampRTTs(s *AckSample) {
	s.RTT, s.SRTT, s.MinRTT = min(s.RTT, MaxRTT), min(s.SRTT, MaxRTT), min(s.MinRTT, MaxRTT)
}

// useFraction is the part of its allowance a sender must deliver in a round
// to count as using its rate: RFC 7661 validates a window when the bytes
// acked over the last round trip (pipeACK) are at least half of it.
const useFraction = 0.5

// useMeter tells whether a sender uses the rate (or window) it has, after
// RFC 7661 ("Updating TCP to Support Rate-Limited Traffic"): a controller
// must not grow what the sender does not use, or the rate of an
// application-limited sender (one that has less to send, or is held back
// by anything but the controller) grows without bound and means nothing
// when the application next has data. Without a line rate or a receiver's
// hint nothing else bounds it: after one 1 GiB transfer the pacing rate
// read 1e22 and 1e47 bytes/s.
//
// It needs nothing but what every driver already reports. The allowance is
// the controller's own rate integrated over time; the use is the bytes
// reported by OnSent in the same round, so the verdict has no lag. A driver
// that never reports a send (unit tests that only ack) is measured by its
// acked bytes instead: what is acked in a round left about one round
// earlier, so the round's delivery rate is compared with the previous
// round's allowance rate (a search that doubles per round trip delivers in
// each round what the previous one allowed and must not read as idle).
// A round is at least the connection's smoothed RTT and ends on an ack.
type useMeter struct {
	started     bool
	last, start time.Duration
	allow       float64 // bytes the rate allowed in this round
	sent, acked float64 // bytes sent and acked in this round
	sentSeen    bool    // the driver reports sends
	prevRate    float64 // allowance of the last closed round, bytes/s (0: none closed)
	// limited: the last closed round used less than useFraction of its
	// allowance.
	limited      bool
	bestDelivery float64 // highest delivery rate of a closed round, bytes/s
}

// advance integrates the allowance up to now at rate, the rate (bytes per
// second) that held since the last call. Call it before the rate changes.
func (u *useMeter) advance(now time.Duration, r units.ByteRate) {
	rate := float64(r)
	if !u.started {
		u.started, u.last, u.start = true, now, now
		return
	}
	if dt := now - u.last; dt > 0 {
		if rate > 0 && !math.IsInf(rate, 0) {
			u.allow += rate * dt.Seconds()
		}
		u.last = now
	}
}

// onSent counts bytes handed to the network (after advance).
func (u *useMeter) onSent(bytes int) {
	u.sent += float64(bytes)
	u.sentSeen = true
}

// onAck counts bytes acked at now (after advance) and closes the round once
// it has lasted round (the connection's smoothed RTT).
func (u *useMeter) onAck(now time.Duration, bytes int, round time.Duration) {
	u.acked += float64(bytes)
	d := now - u.start
	if d < round || d <= 0 {
		return
	}
	rate := u.allow / d.Seconds()
	delivery := u.acked / d.Seconds()
	switch {
	case u.sentSeen:
		u.limited = u.allow > 0 && u.sent < useFraction*u.allow
	default:
		u.limited = u.prevRate > 0 && delivery < useFraction*u.prevRate
	}
	u.bestDelivery = max(u.bestDelivery, delivery)
	u.prevRate, u.allow, u.sent, u.acked = rate, 0, 0, 0
	u.start = now
}
