// Package tunemu is the TUN + network-namespace twin of netem: it
// carries any IPv4 traffic (kernel TCP with any congestion control, QUIC,
// a child process's sockets) through the same emulated WAN model, so that
// peers which cannot speak through a UDP relay are measured over the same
// link as mrgw.
//
// # Topology
//
// New creates two network namespaces, named mrgw-lt-a-<pid>-<n> and
// mrgw-lt-b-<pid>-<n> (unique per run), each with one TUN device
// ("mrgwt0", MTU 1500 by default) addressed inside that namespace only:
// site A is 10.213.0.1/30 and site B 10.213.0.2/30. Nothing is added to
// the root namespace and no route leads out of the two namespaces: the only
// way out of either is the TUN device, whose other end is this process.
//
//	ns A: socket ─▶ mrgwt0 ─▶ fd ─┐                      ┌─▶ fd ─▶ mrgwt0 ─▶ socket :ns B
//	                              └─▶ [plane model] ─────┘
//	                                  (root ns, this process)
//
// A reader goroutine per TUN reads IP packets, hashes the 5-tuple onto one
// of P planes (netem.FlowHash, seeded, per direction) and runs that plane's
// netem.Link, the very model of netem (drop-tail queue, rate,
// delay+jitter without reordering, loss after the queue, ECN marking):
// when a packet is ECT and the queue ahead of it is above the threshold, its
// IPv4 header leaves with CE set and the header checksum recomputed. One
// dispatcher per direction writes packets into the other TUN at their
// delivery times: netem.Sched, the relay's own delivery scheduler. Planes
// can be re-tuned, failed and restored while traffic flows.
//
// Flows at different distances behind one bottleneck: Config.ExtraAddrsA
// gives site A more addresses (10.213.1.1 onwards, ExtraAddrA) and
// Config.PairDelays gives a pair (an address of site A, site B's) its own
// one-way delay in both directions, as netem.Config.PairDelays does for the
// UDP relay, with the same type, validation and model (netem.Link.AdmitVia):
// the planes' queues and rates stay shared, each pair keeps its order on
// its own wire.
//
// A packet costs the link its whole IP length, headers included, as on a
// real IP link: netem charges a UDP datagram the same (its payload and the
// IPv4 and UDP headers the relay adds back), so the same datagram takes
// the same link time in both emulators, a TCP segment pays for its 40-52
// bytes of headers as a sealed datagram does for its, and rows measured
// through either are comparable.
//
// Random loss is netem.Link's by default: drawn per packet, independently,
// on the wire after the serialiser (a lost packet used its link time, so
// no flow can deliver more than Rate·(1−Loss)), in both directions (TCP's
// ACKs too). Config.LossBeforeQueue draws it on arrival instead (Linux
// netem's place: the survivors can fill the rate) and
// Config.LossForwardOnly spares B→A; `mrgw-lab loadtest link-model` measures
// what each choice costs kernel TCP.
//
// # Self-check
//
// Health (selfcheck.go) is what the emulator measured about itself: how
// late it released packets against their due times (a histogram: p50,
// p99, max), how busy its readers and dispatchers were, packets refused
// at MaxBuffered and packets the TUN devices dropped before it read them.
// The difference of two snapshots is a run's window; Check flags a window
// in which the emulator, not the link model, may have limited the flows
// (p99 lateness above MaxLateP99, a loop busy above MaxBusy, any drop
// before the model).
//
// # Running code inside a namespace
//
// In-process: Do runs a function on a goroutine locked to an OS thread
// that has joined the site's namespace (setns). Sockets created by that
// function (net.Listen, net.Dialer.Dial, net.ListenUDP: Go creates the
// socket synchronously on the calling thread) belong to the namespace for
// their whole life and may then be used from any goroutine. The goroutine
// never unlocks its thread: it returns locked, so the Go runtime destroys
// the thread instead of reusing it in the wrong namespace. Code that
// creates UDP sockets later, on goroutines of its own (a netio endpoint
// opens path sockets on demand), takes UDPListener as its socket opener
// (udp.Options.ListenUDP): each socket is then opened by such a thread.
// Anything else runs as a child process with Command (`ip netns exec`).
//
// # Privileges and clean-up
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), /dev/net/tun and
// iproute2's `ip`. Without them New returns an *UnavailableError that
// matches ErrUnavailable and says why; callers print it and skip the rows
// that need this emulator: nothing is ever faked. Close deletes both
// namespaces (which destroys the TUN devices and every socket left in
// them); New first deletes stale namespaces with this package's prefix
// whose process no longer exists.
//
// The package is Linux-only.
package tunemu
