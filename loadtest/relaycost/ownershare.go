package relaycost

import (
	"fmt"
	"os"

	"github.com/google/pprof/profile"
)

// ownerFunc is the endpoint's owner goroutine: the protocol and the relay
// of every connection run under it, one at a time. It is one stage of a
// pipeline: readers hand it batches and it hands senders theirs through
// queues, so it runs beside them rather than while they wait, and it
// bounds the endpoint only once it fills a core (ownerBound).
const ownerFunc = "github.com/mrgw/mrgw/netio.(*Endpoint).run"

// ownerShare reads a CPU profile and returns the share of its CPU samples
// taken under the owner goroutine. The profile is parsed with
// github.com/google/pprof/profile, the parser behind `go tool pprof`.
func ownerShare(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return shareUnder(p, ownerFunc)
}

// shareUnder is the share of p's CPU time in samples whose stack holds fn.
func shareUnder(p *profile.Profile, fn string) (float64, error) {
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			vi = i
		}
	}
	if vi < 0 {
		return 0, fmt.Errorf("not a CPU profile (sample types %v)", p.SampleType)
	}
	var total, under int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		total += v
		if stackHolds(s, fn) {
			under += v
		}
	}
	if total == 0 {
		return 0, fmt.Errorf("no CPU samples")
	}
	return float64(under) / float64(total), nil
}

// stackHolds reports whether fn is on s's stack (inlined frames included).
func stackHolds(s *profile.Sample, fn string) bool {
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil && l.Function.Name == fn {
				return true
			}
		}
	}
	return false
}

// ownerBound is the most cores' worth of work one endpoint keeps busy
// when share of it runs on the owner goroutine: the owner fills its core
// when the whole reaches 1/share cores. On k cores a gateway's throughput
// grows at most min(k, 1/share) times that of one, since the owner overlaps
// with the rest; Amdahl's 1/(share + (1 − share)/k) would hold only if the
// readers and senders waited while it ran.
func ownerBound(share float64) float64 {
	return 1 / share
}
