package region

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

func verdict(from, peer, plane string, st pathmgr.State, at int64) HealthReport {
	return HealthReport{From: from, Peer: peer, Plane: plane, State: st, At: time.Unix(1700000000, at)}
}

func queueVerdicts(t *testing.T, q *healthQueue, hs ...HealthReport) {
	t.Helper()
	for _, h := range hs {
		e, err := appendBatchEntry(nil, h, 0)
		if err != nil {
			t.Fatal(err)
		}
		v1, err := appendHealth(nil, h, 0)
		if err != nil {
			t.Fatal(err)
		}
		q.queueEntry(broadcastName(h), h.From, e, v1, notUp(h.State))
	}
}

// decodeAll decodes the batches GetBroadcasts returned.
func decodeAll(t *testing.T, msgs [][]byte) []HealthReport {
	t.Helper()
	var all []HealthReport
	for _, m := range msgs {
		hs, _, err := decodeBatch(m)
		if err != nil {
			t.Fatalf("batch %x: %v", m, err)
		}
		all = append(all, hs...)
	}
	return all
}

func TestBatchCodec(t *testing.T) {
	own := verdict("a1", "a1", "p0", pathmgr.Down, 1)
	other := sampleHealth() // from a1, peer b2
	third := verdict("c3", "b2", "p1", pathmgr.Probing, 2)
	e1, _ := appendBatchEntry(nil, own, 3*time.Second)
	e2, _ := appendBatchEntry(nil, other, 1500*time.Millisecond)
	e3, _ := appendBatchEntry(nil, third, 0)
	b, err := appendBatchGroup([]byte{kindBatch, batchVersion}, "a1", [][]byte{e1, e2})
	if err == nil {
		b, err = appendBatchGroup(b, "c3", [][]byte{e3})
	}
	if err != nil {
		t.Fatal(err)
	}
	hs, ages, err := decodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []HealthReport{own, other, third}
	want[1].Loss = float64(fraction16(0.125)) / 65535
	if !reflect.DeepEqual(hs, want) || !reflect.DeepEqual(ages, []time.Duration{3 * time.Second, 1500 * time.Millisecond, 0}) {
		t.Fatalf("decoded %+v %v, want %+v", hs, ages, want)
	}
	// An entry on the reporter's own plane names no peer: 26 bytes with a
	// 3-byte plane name, against 45 + 3 for a version-1 message.
	if e, _ := appendBatchEntry(nil, verdict("g001-r01", "g001-r01", "p03", pathmgr.Down, 1), 0); len(e) != 26 {
		t.Fatalf("own-plane entry is %d bytes", len(e))
	}
	for _, bad := range [][]byte{
		b[:len(b)-1],                              // truncated
		append(append([]byte{}, b...), 0),         // a trailing byte: a group cut short
		{kindBatch, batchVersion},                 // no group
		{kindBatch, batchVersion, 2, 'a', '1', 0}, // an empty group
		{kindBatch, 2, 2, 'a', '1', 1},            // unknown version
	} {
		if _, _, err := decodeBatch(bad); err == nil {
			t.Errorf("decodeBatch(%x) accepted", bad)
		}
	}
	if _, err := appendBatchGroup(nil, "a1", nil); err == nil {
		t.Error("an empty group encoded")
	}
}

// The verdicts due travel in one message per packet, grouped by reporter:
// a packet carries 1.3 to 1.9 times as many as with one message each.
func TestBatchPacksOneMessagePerPacket(t *testing.T) {
	const limit = 1400 - 2 - 29 // memberlist's budget: its compound header and encryption
	v1, _ := appendHealth(nil, verdict("g001-r01", "g001-r01", "p03", pathmgr.Down, 0), 0)
	old := limit / (3 + len(v1))
	for _, tc := range []struct {
		reporters int
		atLeast   int
	}{{1, 52}, {2, 50}, {100, 37}} {
		q := newHealthQueue(func() int { return 64 }, 4, func() int { return 10000 })
		for i := range 100 {
			from := fmt.Sprintf("g%03d-r01", i%tc.reporters)
			queueVerdicts(t, q, verdict(from, from, fmt.Sprintf("p%02d", i/tc.reporters), pathmgr.Down, int64(i)))
		}
		got := q.GetBroadcasts(3, limit)
		if len(got) != 1 || 3+len(got[0]) > limit {
			t.Fatalf("%d reporters: %d messages, want one of at most %d bytes", tc.reporters, len(got), limit)
		}
		n := len(decodeAll(t, got))
		if n < tc.atLeast {
			t.Errorf("%d reporters: %d verdicts in a packet, want at least %d (version 1: %d)", tc.reporters, n, tc.atLeast, old)
		}
		t.Logf("%d reporters: %d verdicts in a %d-byte packet (version 1: %d)", tc.reporters, n, limit, old)
	}
}

// The supersede rule: a later batch of a reporter replaces an earlier
// entry only where it covers the same verdict, and an up never replaces a
// down that was not sent. A down in an older batch survives a newer batch
// that does not cover it, and one that covers it with an up.
func TestBatchDownSurvivesNewerBatch(t *testing.T) {
	q := newHealthQueue(func() int { return 4 }, 1, func() int { return 100 })
	q.limit = func(int, int) int { return 1 }
	queueVerdicts(t, q, verdict("a", "a", "p1", pathmgr.Down, 1), verdict("a", "a", "p2", pathmgr.Down, 2))
	// The newer batch: p2 up again, p3 down; it says nothing of p1.
	queueVerdicts(t, q, verdict("a", "a", "p2", pathmgr.Up, 3), verdict("a", "a", "p3", pathmgr.Down, 4))
	got := map[string]pathmgr.State{}
	var states []string
	for _, h := range decodeAll(t, q.GetBroadcasts(0, 1400)) {
		states = append(states, h.Plane+" "+h.State.String())
		got[h.Plane+" "+h.State.String()] = h.State
	}
	for _, want := range []string{"p1 " + pathmgr.Down.String(), "p2 " + pathmgr.Down.String(),
		"p2 " + pathmgr.Up.String(), "p3 " + pathmgr.Down.String()} {
		if _, ok := got[want]; !ok {
			t.Errorf("%q not sent; sent %v", want, states)
		}
	}
	if len(states) != 4 || q.len() != 0 {
		t.Fatalf("sent %v, %d left queued", states, q.len())
	}
	// A newer down of the same verdict replaces the older one (the same
	// news, later), as version-1 messages did.
	queueVerdicts(t, q, verdict("a", "a", "p1", pathmgr.Down, 5), verdict("a", "a", "p1", pathmgr.Probing, 6))
	hs := decodeAll(t, q.GetBroadcasts(0, 1400))
	if len(hs) != 1 || hs[0].State != pathmgr.Probing {
		t.Fatalf("sent %+v, want the newer probing only", hs)
	}
}

// An entry leaves the queue after its own retransmit limit, whatever
// batches it travelled in: an entry queued later is sent its full count.
func TestBatchEntriesCountTheirOwnTransmissions(t *testing.T) {
	q := newHealthQueue(func() int { return 4 }, 1, func() int { return 100 })
	q.limit = func(int, int) int { return 3 }
	queueVerdicts(t, q, verdict("a", "a", "p1", pathmgr.Down, 1))
	q.GetBroadcasts(0, 1400)
	q.GetBroadcasts(0, 1400)
	queueVerdicts(t, q, verdict("a", "a", "p2", pathmgr.Down, 2))
	var counts []int
	for range 5 {
		counts = append(counts, len(decodeAll(t, q.GetBroadcasts(0, 1400))))
	}
	if want := []int{2, 1, 1, 0, 0}; !reflect.DeepEqual(counts, want) {
		t.Fatalf("entries per round %v, want %v", counts, want)
	}
}

// While a member does not read batches (CapHealthBatch), entries go out
// as version-1 messages, each counted as before.
func TestBatchFallsBackToVersion1(t *testing.T) {
	q := newHealthQueue(func() int { return 4 }, 1, func() int { return 100 })
	q.limit = func(int, int) int { return 1 }
	batch := false
	q.batch = func() bool { return batch }
	queueVerdicts(t, q, verdict("a", "a", "p1", pathmgr.Down, 1), verdict("b", "a", "p2", pathmgr.Down, 2))
	got := q.GetBroadcasts(3, 1369)
	if len(got) != 2 {
		t.Fatalf("%d messages, want 2 version-1 messages", len(got))
	}
	for _, m := range got {
		if h, _, err := decodeHealth(m); err != nil || h.Peer != "a" {
			t.Fatalf("%x: %+v %v", m, h, err)
		}
	}
	batch = true
	queueVerdicts(t, q, verdict("a", "a", "p1", pathmgr.Up, 3), verdict("b", "a", "p2", pathmgr.Up, 4))
	if got := q.GetBroadcasts(3, 1369); len(got) != 1 || len(decodeAll(t, got)) != 2 {
		t.Fatalf("%d messages, want one batch of 2", len(got))
	}
}

// The capability gate at the core: verdicts go out in batches while every
// alive member announces CapHealthBatch, as version-1 messages from the
// moment one alive member does not (it joins, or an upgraded one comes
// back on its old build), and in batches again once that member is dead,
// has left, or announces the capability (upgraded in place: a metadata
// update). The queue is the one New builds (newCoreQueue), members come
// and go through setMember and goodbye as memberlist's callbacks do.
func TestBatchCapabilityGateFollowsMembers(t *testing.T) {
	c, _ := fakeCore(t, Config{})
	q := newCoreQueue(c, 4)
	addr := netip.MustParseAddrPort("127.0.0.1:1")
	join := func(name string, caps ...string) {
		m := testMeta("r1", 1)
		m.Capabilities = caps
		b, err := EncodeMeta(m)
		if err != nil {
			t.Fatal(err)
		}
		c.setMember(name, addr, b, Alive)
	}
	at := int64(0)
	// kinds queues one down verdict and reports the kinds of the messages
	// GetBroadcasts packs it in: "b" a batch, "h" version 1.
	kinds := func() string {
		at++
		queueVerdicts(t, q, verdict("self", "self", fmt.Sprintf("p%d", at), pathmgr.Down, at))
		var k []byte
		for {
			msgs := q.GetBroadcasts(3, 1369)
			if len(msgs) == 0 {
				break
			}
			for _, m := range msgs {
				if !slices.Contains(k, m[0]) {
					k = append(k, m[0])
				}
			}
		}
		return string(k)
	}
	join("self", "metaroce-v1", CapHealthBatch)
	join("a1", CapHealthBatch)
	join("b1", "metaroce-v1", CapHealthBatch)
	for _, step := range []struct {
		what string
		do   func()
		want string
	}{
		{"every member reads batches", func() {}, "b"},
		{"old1 joins without the capability", func() { join("old1", "metaroce-v1") }, "h"},
		{"old1 dies", func() { c.setMember("old1", addr, nil, Dead) }, "b"},
		{"old1 comes back, still old", func() { join("old1", "metaroce-v1") }, "h"},
		{"old1 upgraded in place (metadata update)", func() { join("old1", "metaroce-v1", CapHealthBatch) }, "b"},
		{"b1 downgraded (rolled back)", func() { join("b1", "metaroce-v1") }, "h"},
		{"b1 says goodbye and leaves", func() { c.goodbye("b1"); c.setMember("b1", addr, nil, Dead) }, "b"},
		{"old2 joins without the capability", func() { join("old2") }, "h"},
		{"old2 dies, then its goodbye arrives", func() { c.setMember("old2", addr, nil, Dead); c.goodbye("old2") }, "b"},
		{"b1 returns upgraded", func() { join("b1", CapHealthBatch) }, "b"},
	} {
		step.do()
		if got := kinds(); got != step.want {
			t.Fatalf("%s: verdict sent as %q, want %q (alive %d)", step.what, got, step.want, c.aliveCount())
		}
	}
}
