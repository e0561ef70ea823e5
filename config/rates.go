package config

import "github.com/mrgw/mrgw/units"

// The rate keys are whole bits per second in the file (max_rate_bps: an
// integer an operator writes and reads back); these accessors give them to
// the daemon as the rate type the controllers and the endpoint take.

// MaxRate is lan.max_rate_bps: the pacing ceiling per host connection
// (0: none).
func (l LAN) MaxRate() units.BitRate { return units.BitRate(l.MaxRateBps) }

// MaxRate is wan.max_rate_bps: the gateway's WAN capacity (shared by its peer connections), and
// the capacity the receiver divides among its senders (0: none).
func (w WAN) MaxRate() units.BitRate { return units.BitRate(w.MaxRateBps) }

// RegionRate is wan.region_rate_bps: the WAN capacity the region's
// gateways share, each taking its node.capacity's part (0: none).
func (w WAN) RegionRate() units.BitRate { return units.BitRate(w.RegionRateBps) }
