package tunemu

import (
	"fmt"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/internal/report"
)

// The emulator's self-check: a row measured through tunemu is only worth
// its figure if the emulator was not what limited the flows. A user-space
// forwarder can cost the flows in ways the link model never decided:
//
//   - it releases a packet late (its dispatcher woke late, or was not
//     scheduled): the flow sees a longer RTT and a queue that is not the
//     link's, and a burst when the backlog is written;
//   - its reader falls behind and the TUN device's ring overflows: losses
//     before the model (DeviceStats' TxDropped), or the MaxBuffered cap is
//     hit (Stats.Overflow);
//   - its loops are saturated: every packet waits for the CPU, not for
//     the link.
//
// Lateness is measured per packet (due time against the moment the write
// starts), busy time per loop (the reader from a read's return to the next
// read, the dispatcher while it writes), both on the emulator's monotonic
// clock; Check turns a window of them into a verdict.

// latBuckets is the histogram's size: 4 buckets per octave from 1 µs to
// 2^31 µs (36 minutes), and a bucket below 1 µs.
const latBuckets = 1 + 32*4

// latHist is a log-linear histogram of lateness (4 sub-buckets per power
// of two: a percentile is read to within 19%). One goroutine writes it;
// readers take a snapshot. Atomic counters keep the race detector quiet
// and cost an uncontended add per packet.
type latHist struct {
	n   [latBuckets]atomic.Uint64
	sum atomic.Int64 // ns
	max atomic.Int64 // ns
}

// latBucket returns d's bucket: 0 below 1 µs, then 4 per octave of µs.
func latBucket(d time.Duration) int {
	us := uint64(d / time.Microsecond)
	if d <= 0 || us == 0 {
		return 0
	}
	oct := bits.Len64(us) - 1 // us in [2^oct, 2^(oct+1))
	var sub uint64
	if oct >= 2 {
		sub = (us >> (oct - 2)) & 3
	} else {
		sub = (us << (2 - oct)) & 3
	}
	i := 1 + oct*4 + int(sub)
	return min(i, latBuckets-1)
}

// latUpper is the upper bound of bucket i, what a percentile reports: from
// 4 µs up it never understates lateness (below, buckets are whole µs).
func latUpper(i int) time.Duration {
	if i == 0 {
		return time.Microsecond
	}
	oct, sub := (i-1)/4, (i-1)%4
	base := time.Duration(1<<oct) * time.Microsecond
	return base + base*time.Duration(sub+1)/4
}

func (h *latHist) add(d time.Duration) {
	d = max(d, 0)
	h.n[latBucket(d)].Add(1)
	h.sum.Add(int64(d))
	if int64(d) > h.max.Load() {
		h.max.Store(int64(d)) // single writer
	}
}

// LatencySnapshot is a lateness histogram at one moment; Sub of two
// snapshots is the window between them.
type LatencySnapshot struct {
	N   [latBuckets]uint64
	Sum time.Duration
	// Max is the largest lateness since the emulator started (a maximum
	// cannot be subtracted: Sub keeps the later one's).
	Max time.Duration
}

func (h *latHist) snapshot() LatencySnapshot {
	var s LatencySnapshot
	for i := range h.n {
		s.N[i] = h.n[i].Load()
	}
	s.Sum, s.Max = time.Duration(h.sum.Load()), time.Duration(h.max.Load())
	return s
}

// Sub returns the window from o to s.
func (s LatencySnapshot) Sub(o LatencySnapshot) LatencySnapshot {
	r := LatencySnapshot{Sum: s.Sum - o.Sum, Max: s.Max}
	for i := range s.N {
		r.N[i] = s.N[i] - o.N[i]
	}
	return r
}

// Count is the packets in the snapshot.
func (s LatencySnapshot) Count() uint64 {
	var n uint64
	for _, c := range s.N {
		n += c
	}
	return n
}

// Quantile returns the upper bound of the bucket holding quantile q
// (0 < q ≤ 1), 0 when empty.
func (s LatencySnapshot) Quantile(q float64) time.Duration {
	n := s.Count()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.5)
	rank = min(max(rank, 1), n)
	var c uint64
	for i, k := range s.N {
		c += k
		if c >= rank {
			return latUpper(i)
		}
	}
	return latUpper(latBuckets - 1)
}

// Mean is the mean lateness.
func (s LatencySnapshot) Mean() time.Duration {
	if n := s.Count(); n > 0 {
		return s.Sum / time.Duration(n)
	}
	return 0
}

// Health is what the emulator measured about itself, cumulative since New;
// Sub of two gives a run's window.
type Health struct {
	// At is when it was taken, on the emulator's clock.
	At time.Duration
	// Late is the release lateness per direction (write start − due time).
	Late [2]LatencySnapshot
	// ReaderBusy is, per direction, the time its reader spent between a
	// read's return and the next read (parsing, the model, queueing);
	// the read's own copy is not in it. WriterBusy is the time the
	// dispatcher spent writing due packets into the other TUN (which
	// includes the receiving stack's work the write runs).
	ReaderBusy, WriterBusy [2]time.Duration
	// Overflow is packets refused at the MaxBuffered cap.
	Overflow uint64
	// TUNDrops are packets the TUN devices dropped before the reader saw
	// them (TxDropped of both sites; -1 when they could not be read).
	TUNDrops int64
	// Packets is the packets forwarded per direction.
	Packets [2]uint64
}

// Sub returns the window from o to h.
func (h Health) Sub(o Health) Health {
	r := Health{At: h.At - o.At, Overflow: h.Overflow - o.Overflow, TUNDrops: h.TUNDrops - o.TUNDrops}
	if h.TUNDrops < 0 || o.TUNDrops < 0 {
		r.TUNDrops = -1
	}
	for d := range 2 {
		r.Late[d] = h.Late[d].Sub(o.Late[d])
		r.ReaderBusy[d] = h.ReaderBusy[d] - o.ReaderBusy[d]
		r.WriterBusy[d] = h.WriterBusy[d] - o.WriterBusy[d]
		r.Packets[d] = h.Packets[d] - o.Packets[d]
	}
	return r
}

// Thresholds of Check. A row is flagged when the emulator was late or busy
// beyond them in its measured window.
const (
	// MaxLateP99 bounds the 99th percentile of release lateness: 1 ms is
	// 1% of a 100 ms round trip and 10% of a 10 ms one, well under the
	// queue a 1-BDP buffer adds, so a late tail this short cannot pass
	// for the link's queue.
	MaxLateP99 = time.Millisecond
	// MaxBusy bounds any loop's busy fraction of the window: above it the
	// loop is close to saturated and packets wait for it, not the link.
	MaxBusy = 0.8
)

// Verdict is a window's self-check: the figures and whether the emulator
// stayed out of the way.
type Verdict struct {
	OK bool
	// Why lists what failed (empty when OK).
	Why                    []string
	LateP50, LateP99       time.Duration
	LateMax, LateMean      time.Duration
	ReaderBusy, WriterBusy float64 // the busiest direction's fraction of the window
	Overflow               uint64
	TUNDrops               int64
	Packets                uint64
}

// Check judges a window (h = later.Sub(earlier)).
func (h Health) Check() Verdict {
	var late LatencySnapshot
	for d := range 2 {
		for i := range late.N {
			late.N[i] += h.Late[d].N[i]
		}
		late.Sum += h.Late[d].Sum
		late.Max = max(late.Max, h.Late[d].Max)
	}
	v := Verdict{LateP50: late.Quantile(0.5), LateP99: late.Quantile(0.99), LateMax: late.Max, LateMean: late.Mean(),
		Overflow: h.Overflow, TUNDrops: h.TUNDrops, Packets: h.Packets[0] + h.Packets[1]}
	if h.At > 0 {
		for d := range 2 {
			v.ReaderBusy = max(v.ReaderBusy, float64(h.ReaderBusy[d])/float64(h.At))
			v.WriterBusy = max(v.WriterBusy, float64(h.WriterBusy[d])/float64(h.At))
		}
	}
	if v.LateP99 > MaxLateP99 {
		v.Why = append(v.Why, fmt.Sprintf("released late: p99 %v > %v", v.LateP99, MaxLateP99))
	}
	if v.ReaderBusy > MaxBusy {
		v.Why = append(v.Why, fmt.Sprintf("reader busy %.0f%% > %.0f%%", 100*v.ReaderBusy, 100*MaxBusy))
	}
	if v.WriterBusy > MaxBusy {
		v.Why = append(v.Why, fmt.Sprintf("writer busy %.0f%% > %.0f%%", 100*v.WriterBusy, 100*MaxBusy))
	}
	if v.Overflow > 0 {
		v.Why = append(v.Why, fmt.Sprintf("%d packets over the buffer cap", v.Overflow))
	}
	switch {
	case v.TUNDrops > 0:
		v.Why = append(v.Why, fmt.Sprintf("%d packets dropped by the TUN devices", v.TUNDrops))
	case v.TUNDrops < 0:
		v.Why = append(v.Why, "TUN drops unknown")
	}
	v.OK = len(v.Why) == 0
	return v
}

// SetRowCheck copies a run's self-check into its report row (emulator_ok
// and emulator_check) and names a failed one in the note; a nil verdict
// (no check ran) leaves the row as it is.
func SetRowCheck(rw *report.Row, v *Verdict) {
	if v == nil {
		return
	}
	ok := v.OK
	rw.EmulatorOK = &ok
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	rw.EmulatorCheck = &report.EmuCheck{
		LateP50us: us(v.LateP50), LateP99us: us(v.LateP99), LateMaxus: us(v.LateMax),
		ReaderBusy: v.ReaderBusy, WriterBusy: v.WriterBusy, Overflow: v.Overflow, TUNDrops: v.TUNDrops,
		Packets: v.Packets, Why: v.Why,
	}
	if !ok {
		rw.Note = report.JoinNote(rw.Note, "emulator not ok: "+strings.Join(v.Why, "; "))
	}
}
