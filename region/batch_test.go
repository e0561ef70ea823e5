package region

import (
	"reflect"
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
		q.queueEntry(broadcastName(h), h.From, e, notUp(h.State))
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
	b, _ := appendBatchHeader(nil, "a1")
	b, _ = appendBatchEntry(b, own, 3*time.Second)
	b, _ = appendBatchEntry(b, other, 1500*time.Millisecond)
	b[batchHeaderSize("a1")-1] = 2
	hs, ages, err := decodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []HealthReport{own, other}
	want[1].RTT, want[1].Loss = 87654*time.Microsecond, float64(fraction16(0.125))/65535
	if !reflect.DeepEqual(hs, want) || !reflect.DeepEqual(ages, []time.Duration{3 * time.Second, 1500 * time.Millisecond}) {
		t.Fatalf("decoded %+v %v, want %+v", hs, ages, want)
	}
	// An entry on the reporter's own plane names no peer: 27 bytes with a
	// 2-byte plane name, against 52 for a version-1 message (with
	// memberlist's 3 bytes of framing).
	if e, _ := appendBatchEntry(nil, own, 0); len(e) != batchEntryBase+1+2 {
		t.Fatalf("own-plane entry is %d bytes", len(e))
	}
	for _, bad := range [][]byte{
		b[:len(b)-1],                              // truncated
		append(append([]byte{}, b...), 0),         // trailing byte
		{kindBatch, batchVersion, 2, 'a', '1', 0}, // empty
		{kindBatch, 2, 2, 'a', '1', 0},            // unknown version
	} {
		if _, _, err := decodeBatch(bad); err == nil {
			t.Errorf("decodeBatch(%x) accepted", bad)
		}
	}
}

// Many verdicts of one reporter travel in one message: the packet carries
// about twice as many as one message each did.
func TestBatchPacksOneMessagePerReporter(t *testing.T) {
	q := newHealthQueue(func() int { return 64 }, 4, func() int { return 10000 })
	var hs []HealthReport
	for i := range 100 {
		from := []string{"gw-r01-g01", "gw-r02-g03"}[i%2]
		hs = append(hs, verdict(from, from, "p"+string(rune('a'+i/2%26))+string(rune('a'+i/52)), pathmgr.Down, int64(i)))
	}
	queueVerdicts(t, q, hs...)
	const limit = 1400 - 12 // memberlist's budget after its compound header
	got := q.GetBroadcasts(3, limit)
	if len(got) != 2 {
		t.Fatalf("%d messages for two reporters, want 2", len(got))
	}
	n, size := 0, 0
	for _, m := range got {
		size += 3 + len(m)
		n += len(decodeAll(t, [][]byte{m}))
	}
	if size > limit {
		t.Fatalf("%d bytes packed in a %d-byte budget", size, limit)
	}
	v1, _ := appendHealth(nil, hs[0], 0)
	if old := limit / (3 + len(v1)); n < 2*old-4 {
		t.Fatalf("%d verdicts in a packet, version-1 messages fit %d", n, old)
	}
	t.Logf("%d verdicts per packet (version 1: %d)", n, limit/(3+len(v1)))
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
