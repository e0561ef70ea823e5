// Package metaroce implements the MetaRoCE transport (docs/PROTOCOL.md) as
// a sans-I/O state machine: RDMA-style WRITEs and SENDs sprayed over many
// paths of one connection, placed into the receiver's memory as they
// arrive, acknowledged per path with SACK, and repaired by resending lost
// chunks as new DATA on whichever path has room.
//
// The caller owns sockets, clocks and goroutines. It feeds an Endpoint the
// datagrams it receives (Receive) and the time (every method takes now as
// an argument), polls it for datagrams to send (Poll), events (PollEvent)
// and the next deadline (NextTimeout, HandleTimeout), as raft's RawNode and
// quic-go's connection are driven. An Endpoint is not safe for concurrent
// use. Nothing in it reads the clock, sleeps, allocates per packet in the
// steady state, or blocks.
//
// # Layout
//
//   - wire.go: the codecs, append-style encoders and decoders of every
//     packet type (golden vectors in testdata/vectors.json, fuzzed);
//     wirev2.go: wire version 2's compact DATA and the unwrapping of its
//     32-bit sequences (testdata/vectors_v2.json). Which version a
//     connection speaks is agreed in the handshake (Config.WireVersions;
//     endpoint.go, conn.go); tx.go sends each DATA in its connection's
//     version and attaches the message descriptor where version 2 needs
//     it, rx.go widens a version-2 DATA into the version-1 header that
//     the rest of the receiver works with.
//   - config.go, errors.go, events.go: Config and its defaults, the typed
//     errors, the events the application hears.
//   - endpoint.go: Endpoint, demultiplexing by connection id, accepting
//     connections, the receiver loop's rate hints; sched.go: which
//     connections have something to send and when their timers fire.
//   - conn.go: Conn, the handshake, close, probes and timers of one
//     connection.
//   - tx.go: the send side: messages, streams, the round robin over them,
//     pacing, building DATA packets.
//   - sent.go: sentHistory, one path's sent history and loss detection
//     (what was sent on the path, what each ACK acknowledges or declares
//     lost, the ack floor, the probe-timeout deadline); recovery.go: what
//     the connection does with it (resends, completions, the controller
//     and path manager told).
//   - recvwin.go: recvWindow, one path's receive bitmap (the cumulative
//     point, the ack floor, the SACK report); rx.go: what the connection
//     does with a DATA packet (path bookkeeping, then placement), the
//     acknowledgements each path owes, and the events and ERRORs that
//     placement's refusals and completions become.
//   - placement.go: placer, the receive streams, the messages arriving on
//     them and the buffers posted for SENDs: payloads placed into memory,
//     posted buffers or a stream's Sink as they arrive, refusals,
//     completions in order per stream, and the streams the next ACK
//     reports; it tells the connection through a placeHandler.
//   - pmtu.go: PMTUSearch, path MTU discovery of one group of paths
//     (RFC 8899 style) as a state machine of its own; pmtu_wire.go the
//     PMTU_PROBE and PMTU_ACK codecs; pmtu_conn.go a connection's searches
//     (ConnOptions.PMTU), the answers it owes, and DATA kept off paths
//     whose group has not validated a full DATA datagram; measure.go the
//     path measurement behind `mrgw probe` (Conn.Measure).
//   - gbn.go: the RoCEv2 go-back-N baseline, for measurement only.
//   - relay.go: cut-through relaying for gateways (stream sinks, relayed
//     messages supplied chunk by chunk); memory.go: the registry of memory
//     regions WRITEs place into.
//
// Path health, entropy and the sprayer are package pathmgr's; congestion
// control is package cc's, behind cc.Controller.
//
// Tests: unit tests per type, driving it without a connection
// (sent_test.go, recvwin_test.go, placement_test.go, wire_test.go,
// wirev2_test.go), version 2 between connections (wirev2_conn_test.go), a
// small deterministic network for end-to-end transfers (harness_test.go,
// conn_test.go), and scripted scenarios under testdata/scenarios, one per
// recovery rule of PROTOCOL.md §2–§4, run by scenario_test.go (regenerate
// their outputs with -rewrite and read the diff).
//
// # Imports
//
// metaroce is the protocol core that every adapter builds on, so it
// imports only the standard library and mrgw's cc, pathmgr and units (the
// rate types: hints travel as bit/s, controllers pace in bytes/s). It must
// never import tunnel, gateway, region, config, netio, host, loadtest or
// sim, nor any socket, metrics or configuration package (net, syscall,
// golang.org/x/sys, prometheus, viper, memberlist): adapters above it do
// that, and turn its events into metrics and logs.
package metaroce
