package scenario

import (
	"time"

	"github.com/mrgw/mrgw/metaroce"
)

// bulk keeps a connection busy with WRITEs of MsgSize bytes, at most
// Outstanding of them incomplete at once, into a region of the receiver.
type bulk struct {
	conn        *metaroce.Conn
	msgSize     int
	outstanding int
	src         []byte
	key         uint32
	regionSize  int
	next        int
	stream      uint32
	stopAt      time.Duration
	// perStream: outstanding bounds this stream's incomplete messages
	// (queued), not the connection's.
	perStream bool
	queued    int
}

const bulkKey = 1

func (b *bulk) fill(now time.Duration) {
	if b.conn == nil || !b.conn.Established() || (b.stopAt > 0 && now >= b.stopAt) {
		return
	}
	slots := b.regionSize / b.msgSize
	for (b.perStream && b.queued < b.outstanding) || (!b.perStream && b.conn.Queued() < b.outstanding) {
		addr := uint64((b.next % slots) * b.msgSize)
		if _, err := b.conn.Write(now, b.stream, b.key, addr, b.src[:b.msgSize]); err != nil {
			return
		}
		b.next++
		b.queued++
	}
}
