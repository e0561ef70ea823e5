package metaroce

import (
	"errors"
	"fmt"
)

// Errors surfaced to the application through events and return values.
var (
	ErrUnknownKey       = errors.New("metaroce: unknown memory key")
	ErrOutOfBounds      = errors.New("metaroce: write outside the memory region")
	ErrNoPostedBuffer   = errors.New("metaroce: no receive buffer posted for the send")
	ErrBufferTooSmall   = errors.New("metaroce: send longer than the posted receive buffer")
	ErrTooFarAhead      = errors.New("metaroce: message sequence beyond the receiver's window")
	ErrNotRelayed       = errors.New("metaroce: stream not relayed by the receiving gateway")
	ErrQueueFull        = errors.New("metaroce: send queue full")
	ErrMessageTooLarge  = errors.New("metaroce: message too large")
	ErrNotConnected     = errors.New("metaroce: connection not established")
	ErrClosed           = errors.New("metaroce: connection closed")
	ErrHandshakeTimeout = errors.New("metaroce: handshake timed out")
	ErrNoCommonVersion  = errors.New("metaroce: peer speaks no common protocol version")
	ErrRefused          = errors.New("metaroce: connection refused by peer")
	ErrDuplicateTag     = errors.New("metaroce: receive tag already posted")
	ErrPeerUnreachable  = errors.New("metaroce: every path to the peer is down")
)

// Err returns the application error for a wire error code.
func (c ErrorCode) Err() error {
	switch c {
	case ErrCodeUnknownKey:
		return ErrUnknownKey
	case ErrCodeOutOfBounds:
		return ErrOutOfBounds
	case ErrCodeNoBuffer:
		return ErrNoPostedBuffer
	case ErrCodeBufferTooSmall:
		return ErrBufferTooSmall
	case ErrCodeTooFarAhead:
		return ErrTooFarAhead
	case ErrCodeNotRelayed:
		return ErrNotRelayed
	}
	return fmt.Errorf("metaroce: error code %d", uint16(c))
}

// RemoteError is the error a sender's message completes with when the
// receiver refused it. errors.Is(err, ErrUnknownKey) and the like work on it.
type RemoteError struct{ Code ErrorCode }

func (e *RemoteError) Error() string { return "remote refused message: " + e.Code.Err().Error() }

// Unwrap returns the sentinel error for the code.
func (e *RemoteError) Unwrap() error { return e.Code.Err() }
