// Package region is the gateways' shared view of the world, kept by gossip
// over hashicorp/memberlist: which gateways exist, in which region, at which
// control and WAN addresses, whether each is alive, suspect, dead or gone,
// and what every gateway has measured of its paths to every other (RTT,
// loss, ECN, state per peer and plane).
//
// All gateways of all regions form one gossip cluster. Its failure-detection
// timings come from a profile ("wan" or "lan", memberlist's own presets, or
// "custom"), and the gossip is encrypted with a keyring that can be rotated
// while the cluster runs ([Cluster.SetKeyring]).
//
// The gateway asks [Cluster.Route] for the live gateways of a destination
// region. The answer is immediate: a region whose gateways are all dead or
// gone is an [ErrRegionUnreachable], a region nobody has heard of an
// [ErrUnknownRegion]; nothing here waits for the network to decide. Changes
// of the view and fresh path-health reports are delivered on bounded
// channels that never block gossip: a watcher that falls behind loses
// notifications (counted in [Stats]) and re-reads [Cluster.View].
//
// Path health is gossiped so that its cost per gateway grows with the
// fleet, not with its square (docs/GATEWAY.md, "What path-health gossip
// costs"): one verdict per (gateway, plane), whoever reports it; only
// changes on the wire, renewals of what is not up, nothing for an up that
// holds; a gateway whose plane fails says so once, not once per peer; every
// table bounded ([Cluster.HealthTables]); a down verdict never dropped
// silently ([Stats] BroadcastsLost, HealthDownEvicted).
//
// memberlist runs on a guarded transport of this package: every datagram
// is checked (with the keyring: authenticated) by the goroutine that reads
// the socket, and junk is dropped and counted by reason before it can queue
// in front of probes; members' datagrams arrive on sockets of their own;
// streams are bounded in number and time. Refusals (another keyring, no
// keyring, streams beyond the bounds, members that are not gateways) are
// counted and logged at warn, rate-limited, on the refusing side, and a
// Join that finds nobody is logged at error and kept for [Cluster.JoinErr]
// (see [Stats], [DropReasons], [RefuseReasons]).
//
// The wire formats (node metadata, health reports) are versioned and
// fuzzed. A reader accepts a newer version whose first fields are laid out
// like the version it knows and ignores the rest, so gateways can be
// upgraded one at a time.
//
// This package is an adapter at the edge of the system: it may use
// pathmgr's state type, but must never import metaroce (the protocol stays
// free of membership) nor gateway or config (they sit above it; the gateway
// translates config.Gossip into a [Config]).
package region
