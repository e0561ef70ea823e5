package metaroce

import (
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EventConnected: the connection is established (both sides).
	EventConnected EventKind = iota + 1
	// EventClosed: the connection is gone; Err says why if not a clean close.
	EventClosed
	// EventSendComplete: every byte of message (Stream, Seq) is in the
	// receiver's memory, or Err says why it never will be. Reported once, in
	// order per stream.
	EventSendComplete
	// EventRecvComplete: message (Stream, Seq) is entirely in local memory,
	// or Err says why it was refused. Reported once, in order per stream.
	EventRecvComplete
	// EventPlacementError: a received packet was refused and nothing written
	// (Err is ErrUnknownKey, ErrOutOfBounds, ErrNoPostedBuffer, ...).
	EventPlacementError
	// EventPath: a path changed state (Path, Transition).
	EventPath
)

// Event is one thing the application should hear about.
type Event struct {
	Kind   EventKind
	Conn   *Conn
	Stream uint32
	Seq    uint64
	Op     Op
	Key    uint32 // WRITE: memory key
	Addr   uint64 // WRITE: region offset; SEND: receive tag
	Len    uint64
	Err    error
	At     time.Duration
	// Path events only.
	Transition pathmgr.Transition
}
