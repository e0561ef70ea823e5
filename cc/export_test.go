package cc

import "time"

// What the external tests of this package (package cc_test, which link
// cc/longrtt and so cannot be in package cc) read of its internals.

const (
	FallbackBeta   = fallbackBeta
	FallbackC      = fallbackC
	FallbackMemory = fallbackMemory
)

// FallbackActive reports whether the classic fallback holds the rate.
func (a *AIMD) FallbackActive() bool { return a.fallbackActive() }

// PathRate, PathAlpha, PathLossFloor and PathUsable are one path's rate
// (bytes/s), running marked fraction, running loss floor and state.
func (a *AIMD) PathRate(path int) float64      { return a.pathRate(path) }
func (a *AIMD) PathAlpha(path int) float64     { return a.pathAlpha(path) }
func (a *AIMD) PathLossFloor(path int) float64 { return a.pathLossFloor(path) }
func (a *AIMD) PathUsable(path int) bool       { return a.paths[path].usable }

// Searching reports whether the connection still searches (doubles per
// round trip); Steering whether the delay equilibrium sets its rate.
func (a *AIMD) Searching() bool { return a.searching }
func (a *AIMD) Steering() bool  { return a.steering() }

// QueueDelay is the connection's rate-weighted queueing delay.
func (a *AIMD) QueueDelay() time.Duration { return a.queueDelay() }

// AppLimited reports whether the last measured round used less than
// UseFraction of the rate.
func (a *AIMD) AppLimited() bool { return a.appLimited() }
