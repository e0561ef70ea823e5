// Package sim is a deterministic discrete-event network simulator: the network core on which the
// unchanged sans-I/O MetaRoCE state machine runs at scales (100 Gbit/s, millisecond round trips,
// thousands of connections) that this machine cannot run in real time.
//
// Package sim is generic: it imports nothing from this repository, and must not. Protocol endpoints
// plug in through the [Endpoint] interface; adapters that run metaroce on it live above it.
//
// # Time and determinism
//
// Time is virtual: a [time.Duration] since the start of the simulation, advanced only by
// [Sim.Run]. Events sit in a binary heap ordered by (time, insertion sequence), so events due at
// the same instant run in the order they were scheduled (FIFO). All randomness comes from PCG
// generators derived from [Config.Seed]: each link draws its losses from its own stream, so the
// same seed gives the same run bit for bit, and changing what one link does (or what an endpoint
// draws from [Sim.Rand]) does not shift the loss pattern of the others. No goroutines, no wall
// clock, no maps iterated in the hot path.
//
// # What is modelled
//
// Two sites, A and B, are joined by P planes; each plane is a pair of directional links (A→B and
// B→A). Hosts attach to one site, each with an optional access uplink (host→fabric) and downlink
// (fabric→host). A datagram from a host at A to a host at B crosses:
//
//	A-host uplink → plane link A→B (chosen by ECMP) → B-host downlink → B-host endpoint
//
// ECMP hashes the datagram's 5-tuple (source and destination host, source and destination port,
// UDP) with a salt drawn from the seed, so a flow stays on one plane and changing its source port
// (its entropy) moves it to another plane with probability (P-1)/P. ECMP does not know whether a
// plane works: a black plane keeps receiving its share, which is what the protocol must detect.
//
// [NewTopology] generalises this to several sites (regions) joined by fabric links that the
// caller adds per plane ([Network.AddLink]), with a route per (source site, destination site,
// plane): the sequence of links a datagram crosses ([Network.SetRoute]). The same link may sit in
// the routes of several site pairs, so region pairs can share a long-haul segment, its queue and
// its ECN marking; ECMP picks the plane as above, and the datagram then crosses its route hop by
// hop, each hop the link model below. [NewNetwork] is the two-site case: a route of one link per
// plane and direction.
//
// Every link (plane, fabric or access) is the same store-and-forward model. For each datagram, in order:
//
//  1. Down check: a link that is down drops everything offered to it (DroppedDown).
//  2. Enqueue: if the serializer is idle the datagram goes straight to it. Otherwise the drop-tail
//     check applies (waiting bytes + this datagram > QueueLimit: DroppedQueue), then ECN: an ECT
//     datagram that finds more than ECNThreshold bytes waiting is marked CE (MarkedCE).
//  3. Serialize: size*8/Rate seconds, one datagram at a time, FIFO. Times are whole nanoseconds with
//     the sub-nanosecond remainder carried to the next datagram, so the long-run rate is exact.
//  4. Loss on the wire: after serialization, with probability Loss (DroppedLoss). A lost datagram has
//     used its share of the link's capacity.
//  5. Propagate: arrives Delay later at the next hop (Delivered, BytesDelivered).
//
// Queue occupancy means bytes waiting behind the serializer, not counting the datagram being
// serialized. A Rate of 0 means infinite: no serialization and no queue (and so no ECN marking);
// a link whose rate, delay and loss are all zero passes datagrams through at once. QueueLimit 0
// means unlimited (memory stays bounded by [Config.MaxDatagrams]). Datagram size on a link is
// len(Data) plus [NetworkConfig.Overhead].
//
// Faults are plain method calls that take effect at the current virtual time, so they can be
// scheduled with [Sim.At] or the Schedule* helpers: a link or plane going down (everything queued,
// being serialized or on the wire is dropped at that instant) and coming back, a new loss rate, a
// new rate (from the next datagram to start serializing), a new delay.
//
// # What is not modelled
//
// Links are FIFO: there is no per-packet jitter and so no reordering within one link (a delay
// reduction never lets a datagram overtake an earlier one); reordering comes only from different
// planes having different delays or queues. There is no switch buffer shared between ports, no
// PFC, no ECMP rehash on failure, no host-to-host traffic within a site, no link-layer corruption
// distinct from loss, and no CPU cost on hosts: an endpoint's work takes zero virtual time.
//
// # Hosts and endpoints
//
// A host runs an [Endpoint], a sans-I/O protocol stack. After every Receive or HandleTimeout (and
// once at start, and after [Host.Kick]) the driver drains Poll, sending each datagram onto the
// host's uplink, then re-arms the host's wake-up at NextTimeout. Datagram buffers come from a free
// list owned by the Sim, bounded by [Config.MaxDatagrams]: steady state does not allocate, and past
// the bound datagrams are dropped and counted (Stats.DroppedNoBuffer) instead of growing memory.
// Guards keep a misbehaving endpoint from stalling virtual time: a timer still due after
// HandleTimeout is pushed 1ns ahead (Stats.ClampedTimeouts), and one drain sends at most
// [Config.MaxPollBurst] datagrams before yielding for 1ns (Stats.PollBurstLimited).
//
// A Sim is not safe for concurrent use: run independent simulations in separate goroutines.
package sim
