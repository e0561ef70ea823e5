package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.2", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	in := fromBuildInfo(bi, true, "")
	if in.Version != "devel" || in.Revision != "0123456789abcdef0123456789abcdef01234567" || in.Time != "2026-01-02T03:04:05Z" || !in.Modified || in.GoVersion != "go1.26.2" {
		t.Fatalf("%+v", in)
	}
	s := in.String()
	for _, want := range []string{"devel (revision 0123456789ab, 2026-01-02T03:04:05Z, modified; go1.26.2 "} {
		if !strings.HasPrefix(s, want) {
			t.Errorf("String() = %q, want prefix %q", s, want)
		}
	}
	if got := fromBuildInfo(bi, true, "v1.2.3").Version; got != "v1.2.3" {
		t.Errorf("link-time version ignored: %q", got)
	}
	bi.Main.Version = "v0.0.0-20260102030405-0123456789ab"
	if got := fromBuildInfo(bi, true, "").Version; got != bi.Main.Version {
		t.Errorf("module version ignored: %q", got)
	}
	none := fromBuildInfo(nil, false, "")
	if none.Version != "devel" || none.Revision != Unknown || none.Time != Unknown {
		t.Errorf("no build info: %+v", none)
	}
	if s := none.String(); strings.Contains(s, Unknown+",") || !strings.Contains(s, "revision unknown;") {
		t.Errorf("no build info: %q", s)
	}
}
