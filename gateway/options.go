//go:build linux

package gateway

import (
	"io"
	"log/slog"
	"time"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/metaroce"
)

// Options are what a Gateway takes besides its configuration: things that
// are not operator settings (tests, the demo, the embedding program).
type Options struct {
	// Logger, if set, is used as is (log.level and log.format are then the
	// caller's business). Otherwise a slog handler is built from log.* and
	// writes to LogOutput (default stderr); log.level is reloadable.
	Logger    *slog.Logger
	LogOutput io.Writer
	// Protocol, if set, adjusts the MetaRoCE configuration built from the
	// file (path timings, DeadAfter) before the endpoint starts.
	Protocol func(*metaroce.Config)
	// ControlKeepalive and ControlMisses tune how fast a dead peer's
	// control session is noticed (defaults: 1 s and 3).
	ControlKeepalive time.Duration
	ControlMisses    int
	// StatsEvery is the period of metrics and status snapshots (default 1 s).
	StatsEvery time.Duration
	// DrainTimeout bounds how long Shutdown lets in-flight messages finish
	// before it RESETs the remaining flows (default 5 s, or the context's
	// deadline if sooner).
	DrainTimeout time.Duration
	// Pprof serves the Go runtime profiles on the admin listener
	// (/debug/pprof/); off unless asked for (mrgw run --pprof).
	Pprof bool
	// AdminIdleTimeout, AdminMaxConns and AdminMaxConnsPerSource bound
	// the admin HTTP server: an idle keep-alive connection is closed after
	// AdminIdleTimeout (default 30 s), at most AdminMaxConns connections
	// are open at once (default 64; a new one over the cap takes the slot
	// of the one that has waited longest for a request), and at most AdminMaxConnsPerSource of them from one source
	// IP (default a quarter of AdminMaxConns, at least 1: 16 of the
	// default 64; more are closed as soon as they are accepted).
	AdminIdleTimeout       time.Duration
	AdminMaxConns          int
	AdminMaxConnsPerSource int
	// HostRegisterTimeout: a LAN peer that has not registered this long
	// after its INIT was admitted is closed and its slot reclaimed
	// (default 10 s). HostIdleTimeout: so is a host whose connections
	// have carried no control message for this long (default 30 s; hosts
	// PING every DeadAfter/8, 62.5 ms by default). MaxHostPeers bounds the
	// LAN peers admitted at once (default lan.max_hosts).
	HostRegisterTimeout time.Duration
	HostIdleTimeout     time.Duration
	MaxHostPeers        int
	// HostPathSockets is the number of path sockets all hosts share for
	// what the gateway sends them (default 64).
	HostPathSockets int
	// WireVersions are the MetaRoCE wire versions the gateway speaks
	// (default 1 and 2). Only version 1 makes it speak as a release
	// before version 2 did: a fleet in the middle of an upgrade, for tests
	// (`mrgw run --wire-versions`). GossipMetaVersion likewise announces
	// this gateway in gossip metadata of that version (0: the newest; 1
	// leaves out the wire versions and the capacity).
	WireVersions      []uint8
	GossipMetaVersion int
	// WANPingEvery is how often each WAN peer is PINGed (wanPeer.keepalive):
	// 0 is DeadAfter/8, negative never (a test that needs an idle
	// connection to stay silent).
	WANPingEvery time.Duration
	// PMTU tunes the timings of WAN path MTU discovery (ConfirmInterval,
	// RaiseInterval, ...; see pmtu.go); the gateway sets the rest.
	PMTU metaroce.PMTUConfig
	// ECMPLane, if set, tells which ECMP path of the fabric a datagram
	// from src (a local path socket) to dst (a peer's plane address)
	// takes, where that is knowable: the loopback emulator's hash. Probe
	// counts ECMP paths with it; nil (production): see probe.go.
	ECMPLane ECMPLaneOf
}

// MemoryOverhead is what a gateway holds beyond limits.memory_bytes, its
// buffered data, whatever its hosts: the runtime, the WAN's connections and
// path sockets, the hosts' shared path sockets (64 of ~0.4 MiB).
// MemoryPerHost is what each host of lan.max_hosts adds: its connection's
// protocol state, the gateway's tables and the collector's headroom (1,000
// hosts added 69 MB of RSS, 44 KiB each beside the pool: docs/RESULTS.md,
// `mrgw-lab loadtest hosts`), rounded up.
const (
	MemoryOverhead = 96 << 20
	MemoryPerHost  = 64 << 10
)

// MemoryLimit is the soft memory limit for the Go runtime of a gateway
// running cfg (`mrgw run` sets it; debug.SetMemoryLimit): limits.memory_bytes
// plus MemoryOverhead plus MemoryPerHost per host of lan.max_hosts. The
// garbage collector works harder as the heap nears it, so that the heap
// stays within the configuration rather than growing until the next cycle.
func MemoryLimit(cfg *config.Config) int64 {
	return cfg.Limits.MemoryBytes + MemoryOverhead + MemoryPerHost*int64(cfg.LAN.MaxHosts)
}
