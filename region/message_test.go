package region

import (
	"bytes"
	"sync"
	"testing"
)

// TestGatewayMessage: a payload sent with SendMessage reaches the other
// member's handler intact; a member without a handler counts it as bad.
func TestGatewayMessage(t *testing.T) {
	cs := startCluster(t, "a1", "a2")
	var mu sync.Mutex
	var got [][]byte
	cs[1].OnMessage(func(p []byte) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	})
	gw, ok := cs[0].View().Gateway("a2")
	if !ok {
		t.Fatal("a1 does not see a2")
	}
	want := []byte("demand report")
	waitFor(t, "a2 to receive the message", func() bool {
		if err := cs[0].SendMessage("a2", gw.Gossip, want); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	mu.Lock()
	if !bytes.Equal(got[0], want) {
		t.Fatalf("received %q, want %q", got[0], want)
	}
	mu.Unlock()

	if err := cs[0].SendMessage("a2", gw.Gossip, make([]byte, MaxMessage+1)); err == nil {
		t.Fatal("a payload longer than MaxMessage was sent")
	}

	back, _ := cs[1].View().Gateway("a1")
	before := cs[0].Stats().BadMessages
	waitFor(t, "a1 to count a message it has no handler for", func() bool {
		if err := cs[1].SendMessage("a1", back.Gossip, want); err != nil {
			t.Fatal(err)
		}
		return cs[0].Stats().BadMessages > before
	})
}

// FuzzDecodeMessage: the framing of gateway messages never panics, and
// what it accepts frames again to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	b, _ := appendMessage(nil, []byte{1, 2, 3})
	f.Add(b)
	f.Add([]byte{kindMessage, messageVersion})
	f.Add([]byte{kindMessage, 0, 1})
	f.Add([]byte{kindMessage})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeMessage(b)
		if err != nil {
			return
		}
		again, err := appendMessage(nil, p)
		if err != nil {
			t.Fatalf("decoded payload of %d bytes does not frame: %v", len(p), err)
		}
		if b[1] == messageVersion && !bytes.Equal(again, b) {
			t.Fatalf("re-framing differs:\n in %x\nout %x", b, again)
		}
	})
}
