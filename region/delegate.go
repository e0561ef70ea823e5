package region

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// broadcastName identifies a health message in the gossip queue: by the
// verdict's gateway and plane, whoever reported it, so that a newer verdict
// replaces the older one instead of both being sent; but an up never
// replaces a down (the down is sent first: a plane that failed for a moment
// is still avoided for a moment, never silently).
func broadcastName(h HealthReport) string {
	class := "u"
	if notUp(h.State) {
		class = "d"
	}
	return h.Peer + "\x00" + h.Plane + "\x00" + class
}

// delegate receives memberlist's callbacks. Every method runs on one of
// memberlist's goroutines, some with memberlist's node lock held: none
// blocks and none calls back into memberlist.
type delegate struct{ c *Cluster }

func (d *delegate) NodeMeta(limit int) []byte {
	d.c.metaMu.Lock()
	defer d.c.metaMu.Unlock()
	if len(d.c.meta) > limit {
		// Cannot happen: EncodeMeta caps at MaxMetaSize. Announcing
		// nothing beats memberlist's panic on oversize metadata.
		return nil
	}
	return slices.Clone(d.c.meta)
}

func (d *delegate) NotifyMsg(b []byte) {
	core := d.c.core
	core.messages.Add(1)
	// Decoding copies every field out of b, which memberlist reuses after
	// we return.
	switch {
	case len(b) > 0 && b[0] == kindHealth:
		h, age, err := decodeHealth(b)
		if err == nil {
			err = checkHealth(&h)
		}
		if err != nil {
			core.badMessages.Add(1)
			core.log.Debug("dropping health message", "err", err)
			return
		}
		d.c.relay(h, age)
	case len(b) > 0 && b[0] == kindBatch:
		hs, ages, err := decodeBatch(b)
		if err != nil {
			core.badMessages.Add(1)
			core.log.Debug("dropping verdict batch", "err", err)
			return
		}
		for i, h := range hs {
			d.c.relay(h, ages[i])
		}
	case len(b) > 0 && b[0] == kindGoodbye:
		name, err := decodeGoodbye(b)
		if err != nil {
			core.badMessages.Add(1)
			return
		}
		if core.goodbye(name) {
			d.c.queue.queue("\x00goodbye\x00"+name, slices.Clone(b), true)
		}
	case len(b) > 0 && b[0] == kindMessage:
		if err := d.c.deliverMessage(b); err != nil {
			core.badMessages.Add(1)
			core.log.Debug("dropping gateway message", "err", err)
		}
	default:
		// An unknown kind: a newer gateway's message, or garbage.
		core.badMessages.Add(1)
	}
}

// relay stores a received report and, if it was news, passes it on: a
// broadcast reaches only a few members directly, so every member spreads
// what it has not seen before, and old news stops at once.
func (c *Cluster) relay(h HealthReport, age time.Duration) {
	received := c.core.now()
	if !c.core.addHealth(h, age, false) {
		return
	}
	if c.queueVerdict(h, age+c.core.now().Sub(received)) {
		c.core.own.relayed.Add(1)
	}
}

// queueVerdict queues h, sent age after it was measured, as a verdict
// batch entry: GetBroadcasts packs the entries of one reporter into one
// message (health.go, "verdict batch").
func (c *Cluster) queueVerdict(h HealthReport, age time.Duration) bool {
	entry, err := appendBatchEntry(nil, h, age)
	if err != nil {
		return false // validated when published or decoded
	}
	v1, err := appendHealth(nil, h, age)
	if err != nil {
		return false
	}
	c.queue.queueEntry(broadcastName(h), h.From, entry, v1, notUp(h.State))
	return true
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.c.queue.GetBroadcasts(overhead, limit)
}

// LocalState hands the health table to a member doing a push/pull (every
// join, and periodically), so a gateway that joins late or missed
// broadcasts learns the current path health without waiting for reports.
func (d *delegate) LocalState(join bool) []byte {
	rs, ages := d.c.core.freshHealth()
	msgs := make([][]byte, 0, len(rs))
	for i, h := range rs {
		if m, err := appendHealth(nil, h, ages[i]); err == nil {
			msgs = append(msgs, m)
		}
	}
	return appendHealthBatch(nil, msgs)
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	if len(buf) == 0 {
		return
	}
	msgs, err := decodeHealthBatch(buf)
	if err != nil {
		d.c.core.badMessages.Add(1)
		return
	}
	for _, m := range msgs {
		h, age, err := decodeHealth(m)
		if err == nil {
			err = checkHealth(&h)
		}
		if err != nil {
			d.c.core.badMessages.Add(1)
			continue
		}
		// Stored, not relayed: push/pull already reaches everyone in
		// time, and relaying a whole table per exchange would flood.
		d.c.core.addHealth(h, age, false)
	}
}

func (d *delegate) NotifyJoin(n *memberlist.Node) {
	d.c.guard.setMember(n.Name, nodeAddr(n), true, n.Name == d.c.cfg.Name)
	d.c.core.setMember(n.Name, nodeAddr(n), n.Meta, Alive)
}

func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	d.c.guard.setMember(n.Name, nodeAddr(n), true, n.Name == d.c.cfg.Name)
	d.c.core.setMember(n.Name, nodeAddr(n), n.Meta, Alive)
}

// NotifyLeave cannot tell a leave from a death: memberlist v0.7.0 never
// sets n.State (its real state field shadows it). Dead it is, unless the
// member said goodbye.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	d.c.guard.setMember(n.Name, nodeAddr(n), false, n.Name == d.c.cfg.Name)
	d.c.core.setMember(n.Name, nodeAddr(n), nil, Dead)
}

// NotifyConflict: two members claim one name. memberlist keeps the first
// and only logs; a gateway needs to know, because routing by name would
// send traffic to whichever it believes.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.c.core.conflicts.Add(1)
	if existing.Name == d.c.cfg.Name {
		addr := other.Address()
		d.c.nameHolder.Store(&addr)
	}
	d.c.guard.refuse(rNameConflict, other.Address(), "two gossip members claim one gateway name; the first is kept",
		"name", existing.Name, "existing", existing.Address())
}

// NotifyAlive keeps members that are not gateways (metadata we cannot
// read) out of the cluster instead of letting them gossip along.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if _, err := DecodeMeta(n.Meta); err != nil {
		d.c.core.badMeta.Add(1)
		d.c.guard.refuse(rNotGateway, n.Address(), "refused a gossip member that is not a gateway",
			"name", n.Name, "err", err)
		return fmt.Errorf("member %q is not a gateway: %w", n.Name, err)
	}
	return nil
}

func nodeAddr(n *memberlist.Node) netip.AddrPort {
	a, ok := netip.AddrFromSlice(n.Addr)
	if !ok {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a.Unmap(), n.Port)
}

// slogWriter turns memberlist's log lines ("[DEBUG] memberlist: ...") into
// slog records at debug level; the bracketed level is kept as an attribute
// so an operator can still pick out memberlist's warnings and errors (for
// example gossip that no installed key decrypts).
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := ""
	if strings.HasPrefix(msg, "[") {
		if i := strings.IndexByte(msg, ']'); i > 0 {
			level, msg = msg[1:i], strings.TrimSpace(msg[i+1:])
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	w.l.Log(context.Background(), slog.LevelDebug, msg, "source", "memberlist", "memberlist_level", level)
	return len(p), nil
}
