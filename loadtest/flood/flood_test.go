//go:build linux

package flood

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// knownUncounted are the datagram targets whose junk the gateway does not
// count in any exported counter yet (docs/results/flood.md): the guarded
// gossip transport counts junk by reason, but in the lab (gossip not
// encrypted) about 3% of random junk passes its format check and
// memberlist drops it uncounted. The test logs their figures instead of
// failing on them; when the gateway counts them, take them out of this
// list. (The control listener was here until it answered every Initial
// without a token with a Retry and counted what quic-go drops.)
var knownUncounted = map[string]string{
	TargetGossipUDP: "the lab's gossip is not encrypted: junk that passes the guard's format check reaches memberlist, which drops it uncounted",
}

// knownUnbounded are the targets whose flood grows the process without a
// bound the gateway sets; the flood is stopped at Options.MaxGoroutines and
// the test logs it. None now: the control listener, which started a quic-go
// connection (about four goroutines, for the handshake timeout) per junk
// Initial, keeps no state before a Retry validated the source.
var knownUnbounded = map[string]string{}

// TestFloodShort is the short form of `mrgw-lab loadtest flood`: 50,000
// datagrams (or 200 connections held) against each socket of the gateway
// that carries a transfer. It asserts correctness only, never a rate or a
// time: a new host registers with the flooded gateway, no gateway is
// declared dead, the transfer arrives byte-exact, the flood did not have
// to be stopped for memory or goroutines, and every datagram that reached
// a socket with a drop counter is accounted for (in the gateway's counters
// or, where the test documents a gap, in the counters it keeps unexported);
// and every counter the gateway exports, scraped before and after each
// flood, never went back, and no drop or refusal counter grew by more than
// the datagrams sent.
func TestFloodShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway lab once per target")
	}
	for _, target := range AllTargets {
		t.Run(target, func(t *testing.T) {
			o := Options{Targets: []string{target}, Count: 50_000, Duration: 2 * time.Second,
				Before: time.Second, After: 3 * time.Second, Conns: 200, ConnTotal: 400,
				MaxRSSMB: 3072, MaxGoroutines: 100_000, RegisterTimeout: transferOpenTimeout}
			if raceEnabled {
				// The race detector allows 8,128 goroutines.
				o.MaxGoroutines = 7_500
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rows, err := Run(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			r := rows[0]
			var tbl bytes.Buffer
			_ = WriteTable(&tbl, rows)
			t.Log("\n" + tbl.String())
			if r.Error != "" {
				t.Fatalf("error: %s", r.Error)
			}
			if r.DatagramsSent == 0 {
				t.Fatal("nothing sent")
			}
			switch {
			case r.Aborted != "" && knownUnbounded[target] != "":
				t.Logf("known gap (%s): flood stopped: %s", knownUnbounded[target], r.Aborted)
			case r.Aborted != "":
				t.Errorf("flood stopped: %s", r.Aborted)
			}
			// Every counter, after every flood: none went back, and no
			// drop or refusal counter jumped beyond what was sent.
			for _, f := range r.CounterFaults {
				t.Errorf("counter: %s", f)
			}
			if r.Lockout {
				t.Errorf("lockout: %d registrations, failures %v", r.Registrations, r.RegisterFails)
			}
			if r.FalseDeaths > 0 {
				t.Errorf("false deaths: %v", r.Deaths)
			}
			if r.WANLosses > 0 {
				t.Logf("WAN connections lost (not asserted: CPU starvation of the one process can cause it): %v", r.Deaths)
			}
			if !r.TransferByteExact {
				t.Errorf("transfer not byte-exact: %+v", r.Transfer)
			}
			// Memory: the whole process (four gateways, the emulator, the
			// hosts and the flooder) within what one gateway may hold
			// (limits.memory_bytes, the fixed overhead and its hosts'); the
			// race detector's shadow memory is not the gateway's.
			if !r.WithinBound && !raceEnabled {
				t.Errorf("RSS peak %.0f MiB above the flooded gateway's bound %.0f MiB", r.RSSPeakMB, r.BoundMB)
			}
			switch {
			case target == TargetAdmin:
				// At its cap the admin server closes the connection that
				// waited longest for a request, and counts it (evicted);
				// it used to let them wait for the idle timeout, counted
				// nowhere.
				t.Logf("%d connections: %d closed by the gateway, %d counted (%s)", r.DatagramsSent, r.ServerClosed, r.Counted,
					strings.Join(sortedKeys(r.DroppedCounted), " "))
				if r.ServerClosed > 0 && r.Counted == 0 {
					t.Errorf("%d admin connections closed by the gateway, none counted", r.ServerClosed)
				}
			case r.Unit != "datagrams":
				t.Logf("%d connections: the gateway has no connection counter to check (%d closed by it)", r.DatagramsSent, r.ServerClosed)
			case knownUncounted[target] != "":
				t.Logf("known gap (%s): %d of %d datagrams counted", knownUncounted[target], r.Counted, r.DatagramsSent)
			default:
				if r.Counted == 0 {
					t.Errorf("no drop counter moved for %d datagrams", r.DatagramsSent)
				}
				if r.Unaccounted > 0 {
					t.Errorf("%d of %d datagrams in no counter at all (counted %d: %s)", r.Unaccounted, r.DatagramsSent, r.Counted,
						strings.Join(sortedKeys(r.DroppedCounted), " "))
				}
			}
		})
	}
}
