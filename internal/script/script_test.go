package script

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const sample = `# a comment
# rules: one, two
first a=1
----
out 1
out 2

second
----

# trailing comment
`

func TestParse(t *testing.T) {
	cases, tail, err := Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 2 || cases[0].Cmd != "first a=1" || cases[0].Want != "out 1\nout 2" || cases[1].Cmd != "second" || cases[1].Want != "" {
		t.Fatalf("cases %q", cases)
	}
	if !slices.Equal(cases[0].Pre, []string{"# a comment", "# rules: one, two"}) || !slices.Equal(tail, []string{"", "# trailing comment"}) {
		t.Fatalf("pre %q tail %q", cases[0].Pre, tail)
	}
	if _, _, err := Parse("cmd\nno separator\n"); err == nil {
		t.Fatal("a command without ---- parsed")
	}
	if got := NamedRules(sample, "# rules:"); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("named %q", got)
	}
}

// TestRunRewriteRoundTrip: a script rewritten with the outputs it gives
// reads back the same, and then passes.
func TestRunRewriteRoundTrip(t *testing.T) {
	f := filepath.Join(t.TempDir(), "s.txt")
	if err := os.WriteFile(f, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	do := func(cmd string) string { return "ran " + cmd + "\n" }
	Run(t, f, true, do)
	b, _ := os.ReadFile(f)
	if !strings.Contains(string(b), "first a=1\n----\nran first a=1\n\nsecond\n----\nran second\n\n# trailing comment\n") {
		t.Fatalf("rewritten:\n%s", b)
	}
	Run(t, f, false, do)
}

func TestDocRules(t *testing.T) {
	doc := "# T\n\n## 1. A\n\nRules tested by name: `a-one`, `a-two`.\n\n## 2. B\n\nRules tested by name: `b`.\n"
	r, err := DocRules(doc, "\n## 1.", "\n## 2.")
	if err != nil || !slices.Equal(r, []string{"a-one", "a-two"}) {
		t.Fatalf("%q %v", r, err)
	}
	if r, err := DocRules(doc, "\n## 1.", "\n## "); err != nil || !slices.Equal(r, []string{"a-one", "a-two"}) {
		t.Fatalf("section up to the next heading: %q %v", r, err)
	}
	if r, _ := DocRules(doc, "", ""); len(r) != 3 {
		t.Fatalf("whole document: %q", r)
	}
	if _, err := DocRules(doc, "\n## 9.", ""); err == nil {
		t.Fatal("a missing section gave no error")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add("cmd\n----\n")
	f.Add("cmd\n")
	f.Add("\n\n# only comments\n")
	f.Fuzz(func(t *testing.T, text string) {
		cases, _, err := Parse(text)
		if err != nil {
			return
		}
		for _, c := range cases {
			if strings.TrimSpace(c.Cmd) == "" || strings.HasPrefix(c.Cmd, "#") {
				t.Fatalf("comment or blank line parsed as command %q", c.Cmd)
			}
		}
	})
}
