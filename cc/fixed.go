package cc

import (
	"time"

	"github.com/mrgw/mrgw/units"
)

// fixedController is the simplest controller: a constant window per path and a constant
// pacing rate, capped by the receiver's hint. It does not react to ECN or
// loss. It is the reference the real controllers are measured against and the
// controller of the RoCEv2 baseline, whose network is assumed lossless.
type fixedController struct {
	window []int
	rate   float64 // configured pacing rate, bytes/s (0 = unpaced)
	hint   float64 // receiver's hint, bytes/s (0 = none)
}

// NewFixed returns a Factory for Fixed controllers with windowBytes per path
// and the given pacing rate in bytes per second (0 = unpaced).
func NewFixed(windowBytes int, rate units.ByteRate) Factory {
	return func(paths, _ int) Controller {
		w := make([]int, paths)
		for i := range w {
			w[i] = windowBytes
		}
		return &fixedController{window: w, rate: float64(rate)}
	}
}

// Name implements Controller.
func (f *fixedController) Name() string { return "fixed" }

// Window implements Controller.
func (f *fixedController) Window(path int) int { return f.window[path] }

// PacingRate implements Controller: the configured rate, never above the hint.
func (f *fixedController) PacingRate() units.ByteRate {
	switch {
	case f.hint > 0 && (f.rate == 0 || f.hint < f.rate):
		return units.ByteRate(min(f.hint, MaxRate))
	default:
		return units.ByteRate(min(f.rate, MaxRate))
	}
}

// OnSent implements Controller.
func (f *fixedController) OnSent(time.Duration, int, int) {}

// OnAck implements Controller.
func (f *fixedController) OnAck(time.Duration, int, AckSample) {}

// OnLoss implements Controller.
func (f *fixedController) OnLoss(time.Duration, int, int) {}

// SetLineRate changes the configured pacing rate (bytes per second; 0:
// unpaced) of a running controller, as a live reload does.
func (f *fixedController) SetLineRate(rate units.ByteRate) { f.rate = max(float64(rate), 0) }

// OnRateHint implements Controller.
func (f *fixedController) OnRateHint(_ time.Duration, hint units.ByteRate) { f.hint = float64(hint) }

// OnPathState implements Controller.
func (f *fixedController) OnPathState(time.Duration, int, bool) {}
