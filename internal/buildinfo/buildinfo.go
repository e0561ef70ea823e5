// Package buildinfo says which build of mrgw is running: the version, the
// VCS revision and time the Go toolchain stamped into the binary, and the Go
// version. `mrgw version`, `mrgw --version` and the mrgw_build_info metric
// all read [Get], so they cannot disagree.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version overrides the module version when set at link time:
//
//	go build -ldflags "-X github.com/mrgw/mrgw/internal/buildinfo.version=v1.2.3" ./cmd/mrgw
var version string

// Unknown is the value of a field the binary does not carry (built with
// -buildvcs=false, or outside a VCS checkout).
const Unknown = "unknown"

// Info describes one build.
type Info struct {
	// Version is the link-time version if set, else the main module's
	// version as the Go toolchain stamped it (a tag, or a pseudo-version
	// from the VCS revision), else "devel".
	Version string
	// Revision is the VCS commit (full hash), Time its commit time
	// (RFC 3339), Modified whether the work tree had uncommitted changes.
	// Revision and Time are Unknown when the build carries no VCS
	// information.
	Revision string
	Time     string
	Modified bool
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// Get reads the build information of the running binary.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(bi, ok, version)
}

func fromBuildInfo(bi *debug.BuildInfo, ok bool, linked string) Info {
	in := Info{Version: linked, Revision: Unknown, Time: Unknown, GoVersion: runtime.Version()}
	if !ok || bi == nil {
		if in.Version == "" {
			in.Version = "devel"
		}
		return in
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	if in.Version == "" {
		in.Version = bi.Main.Version
	}
	if in.Version == "" || in.Version == "(devel)" {
		in.Version = "devel"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				in.Revision = s.Value
			}
		case "vcs.time":
			if s.Value != "" {
				in.Time = s.Value
			}
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// ShortRevision is the first 12 hex digits of the revision (or Unknown).
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 && i.Revision != Unknown {
		return i.Revision[:12]
	}
	return i.Revision
}

// String is the one-line form `mrgw version` prints after the program name:
// "v1.2.3 (revision 0123456789ab, 2026-01-02T03:04:05Z, modified; go1.26.2)".
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (revision %s", i.Version, i.ShortRevision())
	if i.Time != Unknown {
		fmt.Fprintf(&b, ", %s", i.Time)
	}
	if i.Modified {
		b.WriteString(", modified")
	}
	fmt.Fprintf(&b, "; %s %s/%s)", i.GoVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
