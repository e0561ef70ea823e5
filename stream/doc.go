// Package stream gives programs TCP's interface over mrgw: a net.Conn and
// a net.Listener between endpoints in different regions, carried by a
// host's flows (package host) through the gateways. It is host-side: the
// gateways relay the flows as they relay any other.
//
//	m, _ := stream.New(h, stream.Config{})          // h: a registered *host.Host
//	ln, _ := m.Listen("7000")                        // on us-east/trainer-0
//	c, _ := m.Dial(ctx, "us-east/trainer-0:7000")    // from any other region
//
// # How a stream works
//
// A stream is two flows, one each way, and one registered memory region at
// each end: four 64-byte control slots followed by a receive ring of
// Config.Window bytes. A sender WRITEs its data straight into the peer's
// ring, at the stream offset modulo the ring size, and never more than the
// peer's window ahead of what the peer's application has read: the ring is
// the receive buffer, placed into as the data arrives (no reorder buffer),
// and the window is TCP's. Each end WRITEs its cumulative state (its ring,
// the bytes its application has read, FIN with the total it sent, a reset
// and its code) into the peer's control slots, in turn (record.go). Every
// field of that record only grows, so a reader that merges the slots, or
// finds a newer record than the delivery it handles, loses nothing.
//
// The receiver processes its inbound flow's completions in flow sequence
// order, so a FIN or a reset takes effect after every byte sent before it.
// Dial opens a flow to the endpoint and WRITEs an empty message at the
// port's offset of the peer's listen key; the listener answers on a flow
// of its own, into the region whose key the dialer derived from its flow
// id, so no other addressing is needed.
//
// # Semantics
//
// Read and Write behave as on a TCP connection: Write returns once the
// bytes are copied into the send window and blocks while the window is
// full (backpressure reaches the writer through the peer's reading),
// CloseWrite half-closes (the peer reads io.EOF after the last byte),
// Close closes both ways (unread data resets the stream, as in TCP), Reset
// and ResetCode abort (the peer's Read and Write fail with a *ResetError,
// errors.Is ErrReset), and the deadlines fail Read and Write with
// os.ErrDeadlineExceeded. A dial to a port nothing listens on fails with
// ErrRefused.
//
// A stream outlives the death of a gateway: its flows fail over to the
// region's other gateway, resend what was not complete end to end, and
// the destination reports each message once (package host), so the
// stream stays open and nothing is lost or repeated.
//
// # Memory
//
// A stream end holds its receive ring (Window) and a copy of the bytes it
// has sent that are not yet in the peer's memory (at most the peer's
// Window): up to 2 × Window per stream on each host, for at most
// Config.MaxStreams streams. One stream carries at most Window per round
// trip (4 MiB at 50 ms: 670 Mbit/s).
package stream
