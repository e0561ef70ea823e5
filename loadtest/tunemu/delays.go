//go:build linux

package tunemu

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/mrgw/mrgw/internal/ecn"
	"github.com/mrgw/mrgw/netem"
)

// Per-flow delays: flows at different distances behind one shared
// bottleneck, as netem.Config.PairDelays gives the UDP relay. Site A gets
// Config.ExtraAddrsA more addresses (ExtraAddrA), and a pair of addresses
// (site A's, site B's) listed in Config.PairDelays travels with its own
// one-way delay in both directions instead of the planes' Delay. The
// planes' queues and rates stay shared; only propagation differs, and
// each pair's packets keep their order on their own wire (the same model
// as emu's: netem.Link.AdmitVia).

// MaxExtraAddrsA bounds Config.ExtraAddrsA.
const MaxExtraAddrsA = 32

// extraNet holds site A's extra addresses: 10.213.1.1 onwards.
var extraNet = netip.MustParsePrefix("10.213.1.0/24")

// ExtraAddrA returns site A's extra address i (0-based): 10.213.1.(i+1).
func ExtraAddrA(i int) netip.Addr {
	b := extraNet.Addr().As4()
	b[3] = byte(i + 1)
	return netip.AddrFrom4(b)
}

// AddrsA returns every address of site A: AddrA, then the extra ones.
func (e *Emulator) AddrsA() []netip.Addr {
	as := []netip.Addr{AddrA}
	for i := range e.cfg.ExtraAddrsA {
		as = append(as, ExtraAddrA(i))
	}
	return as
}

// validateDelays checks ExtraAddrsA and PairDelays (emu's rules, and
// every pair must join an address of site A to site B's).
func (c *Config) validateDelays() error {
	if c.ExtraAddrsA < 0 || c.ExtraAddrsA > MaxExtraAddrsA {
		return fmt.Errorf("%w: %d extra addresses at site A outside [0, %d]", netem.ErrInvalid, c.ExtraAddrsA, MaxExtraAddrsA)
	}
	if err := netem.ValidatePairDelays(c.PairDelays); err != nil {
		return err
	}
	for i, p := range c.PairDelays {
		a, b := p.A.Unmap(), p.B.Unmap()
		own := a == AddrA
		if extraNet.Contains(a) {
			n := int(a.As4()[3])
			own = n >= 1 && n <= c.ExtraAddrsA
		}
		if !own || b != AddrB {
			return fmt.Errorf("%w: pair delay %d: %v-%v is not (an address of site A, %v)", netem.ErrInvalid, i, p.A, p.B, AddrB)
		}
	}
	return nil
}

// pairIndex maps (site A address, site B address) to its wire: 1 + its
// index in Config.PairDelays.
func (c *Config) pairIndex() map[[2]netip.Addr]int {
	m := make(map[[2]netip.Addr]int, len(c.PairDelays))
	for i, p := range c.PairDelays {
		m[[2]netip.Addr{p.A.Unmap(), p.B.Unmap()}] = i + 1
	}
	return m
}

// extraAddrCmds are the `ip` commands that give site s its extra
// addresses (site A) or the route to them (site B).
func (e *Emulator) extraAddrCmds(s Site) [][]string {
	if e.cfg.ExtraAddrsA == 0 {
		return nil
	}
	if s == SiteB {
		return [][]string{{"-n", e.ns[s], "route", "add", extraNet.String(), "dev", Device}}
	}
	var cmds [][]string
	for i := range e.cfg.ExtraAddrsA {
		cmds = append(cmds, []string{"-n", e.ns[s], "addr", "add", ExtraAddrA(i).String() + "/32", "dev", Device})
	}
	return cmds
}

// wireOf returns the wire of a packet from src to dst in direction d: 0
// for the planes' own delay, else 1 + its index in Config.PairDelays.
func (e *Emulator) wireOf(d Dir, src, dst netip.Addr) int {
	if len(e.pairs) == 0 {
		return 0
	}
	if d == BtoA {
		src, dst = dst, src
	}
	return e.pairs[[2]netip.Addr{src, dst}]
}

// admit runs plane's model for one packet on its wire and returns the
// event and the scheduler queue that must carry it (wire*planes+plane).
// The caller holds d.sched.Mu.
func (d *direction) admit(now time.Duration, plane, wire, size int, cp ecn.Codepoint, full bool) (netem.TraceEvent, int) {
	l := d.links[plane]
	if wire == 0 {
		return l.Admit(now, size, cp, full, d.rng), plane
	}
	delay := d.em.cfg.PairDelays[wire-1].Delay
	return l.AdmitVia(now, size, cp, full, d.rng, delay, &d.pairLast[wire-1][plane]), wire*len(d.links) + plane
}
