package relaycost

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
)

// TestOwnerShare: the owner's share is the CPU of the samples with the
// owner's function anywhere on their stack, over all samples, read back
// from a profile file as the gateway writes it.
func TestOwnerShare(t *testing.T) {
	owner := &profile.Function{ID: 1, Name: ownerFunc}
	recv := &profile.Function{ID: 2, Name: "github.com/mrgw/mrgw/metaroce.(*Endpoint).Receive"}
	reader := &profile.Function{ID: 3, Name: "github.com/mrgw/mrgw/netio.(*Endpoint).readLoop"}
	ownerLoc := &profile.Location{ID: 1, Line: []profile.Line{{Function: owner}}}
	recvLoc := &profile.Location{ID: 2, Line: []profile.Line{{Function: recv}}}
	readerLoc := &profile.Location{ID: 3, Line: []profile.Line{{Function: reader}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Function:   []*profile.Function{owner, recv, reader},
		Location:   []*profile.Location{ownerLoc, recvLoc, readerLoc},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{recvLoc, ownerLoc}, Value: []int64{3, 30e6}}, // under the owner
			{Location: []*profile.Location{ownerLoc}, Value: []int64{1, 10e6}},          // the owner itself
			{Location: []*profile.Location{readerLoc}, Value: []int64{6, 60e6}},         // a reader
		},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gw.pprof")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ownerShare(path)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-0.4) > 1e-9 {
		t.Errorf("owner share %v, want 0.4", got)
	}
	if got := ownerBound(0.4); math.Abs(got-2.5) > 1e-9 {
		t.Errorf("ownerBound(0.4) = %v, want 2.5 cores", got)
	}
	if _, err := shareUnder(&profile.Profile{SampleType: []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}}}, ownerFunc); err == nil {
		t.Error("a profile without CPU samples gave a share")
	}
}

// TestGainBound: at GOMAXPROCS 2 a gateway that costs 10% more per Gbit/s
// than at 1 carries at most 2/1.1 of it on cores of its own, one that costs
// less at most twice; an unknown cost gives no bound.
func TestGainBound(t *testing.T) {
	if got := gainBound(1, 2, 0.10, 0.11); math.Abs(got-2/1.1) > 1e-9 {
		t.Errorf("gainBound(1, 2, 0.10, 0.11) = %v, want %v", got, 2/1.1)
	}
	if got := gainBound(1, 2, 0.12, 0.10); got != 2 {
		t.Errorf("gainBound(1, 2, 0.12, 0.10) = %v, want 2 (no more than linear)", got)
	}
	if got := gainBound(1, 2, 0, 0.11); got != 0 {
		t.Errorf("gainBound with no first cost = %v, want 0", got)
	}
}
