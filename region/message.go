package region

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/hashicorp/memberlist"
)

// A gateway message (kind 'm', version 1) carries bytes this package does
// not read from one gateway to another, in one gossip datagram (encrypted
// as all gossip): kind, version, then the payload to the end of the
// message. The gateway gives the payload its own layout and version.
const (
	kindMessage    = 'm'
	messageVersion = 1
	// MaxMessage is the longest payload SendMessage sends: a gossip
	// datagram is at most 1400 bytes, less memberlist's framing and
	// encryption.
	MaxMessage = 1024
)

// MessageHandler receives the payload of a gateway message. It runs on
// memberlist's goroutine: it must not block nor call back into the
// cluster. The payload is the handler's own.
type MessageHandler func(payload []byte)

func appendMessage(b, payload []byte) ([]byte, error) {
	if len(payload) > MaxMessage {
		return nil, fmt.Errorf("region: gateway message of %d bytes is longer than %d", len(payload), MaxMessage)
	}
	b = append(b, kindMessage, messageVersion)
	return append(b, payload...), nil
}

// decodeMessage returns a gateway message's payload (a copy: memberlist
// reuses b).
func decodeMessage(b []byte) ([]byte, error) {
	switch {
	case len(b) < 2:
		return nil, fmt.Errorf("%w: gateway message of %d bytes", errMalformed, len(b))
	case b[0] != kindMessage || b[1] == 0:
		return nil, fmt.Errorf("%w: gateway message kind %#x version %d", errMalformed, b[0], b[1])
	case len(b)-2 > MaxMessage:
		return nil, fmt.Errorf("%w: gateway message payload of %d bytes", errMalformed, len(b)-2)
	}
	return slices.Clone(b[2:]), nil
}

// OnMessage sets the handler of the gateway messages this member
// receives (SendMessage); nil drops them. Without a handler each is
// counted in Stats.BadMessages.
func (c *Cluster) OnMessage(h MessageHandler) {
	if h == nil {
		c.onMessage.Store(nil)
		return
	}
	c.onMessage.Store(&h)
}

// SendMessage sends payload to the member name at addr (its gossip
// address) in one gossip datagram, best effort: a datagram lost on the
// way is not sent again. A member of an earlier build counts it as a bad
// message: send only to members whose Meta.Capabilities say they read
// what the payload carries.
func (c *Cluster) SendMessage(name string, addr netip.AddrPort, payload []byte) error {
	msg, err := appendMessage(nil, payload)
	if err != nil {
		return err
	}
	node := &memberlist.Node{Name: name, Addr: addr.Addr().AsSlice(), Port: addr.Port()}
	if err := c.ml.SendBestEffort(node, msg); err != nil {
		return fmt.Errorf("region: gateway message to %s: %w", name, err)
	}
	return nil
}

// deliverMessage hands a received gateway message to the handler.
func (c *Cluster) deliverMessage(b []byte) error {
	p, err := decodeMessage(b)
	if err != nil {
		return err
	}
	h := c.onMessage.Load()
	if h == nil {
		return fmt.Errorf("%w: gateway message with no handler", errMalformed)
	}
	(*h)(p)
	return nil
}
