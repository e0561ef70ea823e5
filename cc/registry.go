package cc

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/mrgw/mrgw/units"
)

// Params are what a deployment or a simulation knows about the network a
// controller will run on. Every field is optional; zero means "unknown" and
// the controller falls back to a safe default.
type Params struct {
	// LineRate is the sender's line rate or configured maximum.
	// It scales the additive increase of the rate-based controllers and caps
	// their rate.
	LineRate units.BitRate
	// BaseRTT is the expected propagation round trip, used before the first
	// sample (to size the first windows).
	BaseRTT time.Duration
	// RefRTT is the reference round trip of the RTT-independent controllers:
	// they grow and back off per RefRTT of elapsed time, whatever their own
	// round trip (0: the controller's default).
	RefRTT time.Duration
	// DelayTarget is the queueing delay (smoothed RTT above the path's
	// minimum) read as congestion (0: the controller's default).
	DelayTarget time.Duration
	// InitialRate is where a sender without a receiver hint starts
	// (0: ten packets per BaseRTT, then a multiplicative search).
	InitialRate units.BitRate
	// WindowBytes is the per-path window of "fixed" (0: 256 KiB).
	WindowBytes int
	// Egress, if set, is the sending gateway's WAN capacity shared by all
	// the connections it sends on (max-min over their demand): the AIMD
	// controllers pace at no more than its level, as below a receiver's
	// hint. Nil: each connection is capped by LineRate alone.
	Egress *Egress
	// ClassicFallback makes the AIMD controllers answer ECN marks as CUBIC
	// does (a 30% cut per marked round trip, growth back no faster than
	// CUBIC's window curve) and keep FallbackHeadroom of their ceiling
	// free, so that a classic-ECN flow sharing a marking queue keeps its
	// share; it costs a lone connection whatever its own marks cost
	// (fallback.go, docs/CC.md §4).
	ClassicFallback bool
}

// Builder makes a Factory from Params.
type Builder func(p Params) Factory

var (
	regMu    sync.RWMutex
	registry = map[string]Builder{}
)

// Register makes a controller selectable by name (in configuration and in
// `mrgw-lab sim`). Subpackages register themselves from init, so a program that
// wants the long-RTT controllers imports cc/longrtt. Registering a name twice
// panics: names are a configuration interface.
func Register(name string, b Builder) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("cc: controller " + name + " registered twice")
	}
	registry[name] = b
}

// Lookup returns the Factory for a registered controller name.
func Lookup(name string, p Params) (Factory, error) {
	regMu.RLock()
	b, ok := registry[name]
	regMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("cc: unknown congestion controller %q (known: %v)", name, Names())
	}
	return b(p), nil
}

// Names lists the registered controllers, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func init() {
	Register("fixed", func(p Params) Factory {
		w := p.WindowBytes
		if w <= 0 {
			w = 256 << 10
		}
		return NewFixed(w, p.LineRate.Bytes())
	})
	Register("dc-aimd", func(p Params) Factory { return newDCAIMD(p) })
	Register("reno", func(p Params) Factory { return newReno(p) })
	Register("dcqcn", func(p Params) Factory { return newDCQCN(p) })
}
