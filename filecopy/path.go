package filecopy

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mrgw/mrgw/stream"
)

// ErrNotAllowed: a path escapes the receiver's root (absolute, "..", a
// symbolic link out of it) or names the copy's own working files.
var ErrNotAllowed = errors.New("filecopy: path not allowed")

// Suffixes of a large file's working files beside its destination:
// ".NAME" + partSuffix is the copy in progress, ".NAME" + stateSuffix its
// resume state. Entries with these names are refused.
const (
	partSuffix  = ".mrgw-part"
	stateSuffix = ".mrgw-state"
)

// checkRel checks that p is a clean relative path below the root: not
// empty, not absolute, no "." or ".." component, no empty component, no
// NUL, at most maxPath bytes, and not one of the copy's working names.
// The receiver also resolves it through an os.Root, which refuses
// symbolic links that lead out of the root.
func checkRel(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty path", ErrNotAllowed)
	case len(p) > maxPath:
		return fmt.Errorf("%w: path of %d bytes (at most %d)", ErrNotAllowed, len(p), maxPath)
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
		return fmt.Errorf("%w: %q: not UTF-8 or holds NUL", ErrNotAllowed, p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w: %q is absolute", ErrNotAllowed, p)
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "" || c == ".":
			return fmt.Errorf("%w: %q is not a clean path", ErrNotAllowed, p)
		case c == "..":
			return fmt.Errorf("%w: %q leaves its directory", ErrNotAllowed, p)
		case strings.HasSuffix(c, partSuffix) || strings.HasSuffix(c, stateSuffix):
			return fmt.Errorf("%w: %q ends in a name the copy reserves for its working files", ErrNotAllowed, p)
		}
	}
	return nil
}

// workNames returns the temporary file and the state file of rel.
func workNames(rel string) (part, state string) {
	dir, base := path.Split(rel)
	return dir + "." + base + partSuffix, dir + "." + base + stateSuffix
}

// joinRel joins the destination directory and an entry's path.
func joinRel(dest, p string) string {
	if dest == "" {
		return p
	}
	return dest + "/" + p
}

// ParseTarget parses REGION/ENDPOINT:PORT[/DEST-DIR], the destination of
// a copy: the receiver's stream address and a directory below its root
// ("" for the root itself).
func ParseTarget(s string) (stream.Addr, string, error) {
	bad := func(why string) (stream.Addr, string, error) {
		return stream.Addr{}, "", fmt.Errorf("filecopy: destination %q: %s (want REGION/ENDPOINT:PORT[/DIR])", s, why)
	}
	region, rest, ok := strings.Cut(s, "/")
	if !ok || region == "" {
		return bad("no region")
	}
	endpoint, rest, ok := strings.Cut(rest, ":")
	if !ok || endpoint == "" || strings.Contains(endpoint, "/") {
		return bad("no endpoint:port")
	}
	port, dest, _ := strings.Cut(rest, "/")
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return bad(fmt.Sprintf("port %q is not 1 to 65535", port))
	}
	if len(region) > 255 || len(endpoint) > 255 {
		return bad("region or endpoint longer than 255 bytes")
	}
	dest = strings.TrimRight(dest, "/")
	if dest != "" {
		if err := checkRel(dest); err != nil {
			return bad(err.Error())
		}
	}
	return stream.Addr{Region: region, Endpoint: endpoint, Port: uint16(p)}, dest, nil
}
