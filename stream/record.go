package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The layout of one end's registered region: ctlSlots control slots, then
// the receive ring. The peer WRITEs control records into the slots in
// turn and data into the ring; data never wraps inside one message.
//
// A flow places its messages as they arrive, not in order, so a record
// WRITTEN over the one before it could be overwritten by that older one
// landing late, and a reset or FIN lost with it. Records therefore go to
// the slots in turn, a slot is written again only once the record it held
// has landed, and the reader merges every slot.
const (
	slotSize = 64 // bytes of one control slot
	ctlSlots = 4  // control records in flight at most
	ringBase = ctlSlots * slotSize
)

// recordMagic opens every control record ("MRS1").
const recordMagic = 0x4d525331

// Record flags. Once set, a flag stays set in every later record of the
// same end, so a reader that sees a newer record than the delivery it
// handles loses nothing.
const (
	flagAccept = 1 << 0 // the writer accepted the stream: RingKey and Window are valid
	flagFin    = 1 << 1 // the writer will send no more data: FinAt is its total
	flagReset  = 1 << 2 // the writer aborted the stream: Code says why
)

// Reset codes carried in a record.
const (
	CodeAborted     uint32 = 1 // the application reset the stream
	CodeRefused     uint32 = 2 // nothing listens on the port
	CodeBacklog     uint32 = 3 // the listener's accept queue is full
	CodeProtocol    uint32 = 4 // the peer broke the stream protocol
	CodeClosed      uint32 = 5 // data arrived after the application closed the stream
	CodeUnreachable uint32 = 6 // the reverse flow could not be opened
	// CodeApplication and above are the application's own codes
	// (Conn.ResetCode), carried as they are.
	CodeApplication uint32 = 256
)

// record is one end's cumulative state as its peer sees it. Every field is
// monotonic (flags only gain bits, counters only grow), so records merge
// by taking the maximum, whatever order their copies are read in.
type record struct {
	Flags    uint32
	RingKey  uint32 // the writer's region key (where the peer writes)
	Window   uint32 // the writer's ring size in bytes
	Code     uint32 // reset code, with flagReset
	Consumed uint64 // bytes of the peer's data the writer's application has read
	FinAt    uint64 // with flagFin: the writer's total bytes sent
	Answers  uint64 // the flow id of the stream's first flow (the dialer's), binding the reply to the dial
}

// errRecord: a control slot that does not hold a record.
var errRecord = errors.New("stream: malformed control record")

// appendRecord encodes r (slotSize bytes).
func appendRecord(b []byte, r record) []byte {
	b = binary.BigEndian.AppendUint32(b, recordMagic)
	b = binary.BigEndian.AppendUint32(b, r.Flags)
	b = binary.BigEndian.AppendUint32(b, r.RingKey)
	b = binary.BigEndian.AppendUint32(b, r.Window)
	b = binary.BigEndian.AppendUint32(b, r.Code)
	b = binary.BigEndian.AppendUint32(b, 0) // reserved
	b = binary.BigEndian.AppendUint64(b, r.Consumed)
	b = binary.BigEndian.AppendUint64(b, r.FinAt)
	b = binary.BigEndian.AppendUint64(b, r.Answers)
	for len(b)%slotSize != 0 {
		b = append(b, 0)
	}
	return b
}

// parseRecord decodes a control slot.
func parseRecord(b []byte) (record, error) {
	if len(b) < 48 {
		return record{}, fmt.Errorf("%w: %d bytes", errRecord, len(b))
	}
	be := binary.BigEndian
	if be.Uint32(b) != recordMagic {
		return record{}, fmt.Errorf("%w: bad magic %#x", errRecord, be.Uint32(b))
	}
	r := record{
		Flags: be.Uint32(b[4:]), RingKey: be.Uint32(b[8:]), Window: be.Uint32(b[12:]), Code: be.Uint32(b[16:]),
		Consumed: be.Uint64(b[24:]), FinAt: be.Uint64(b[32:]), Answers: be.Uint64(b[40:]),
	}
	if r.Flags&^(flagAccept|flagFin|flagReset) != 0 {
		return record{}, fmt.Errorf("%w: unknown flags %#x", errRecord, r.Flags)
	}
	return r, nil
}

// merge folds a newer (or older) copy of the peer's record into r.
func (r *record) merge(n record) {
	if n.Flags&flagAccept != 0 && r.Flags&flagAccept == 0 {
		r.RingKey, r.Window, r.Answers = n.RingKey, n.Window, n.Answers
	}
	if n.Flags&flagReset != 0 && r.Flags&flagReset == 0 {
		r.Code = n.Code
	}
	if n.Flags&flagFin != 0 && r.Flags&flagFin == 0 {
		r.FinAt = n.FinAt
	}
	r.Flags |= n.Flags
	r.Consumed = max(r.Consumed, n.Consumed)
}
