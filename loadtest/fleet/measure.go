//go:build linux

package fleet

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/mrgw/mrgw/units"

	"github.com/mrgw/mrgw/internal/report"
	"github.com/mrgw/mrgw/region"
)

// What a row measures over a window: CPU, memory, gossip traffic and the
// episodes' delays.

// window is the start of a measurement window.
type window struct {
	lag   int // index into fleet.lags
	at    time.Time
	cpu   time.Duration
	stats map[string]region.Stats
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (f *fleet) window() window {
	f.lagMu.Lock()
	lag := len(f.lags)
	f.lagMu.Unlock()
	w := window{lag: lag, at: time.Now(), cpu: cpuTime(), stats: map[string]region.Stats{}}
	for _, n := range f.live() {
		w.stats[n.name] = n.c.Stats()
	}
	return w
}

// row closes a window: traffic per gateway (those alive throughout), CPU
// and memory per gateway, table sizes, and the events' times.
func (f *fleet) row(event string, w window, evs []*episode) Row {
	el := time.Since(w.at)
	cpu := cpuTime() - w.cpu
	r := Row{Event: event, WindowS: el.Seconds()}
	lv := f.live()
	var sent, recv, hb, hm, sb float64
	counted := 0
	for _, n := range lv {
		s := n.c.Stats()
		t := n.c.HealthTables()
		r.VerdictsMax = max(r.VerdictsMax, t.Verdicts)
		r.VerdictBound = max(r.VerdictBound, t.VerdictBound)
		r.OwnMax = max(r.OwnMax, t.Own)
		r.QueuedMax = max(r.QueuedMax, t.Queued)
		r.MemberSocketsMax = max(r.MemberSocketsMax, s.MemberSockets)
		r.HeldMax = max(r.HeldMax, t.Held)
		n.mu.Lock()
		r.ReportsMax = max(r.ReportsMax, n.reports.Len())
		r.ReportsBound = max(r.ReportsBound, n.reports.Bound())
		r.ReportsEvicted += n.reports.Evicted()
		n.mu.Unlock()
		r.BroadcastsLost += s.BroadcastsLost
		r.DownEvicted += s.HealthDownEvicted
		r.WatchDropped += s.HealthDropped
		s0, ok := w.stats[n.name]
		if !ok {
			continue
		}
		counted++
		sent += float64(s.PacketBytesSent + s.StreamBytesSent - s0.PacketBytesSent - s0.StreamBytesSent)
		recv += float64(s.PacketBytesReceived + s.StreamBytesReceived - s0.PacketBytesReceived - s0.StreamBytesReceived)
		sb += float64(s.StreamBytesSent - s0.StreamBytesSent)
		r.UpsHeld += s.HealthHeld - s0.HealthHeld
		r.DirectSent += s.HealthDirect - s0.HealthDirect
		r.DirectLost += s.HealthDirectLost - s0.HealthDirectLost
		r.Absorbed += s.HealthAbsorbed - s0.HealthAbsorbed
		hb += float64(s.HealthSentBytes - s0.HealthSentBytes)
		hm += float64(s.HealthSent - s0.HealthSent)
	}
	if counted > 0 {
		d := float64(counted) * el.Seconds()
		r.BytesSentPerS, r.BytesRecvPerS = sent/d, recv/d
		r.HealthBytesPerS, r.HealthMsgsPerS, r.StreamBytesPerS = hb/d, hm/d, sb/d
	}
	g := float64(max(len(lv), 1))
	r.CPUPerGateway = cpu.Seconds() / el.Seconds() / g
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.MemPerGateway = float64(ms.HeapInuse+ms.StackInuse) / g
	r.RSSPerGateway = float64(rss()) / g
	r.LoadAvg = report.LoadAvg()
	f.lagMu.Lock()
	lags := slices.Clone(f.lags[min(w.lag, len(f.lags)):])
	f.lagMu.Unlock()
	if len(lags) > 0 {
		r.SchedLagP99ms, r.SchedLagMaxMs = report.Quantile(lags, 0.99), slices.Max(lags)
	}
	var spans, deliveries []float64
	for _, ep := range evs {
		ep.mu.Lock()
		if ep.known {
			r.Known++
		}
		r.DampedUsers += ep.damped
		ep.mu.Unlock()
		spans = append(spans, units.Ms(ep.span()))
		for _, d := range ep.delays() {
			deliveries = append(deliveries, units.Ms(d))
		}
		r.Missed += ep.missed()
		r.Late += ep.later(f.o.EventTimeout)
	}
	r.Samples = len(evs)
	if len(spans) > 0 {
		r.P50ms, r.P99ms, r.MaxMs = report.Quantile(spans, 0.5), report.Quantile(spans, 0.99), slices.Max(spans)
		r.DeliveryP50ms, r.DeliveryP99ms = report.Quantile(deliveries, 0.5), report.Quantile(deliveries, 0.99)
	}
	return r
}

func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &size, &res); err != nil {
		return 0
	}
	return res * uint64(os.Getpagesize())
}
