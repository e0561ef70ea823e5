package responder

import (
	"testing"

	"github.com/mrgw/mrgw/metaroce"
)

// TestMetaroceRefusedHeadStall reproduces, on the bare state machine, the
// metaroce bug that case refused-head-no-stall finds over the wire: when
// the oldest incomplete message of a stream is refused (unknown key,
// out-of-bounds, no posted buffer, buffer too small), rx.go's place()
// records the error but never calls completeRx, and completeRx is only
// called when the completing message is the stream's head. So neither the
// refused message nor any later message of that stream is ever reported
// (EventRecvComplete), and the stream's message window never moves.
//
// It is skipped while the bug is present (conformance/ must not edit
// metaroce/); once fixed it passes, and knownFailures in
// responder_test.go must lose its entry.
func TestMetaroceRefusedHeadStall(t *testing.T) {
	mem := metaroce.NewMemory()
	if err := mem.Register(1, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	ep, err := metaroce.NewEndpoint(metaroce.Config{Listen: true, Paths: 1}, mem)
	if err != nil {
		t.Fatal(err)
	}
	meta := metaroce.RecvMeta{Peer: 1, Entropy: 5000}
	buf := make([]byte, 0, 9000)
	init, _ := metaroce.AppendInit(buf, &metaroce.Handshake{Conn: 7, MTU: 1024, Paths: 1, Timestamp: 1})
	ep.Receive(1, init, meta)
	send := func(seq, msg uint64, key uint32) {
		h := metaroce.DataHeader{Op: metaroce.OpWrite, Conn: 7, Seq: seq, MsgSeq: msg, MsgLen: 8, Key: key, Timestamp: 2}
		p, err := metaroce.AppendData(buf[:0], &h, []byte("12345678"))
		if err != nil {
			t.Fatal(err)
		}
		ep.Receive(2, p, meta)
	}
	send(0, 0, 99) // msg 0: unknown key, refused
	send(1, 1, 1)  // msg 1: fine
	var completions []uint64
	for {
		ev, ok := ep.PollEvent()
		if !ok {
			break
		}
		if ev.Kind == metaroce.EventRecvComplete {
			completions = append(completions, ev.Seq)
		}
	}
	if len(completions) != 2 {
		t.Fatalf("refused head stalls the stream: after msg 0 refused (unknown key) and msg 1 placed whole, RecvComplete reported for %v, want [0 1]", completions)
	}
}
