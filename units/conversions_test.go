package units

import (
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// notConversions are the products and quotients by 8 in the module that
// are not a rate changing unit, each with why, as "path: expression"
// (gofmt's spelling). Every other one fails the test until it is written
// with Bits()/Bytes(), or listed here when it is not a conversion.
// Multiples of a duration constant (8 * time.Second) need no entry.
var notConversions = map[string]string{
	// The SACK bitmap: SackBits bits take SackBits/8 bytes; bit i lives
	// in byte i/8.
	"metaroce/wire.go: SackBits / 8":       "bitmap length",
	"metaroce/wire.go: i / 8":              "bitmap index",
	"metaroce/recvwin.go: j / 8":           "bitmap index",
	"conformance/wire.go: sackBits / 8":    "bitmap length",
	"conformance/wire.go: i / 8":           "bitmap index",
	"conformance/vectors.go: sackBits / 8": "bitmap length",
	// RFC 6298 smoothing: gains of 1/8.
	"pathmgr/path.go: (7*p.SRTT + rtt) / 8":           "SRTT gain 1/8",
	"tunnel/control/session.go: (7*s.srtt + rtt) / 8": "SRTT gain 1/8",
	"cc/aimd.go: (d - p.rttDev) / 8":                  "RTT deviation gain 1/8",
	"cc/aimd_overflow.go: (rate - o.floor) / 8":       "random-loss floor gain 1/8",
	"loadtest/recovery/recovery.go: rtt / 8":          "sampling step of an eighth of a round trip",
	"metaroce/sent.go: i / 8":                         "SACK bitmap index",
	"metaroce/sent.go: (seq - base) / 8":              "SACK bitmap index",
	// filecopy's bitmap of verified chunks.
	"filecopy/state.go: (n + 7) / 8":        "bitmap length",
	"filecopy/state.go: i / 8":              "bitmap index",
	"filecopy/state.go: uint64(len(b)) * 8": "bitmap length in bits",
	"filecopy/sendloop.go: (n + 7) / 8":     "bitmap length",
	// PINGs: eight per dead-after, so that a peer silent for the
	// dead-after has missed eight answers, not one.
	"gateway/gateway.go: proto.DeadAfter / 8": "PING interval, an eighth of the dead-after",
	"host/host.go: c.DeadAfter / 8":           "PING interval, an eighth of the dead-after",
	// Counts of things.
	"cc/aimd_growth.go: 8 * a.pkt":              "eight packets",
	"loadtest/chaos/chaos.go: 8 * o.Window":     "eight windows of message slots",
	"loadtest/peers/tunnel.go: 8 * l.BDP()":     "eight bandwidth-delay products",
	"sim/scenario/run.go: 8 * pc.ProbeInterval": "probe back-off limit",
	// A packet's serialisation time in exact integer nanoseconds (64- and
	// 128-bit products): one datagram's size in bits, not a rate's unit.
	// The simulator imports nothing of the project.
	"netem/model.go: uint64(size) * 8":   "serialisation of one packet",
	"sim/link.go: uint64(l.size(d)) * 8": "serialisation of one packet",
}

// TestNoBareConversions: outside this package no non-test Go file of the
// module multiplies or divides a rate (or bytes becoming a rate) by 8:
// BitRate.Bytes and ByteRate.Bits are the one place. Every product or
// quotient with a literal 8 ("rate * 8", "capacity / 8", "8 * bps",
// "float64(n) * 8 / secs", "r /= 8") is flagged unless it is a multiple
// of a duration constant or listed in notConversions.
func TestNoBareConversions(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	var found []string
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			n := d.Name()
			if rel != "." && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" || n == "vendor" || rel == "units") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, c := range conversions(fset, f) {
			key := rel + ": " + c.expr
			if _, ok := notConversions[key]; ok {
				seen[key] = true
				continue
			}
			found = append(found, rel+":"+strconv.Itoa(c.line)+": "+c.expr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(found)
	for _, f := range found {
		t.Errorf("%s: a bare bits/bytes conversion; use units.BitRate.Bytes or units.ByteRate.Bits (or list it in notConversions if it is not one)", f)
	}
	for k := range notConversions {
		if !seen[k] {
			t.Errorf("notConversions lists %q, which is no longer in the module: remove it", k)
		}
	}
}

type conversion struct {
	line int
	expr string
}

// conversions returns the products and quotients by a literal 8 in f
// that look like a unit conversion of a rate.
func conversions(fset *token.FileSet, f *ast.File) []conversion {
	var out []conversion
	ast.Inspect(f, func(n ast.Node) bool {
		var operand ast.Expr
		switch e := n.(type) {
		case *ast.BinaryExpr:
			switch {
			case (e.Op == token.MUL || e.Op == token.QUO) && isEight(e.Y):
				operand = e.X
			case e.Op == token.MUL && isEight(e.X):
				operand = e.Y
			}
		case *ast.AssignStmt:
			if (e.Tok == token.MUL_ASSIGN || e.Tok == token.QUO_ASSIGN) && len(e.Rhs) == 1 && isEight(e.Rhs[0]) {
				operand = e.Lhs[0]
			}
		}
		if operand == nil {
			return true
		}
		if !durationConstant(operand) {
			out = append(out, conversion{fset.Position(n.Pos()).Line, gofmt(fset, n)})
		}
		return true
	})
	return out
}

func isEight(e ast.Expr) bool {
	for {
		p, ok := e.(*ast.ParenExpr)
		if !ok {
			break
		}
		e = p.X
	}
	l, ok := e.(*ast.BasicLit)
	if !ok || (l.Kind != token.INT && l.Kind != token.FLOAT) {
		return false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(l.Value, "_", ""), 64)
	return err == nil && v == 8
}

// durationConstant reports whether e is built on a constant of package
// time (8 * time.Second): a duration, not a rate.
func durationConstant(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" {
				found = true
			}
		}
		return !found
	})
	return found
}

func gofmt(fset *token.FileSet, n ast.Node) string {
	var b strings.Builder
	if err := format.Node(&b, fset, n); err != nil {
		return "?"
	}
	return b.String()
}
