//go:build linux

// Package gateway is the mrgw daemon's heart: it terminates the MetaRoCE
// connections of the hosts of its region (LAN) and relays their flows,
// packet by packet, over one sealed WAN connection per peer gateway of
// every other region. docs/GATEWAY.md is the design; this package is its
// implementation.
//
// # One endpoint, one goroutine
//
// A Gateway runs a single netio endpoint that listens on its LAN address
// and on every WAN plane address. Hosts are unsealed peers admitted when
// they connect; peer gateways are sealed peers attached (tunnel.Attach)
// with the keys of their QUIC control session. Because both hops of every
// flow live on that one endpoint, the relay sink of a flow's incoming
// stream runs on the endpoint's owner goroutine and hands each chunk to
// the outgoing connection (metaroce.Conn.WriteRelay / Supply) in the same
// call: no queue between goroutines, no lock, no deadlock, and every flow
// table below is touched by that goroutine only.
//
// # Peer gateways
//
// Each gateway of another region that gossip announces is a wanPeer
// (peers.go keeps the table): wanpeer.go is its control session, dialled
// or accepted, held and replaced on its own goroutine, and wanconn.go its
// WAN connection on the owner goroutine: opened, PINGed, watched for
// silence and dropped. The relay calls the peer when one of its
// connections comes up or is dropped.
//
// # Flows
//
// Control messages (package flowctl) arrive on stream 0 of every
// connection through a sink bound on every connection. OPEN from a host is
// routed through gossip (region.Cluster.Route): the flow id picks one live
// gateway of the destination region that has an established WAN
// connection, a stream is allocated on that connection, the host's stream
// is bound to the flow's relay sink and resumed at the flow's resume point,
// and OPEN goes on. The destination gateway does the same towards the
// registered host. OPEN_OK carries the smallest credit granted along the
// way; DONE is relayed upstream; a lost downstream hop turns into RESET
// upstream, so the source host re-opens through another gateway of its
// region.
//
// # Bounded memory
//
// Each admitted flow reserves its credit from limits.memory_bytes (a flow
// that cannot get at least a few packets' worth is refused with OPEN_ERR
// no capacity). A gateway only holds a flow's chunks between their arrival
// and the next hop's acknowledgement, and those belong to messages the
// source has not seen DONE, so what the gateway holds never exceeds the
// credits it granted; a sink refuses a chunk that would break a flow's
// reservation (a host ignoring its credit hurts only its own flow).
//
// # Fair scheduling
//
// Each flow's stream on a WAN connection gets the weight of its class
// (scheduler.classes) with metaroce.Conn.SetStreamWeight, so the
// connection's weighted round robin shares the WAN window between classes.
//
// # Layering
//
// The gateway sits above the protocol (metaroce, cc, pathmgr), the driver
// (netio), the tunnel, gossip (region) and configuration: it imports them, and
// none of them imports it. It never imports the lab: netem, loadtest/...,
// sim, conformance or test doubles (internal/layering checks it).
package gateway
