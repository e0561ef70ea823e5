// Package netem is the link emulator under mrgw's tests, `mrgw-lab demo` and
// `mrgw-lab loadtest`: a user-space UDP relay on loopback that stands in for
// the WAN between two sites, modelled as an ECMP fabric of P parallel
// planes. This kernel has no netem, so the millisecond round trips, the
// bottleneck queues, the random loss, the ECN marks and the plane failures
// that the gateways must survive are produced here, in user space.
//
// # What it models
//
// Every datagram is hashed, like a switch hashes a packet's 5-tuple, onto
// one of P planes (seeded, per direction: see PlaneOf). Each plane has an
// independent link in each direction (LinkConfig):
//
//	arrival ─▶ (MTU clamp) ─▶ [drop-tail queue, QueueBytes] ─▶ serialiser (Rate) ─▶ wire (Delay + Jitter, Loss) ─▶ receiver
//	                       └─ ECT and more than ECNThreshold bytes ahead: leave as CE
//
// A datagram is charged its wire bytes, its UDP payload and its IPv4 and
// UDP headers, in the queue, the serialiser and the counters, as on a real
// IP link: Rate is a rate of IP packets, the same as loadtest/tunemu's,
// which charges a packet its IP length.
//
// The queue is modelled exactly but analytically (see link): a datagram's
// fate and its delivery time are decided when it arrives, then it waits in
// its plane's FIFO until that time. Delivery times within a plane never
// decrease, so jitter does not reorder a plane (datagrams on different
// planes do reorder, as on a real fabric). Loss strikes after the queue: a
// lost datagram still used its link time. A failed plane (Fail) is a black
// hole for new arrivals and for what was in flight on it; Restore brings it
// back empty. A plane may clamp its MTU (LinkConfig.MTU, SetMTU): larger
// datagrams are dropped on arrival and counted (SizeDrops), as a path that
// does not fragment drops them; path MTU discovery is tested against it.
// Every parameter can be changed while traffic flows (SetLink).
//
// # Addressing: stand-ins
//
// The emulator keeps each path's identity (a MetaRoCE path is a UDP source
// port, its ECMP entropy) by giving every endpoint a stand-in: one
// emulator socket that represents it to the other site. The rule is the
// same in both directions:
//
//	a datagram from X (site A) arriving at the stand-in of Y (site B) is
//	sent to Y from the stand-in of X.
//
// So every endpoint sees each peer at one stable address, whichever side
// spoke first, and replies to the address it sees reach the right socket,
// which is what a symmetric protocol (both sides send data and acks, both
// may open paths) needs. Two kinds of stand-in exist:
//
//   - Exposed: Expose(site, real) opens a stand-in for a listening
//     endpoint and returns its address; this is the address the other
//     site is configured with (a gateway at A is told that its peer B is
//     at the stand-in of B). It lives until Close.
//   - On demand: the first datagram from an endpoint that has no stand-in
//     (an unexposed per-path socket with its own source port) creates one.
//     So three path sockets at A talking to one listener at B appear to B
//     as three distinct source ports, and B's acks to each come back to
//     the right path socket, from B's stand-in. These are bounded by
//     Config.MaxMappings and expire after Config.IdleTimeout without
//     traffic in either direction.
//
// An endpoint that both listens and sends (one socket per path that is
// also exposed) uses its exposed stand-in for both, so its peer sees one
// address. Which site a datagram comes from is known from where it
// arrives: the stand-in of a site-B endpoint only receives from site A.
// The ECMP hash is computed on the real endpoints' 5-tuple (X to Y), not on
// stand-in ports, so plane placement is repeatable for a given seed.
//
// # How it runs
//
// One goroutine per stand-in socket receives with recvmmsg (x/net
// ReadBatch), runs the model for the whole batch under its direction's
// lock and moves the buffers (from a pool) into the planes' FIFOs. One
// dispatcher goroutine per direction sends what is due with sendmmsg,
// grouped per stand-in socket, then sleeps until the next deadline on a
// timerfd (Go timers are ~1 ms coarse here), yield-spinning only for waits
// under 60 µs. The IPv4 TOS byte is carried through (ECN via
// internal/ecn). Memory is bounded: bytes per plane queue, datagrams in
// all queues (Config.MaxBuffered), stand-ins (Config.MaxMappings).
// Everything stops on Close or when New's context is done.
//
// Only IPv4 loopback is supported: the emulator never sends anywhere else.
// The package is Linux-only (timerfd, IP_TOS control messages).
//
// It is lab infrastructure: it imports only internal/ecn from mrgw, and no
// package of the daemon imports it (internal/layering checks both).
package netem
