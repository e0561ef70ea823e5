package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exampleGateways are the gateways of examples/two-region.
var exampleGateways = []string{"euw-gw1", "euw-gw2", "use-gw1", "use-gw2"}

// writeCerts creates dir/certs/ with a dummy CA and a dummy certificate and
// key for each name. config checks only that the files exist and are
// readable; their contents are the tunnel package's business.
func writeCerts(t testing.TB, dir string, names ...string) {
	t.Helper()
	certs := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	files := []string{"ca.pem"}
	for _, n := range names {
		files = append(files, n+".pem", n+"-key.pem")
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(certs, f), []byte("dummy "+f+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// copyTree copies the files under src into dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// examples copies examples/ into a temporary directory, with the
// certificates the two-region configurations name, and returns its path.
func examples(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	copyTree(t, "examples", dir)
	writeCerts(t, filepath.Join(dir, "two-region"), exampleGateways...)
	return dir
}

// testdata copies testdata/ into a temporary directory with the certificates
// of gateway gw1 and returns its path.
func testdataDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	copyTree(t, "testdata", dir)
	writeCerts(t, dir, "gw1")
	writeCerts(t, filepath.Join(dir, "bad"), "gw1")
	return dir
}

// problemStrings returns the text of each problem in err.
func problemStrings(err error) []string {
	var out []string
	for _, p := range Problems(err) {
		out = append(out, p.Error())
	}
	return out
}

// mustLoad loads path or fails the test.
func mustLoad(t testing.TB, path string, opts ...Option) *Config {
	t.Helper()
	c, err := Load(path, opts...)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	return c
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
