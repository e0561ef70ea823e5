package cc

import "time"

// FairShare is the receiver loop: it knows the receiver's inbound capacity and
// which senders have been active recently, and gives each an equal share of
// the capacity. The share is returned to each sender in every ack, so a sender
// starts at its share instead of searching for it, and an N-to-1 incast
// settles as soon as every sender has seen one ack.
//
// Senders are identified by an opaque key (the connection id). FairShare's
// memory is bounded by the number of senders seen within Idle.
type FairShare struct {
	// CapacityBps is the receiver's inbound capacity in bits per second.
	CapacityBps float64
	// Idle is how long a sender stays counted after its last packet.
	Idle time.Duration

	last   map[uint64]time.Duration
	active int
	swept  time.Duration
}

// NewFairShare returns a FairShare for capacityBps with senders forgotten after idle.
func NewFairShare(capacityBps float64, idle time.Duration) *FairShare {
	return &FairShare{CapacityBps: capacityBps, Idle: idle, last: make(map[uint64]time.Duration)}
}

// Observe records that sender was active at now.
func (f *FairShare) Observe(now time.Duration, sender uint64) {
	if _, ok := f.last[sender]; !ok {
		f.active++
	}
	f.last[sender] = now
	f.sweep(now)
}

// Forget removes sender at once (its connection closed).
func (f *FairShare) Forget(sender uint64) {
	if _, ok := f.last[sender]; ok {
		delete(f.last, sender)
		f.active--
	}
}

// Active returns the number of senders currently counted.
func (f *FairShare) Active() int { return f.active }

// ShareBytesPerSecond returns sender's share of the capacity in bytes per
// second (0 if no capacity is configured).
func (f *FairShare) ShareBytesPerSecond(now time.Duration) float64 {
	f.sweep(now)
	if f.CapacityBps <= 0 {
		return 0
	}
	n := f.active
	if n < 1 {
		n = 1
	}
	return f.CapacityBps / 8 / float64(n)
}

// sweep drops senders idle for longer than Idle, at most once per Idle/4 so
// that the cost stays amortised.
func (f *FairShare) sweep(now time.Duration) {
	if f.Idle <= 0 || now-f.swept < f.Idle/4 {
		return
	}
	f.swept = now
	for k, t := range f.last {
		if now-t > f.Idle {
			delete(f.last, k)
			f.active--
		}
	}
}
