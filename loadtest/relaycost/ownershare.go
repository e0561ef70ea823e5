package relaycost

import (
	"fmt"
	"os"

	"github.com/google/pprof/profile"
)

// ownerFunc is the endpoint's owner goroutine: the protocol and the relay
// of every connection run under it, one at a time. Its share of a
// gateway's CPU is the serial part that bounds what more cores can give
// (Amdahl), until the endpoint is split into shards.
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

// amdahl is the most that k cores can speed up work of which the share
// serial runs on one goroutine: 1 / (serial + (1 − serial) / k).
func amdahl(serial float64, k int) float64 {
	return 1 / (serial + (1-serial)/float64(k))
}
