// Package conformance is MetaRoCE's conformance suite: wire-level scenarios
// that drive any implementation over real UDP and check every answer
// against docs/PROTOCOL.md. mrgw's own implementation of the suite's test
// contract, on metaroce.Endpoint, is package conformance/responder.
//
// The suite (Run) sees the target only through the wire. It opens
// connections from several local UDP sockets (one source port per path, so
// entropy changes are real), crafts packets with its own codec (written
// from the spec and checked against the golden vectors in
// testdata/vectors.json, a byte-for-byte copy of metaroce's), sends DATA
// ECN-capable and, where a case needs it, with a real IP CE mark, and
// judges each case pass, fail (with what was expected and what came back)
// or n/a. To observe placement and completion it relies on the small test
// contract of docs/CONFORMANCE.md: a registered region, posted receive
// buffers, completion reports and READ requests carried as ordinary
// MetaRoCE SENDs on a reserved stream.
//
// The responder (package conformance/responder) runs one metaroce.Endpoint
// on one UDP socket in a single goroutine and implements that contract; its
// tests run the suite against it and against deliberately broken variants of
// it, to prove that every case can fail.
//
// This package does not import metaroce: the suite's judgement never uses
// metaroce's codec or state machine.
package conformance
