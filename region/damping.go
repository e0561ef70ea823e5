package region

import (
	"fmt"
	"math"
	"time"
)

// Flap damping at the source (docs/GATEWAY.md, "Flap damping"), after BGP
// route-flap damping (RFC 2439): every time one of this gateway's own
// verdicts (on its own plane, or on its paths to a peer over a plane)
// goes from up to down or probing, its penalty grows by one; the penalty
// halves every HalfLife. A down always goes on the wire at once (safety
// first: the others must stop using a plane that fails). An up whose
// penalty is Suppress or more is held back: the wire keeps saying down,
// renewed as any down is, and the flaps that follow cost nothing on the
// wire, since what the others hold does not change. The up goes out when
// the penalty has decayed below Reuse, if the verdict is still up then.
// A plane that flaps every few seconds thus costs two messages per hold,
// not two per flap; a plane that fails once (or twice, more than 4.8 s
// apart at the defaults) is never held.
//
// The penalty is capped so that no up is held longer than MaxHold after
// the last flap. State: one entry per verdict this gateway publishes that
// has flapped lately (bounded by its own verdict table), dropped when its
// penalty has decayed to nothing.

// DampingConfig tunes flap damping; zero fields take the defaults, and a
// negative or otherwise invalid one is an error of [New] naming the field
// ([DampingConfig.Validate]).
type DampingConfig struct {
	// Off turns damping off: every transition goes on the wire.
	Off bool
	// HalfLife of the penalty (default 15 s).
	HalfLife time.Duration
	// Suppress: an up is held while the penalty is at least this
	// (default 1.8: a plane flapping every 6 s, down 3 s and up 3 s, is
	// held from its third up; two downs within 4.8 s hold the next up; a
	// single failure never is).
	Suppress float64
	// Reuse: a held up goes out once the penalty is below this (default
	// 0.75: 19 s after the last flap from the suppress threshold).
	Reuse float64
	// MaxHold: the longest an up is held after the last flap (default
	// 60 s); it caps the penalty at Reuse·2^(MaxHold/HalfLife).
	MaxHold time.Duration
}

// Damping defaults.
const (
	DefaultDampingHalfLife = 15 * time.Second
	DefaultDampingSuppress = 1.8
	DefaultDampingReuse    = 0.75
	DefaultDampingMaxHold  = 60 * time.Second
)

// Validate reports the first invalid field, by name and why: a negative
// duration or threshold (zero takes the default: a negative one used to
// be taken for zero without a word), a threshold that is not a finite
// number, Reuse not below Suppress (a held up would never come back by
// decay alone), and a MaxHold shorter than the penalty takes to decay
// from Suppress to Reuse (the cap could not keep its promise). The
// checks apply to the values with the defaults filled in, so that
// Reuse 1 alone is compared with the default Suppress; they apply with
// Off too (a configuration that turns damping back on must be valid).
func (d DampingConfig) Validate() error {
	switch {
	case d.HalfLife < 0:
		return fmt.Errorf("FlapDamping.HalfLife %s: must not be negative (0 takes the default %s)", d.HalfLife, DefaultDampingHalfLife)
	case d.MaxHold < 0:
		return fmt.Errorf("FlapDamping.MaxHold %s: must not be negative (0 takes the default %s)", d.MaxHold, DefaultDampingMaxHold)
	case math.IsNaN(d.Suppress) || math.IsInf(d.Suppress, 0) || d.Suppress < 0:
		return fmt.Errorf("FlapDamping.Suppress %v: must be a finite number, not negative (0 takes the default %v)", d.Suppress, DefaultDampingSuppress)
	case math.IsNaN(d.Reuse) || math.IsInf(d.Reuse, 0) || d.Reuse < 0:
		return fmt.Errorf("FlapDamping.Reuse %v: must be a finite number, not negative (0 takes the default %v)", d.Reuse, DefaultDampingReuse)
	}
	e := d.withDefaults()
	if d.Reuse > 0 && d.Reuse >= e.Suppress {
		return fmt.Errorf("FlapDamping.Reuse %v: must be below Suppress %v (a held up goes out when the penalty decays below Reuse)", d.Reuse, e.Suppress)
	}
	if decay := time.Duration(math.Log2(e.Suppress/e.Reuse) * float64(e.HalfLife)); e.MaxHold < decay {
		return fmt.Errorf("FlapDamping.MaxHold %s: shorter than the %s the penalty takes to decay from Suppress %v to Reuse %v (HalfLife %s), so no hold could be kept within it",
			e.MaxHold, decay.Round(time.Millisecond), e.Suppress, e.Reuse, e.HalfLife)
	}
	return nil
}

// withDefaults fills in the zero fields; a Reuse left at zero is the
// default, or half of a Suppress set below it.
func (d DampingConfig) withDefaults() DampingConfig {
	if d.HalfLife <= 0 {
		d.HalfLife = DefaultDampingHalfLife
	}
	if d.Suppress <= 0 {
		d.Suppress = DefaultDampingSuppress
	}
	if d.Reuse <= 0 || d.Reuse >= d.Suppress {
		d.Reuse = min(DefaultDampingReuse, d.Suppress/2)
	}
	if d.MaxHold <= 0 {
		d.MaxHold = DefaultDampingMaxHold
	}
	return d
}

// ceiling is the largest penalty: it decays to Reuse in MaxHold.
func (d DampingConfig) ceiling() float64 {
	return max(d.Reuse*math.Exp2(d.MaxHold.Seconds()/d.HalfLife.Seconds()), d.Suppress)
}

type dampEntry struct {
	penalty float64   // as of at
	at      time.Time // when penalty was last brought up to date
	held    bool      // an up is held back
}

// damper keeps the penalties of this gateway's own verdicts (under
// core.mu). Keys: healthKey{peer, plane}; {self, plane} for the verdict
// on its own plane.
type damper struct {
	cfg     DampingConfig
	entries map[healthKey]*dampEntry
	// Counters: ups held back, holds released (the up went
	// out), downs that needed no message because their up had been held.
	held, released, absorbed uint64
}

func newDamper(cfg DampingConfig) damper {
	return damper{cfg: cfg.withDefaults(), entries: map[healthKey]*dampEntry{}}
}

// decay brings e's penalty up to now.
func (d *damper) decay(e *dampEntry, now time.Time) {
	if dt := now.Sub(e.at); dt > 0 {
		e.penalty *= math.Exp2(-dt.Seconds() / d.cfg.HalfLife.Seconds())
		e.at = now
	}
}

// flap records a transition of k from up to down or probing.
func (d *damper) flap(k healthKey, now time.Time) {
	if d.cfg.Off {
		return
	}
	e := d.entries[k]
	if e == nil {
		e = &dampEntry{at: now}
		d.entries[k] = e
	}
	d.decay(e, now)
	e.penalty = min(e.penalty+1, d.cfg.ceiling())
}

// holdUp reports whether an up of k must be held back now, and marks it
// held if so (hysteresis: held from Suppress until below Reuse).
func (d *damper) holdUp(k healthKey, now time.Time) bool {
	e := d.entries[k]
	if d.cfg.Off || e == nil {
		return false
	}
	d.decay(e, now)
	hold := e.penalty >= d.cfg.Suppress || (e.held && e.penalty >= d.cfg.Reuse)
	if hold && !e.held {
		d.held++
	}
	e.held = hold
	return hold
}

// isHeld reports whether k's up is held back.
func (d *damper) isHeld(k healthKey) bool {
	e := d.entries[k]
	return e != nil && e.held
}

// due returns the keys whose held up may go out now (their penalty is
// below Reuse) and clears their hold.
func (d *damper) due(now time.Time) []healthKey {
	var out []healthKey
	for k, e := range d.entries {
		if !e.held {
			continue
		}
		d.decay(e, now)
		if e.penalty < d.cfg.Reuse {
			e.held = false
			d.released++
			out = append(out, k)
		}
	}
	return out
}

// unhold clears k's hold without an up going out (the verdict went down
// again, or it is gone).
func (d *damper) unhold(k healthKey) {
	if e := d.entries[k]; e != nil {
		e.held = false
	}
}

// forgetBelow is the penalty under which an entry that holds nothing is
// forgotten: it could not reach Suppress before another flap anyway.
const forgetBelow = 0.01

// prune drops the entries that hold nothing and have decayed to nothing,
// and those of keys keep says are gone.
func (d *damper) prune(now time.Time, keep func(healthKey) bool) {
	for k, e := range d.entries {
		d.decay(e, now)
		if !keep(k) || (!e.held && e.penalty < forgetBelow) {
			delete(d.entries, k)
		}
	}
}

func (d *damper) heldCount() int {
	n := 0
	for _, e := range d.entries {
		if e.held {
			n++
		}
	}
	return n
}
