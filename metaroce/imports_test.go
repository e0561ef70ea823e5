package metaroce

import (
	"go/build"
	"strings"
	"testing"
)

// TestImportsStayCore enforces doc.go's rule: the protocol core imports
// only the standard library (no sockets) and mrgw's cc, pathmgr and units.
func TestImportsStayCore(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"github.com/mrgw/mrgw/cc": true, "github.com/mrgw/mrgw/pathmgr": true, "github.com/mrgw/mrgw/units": true}
	banned := []string{"net", "syscall", "os", "unsafe"}
	for _, imp := range pkg.Imports {
		if strings.Contains(imp, ".") && !allowed[imp] {
			t.Errorf("metaroce imports %s", imp)
		}
		for _, b := range banned {
			if imp == b || strings.HasPrefix(imp, b+"/") {
				t.Errorf("metaroce imports %s", imp)
			}
		}
	}
}
