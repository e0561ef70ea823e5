// Package script runs data-driven scenario scripts in the spirit of raft's
// testdata: a script is a list of commands, each followed by a line "----"
// and the output it must give, then a blank line. Lines starting with # are
// comments (a comment line "# rules: x, y" or "# rule: x" names the rules
// of a design document the script checks). The test drivers of metaroce,
// cc and the gateway relay share this format, this parser and this runner;
// each brings its own commands.
//
// Run compares every command's output with the recorded one; with rewrite
// it records the outputs anew (read the diff before committing it).
package script

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Case is one command of a script with its recorded output.
type Case struct {
	Pre  []string // comment and blank lines before the command
	Cmd  string
	Want string
}

// Parse splits a script into its commands and the comment and blank lines
// after the last one.
func Parse(text string) (cases []Case, tail []string, err error) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		c := Case{Pre: pre, Cmd: l}
		pre = nil
		i++
		if i >= len(lines) || lines[i] != "----" {
			return nil, nil, fmt.Errorf("line %d: command %q without a ---- line", i, l)
		}
		var want []string
		for i+1 < len(lines) && lines[i+1] != "" {
			i++
			want = append(want, lines[i])
		}
		c.Want = strings.Join(want, "\n")
		cases = append(cases, c)
	}
	return cases, pre, nil
}

// Run runs the script in file: do runs each command and returns its output
// (trailing newlines are ignored). A command whose output differs from the
// recorded one is an error of t; with rewrite, the file is written again
// with the outputs obtained instead.
func Run(t *testing.T, file string, rewrite bool, do func(cmd string) string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cases, tail, err := Parse(string(b))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var rec strings.Builder
	for _, c := range cases {
		got := strings.TrimRight(do(c.Cmd), "\n")
		if !rewrite && got != c.Want {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", file, c.Cmd, got, c.Want)
		}
		for _, l := range c.Pre {
			rec.WriteString(l + "\n")
		}
		fmt.Fprintf(&rec, "%s\n----\n%s\n", c.Cmd, got)
	}
	for _, l := range tail {
		rec.WriteString(l + "\n")
	}
	if rewrite {
		if err := os.WriteFile(file, []byte(rec.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// DocRules returns the rules a design document names in its paragraphs
// starting "Rules tested by name" (each rule `in-backquotes`), between
// the first occurrence of start and the next occurrence of end after it
// ("" for either: the document's start or end). An error names a
// section that is not there.
func DocRules(doc, start, end string) ([]string, error) {
	i, j := 0, len(doc)
	if start != "" {
		if i = strings.Index(doc, start); i < 0 {
			return nil, fmt.Errorf("no section %q", start)
		}
	}
	if end != "" {
		from := i + len(start) // the end is searched after the start heading
		k := strings.Index(doc[from:], end)
		if k < 0 {
			return nil, fmt.Errorf("no section %q after %q", end, start)
		}
		j = from + k
	}
	var rules []string
	for _, para := range strings.Split(doc[i:j], "\n\n") {
		para = strings.TrimSpace(para)
		if !strings.HasPrefix(para, "Rules tested by name") {
			continue
		}
		for _, m := range ruleName.FindAllStringSubmatch(para, -1) {
			rules = append(rules, m[1])
		}
	}
	return rules, nil
}

var ruleName = regexp.MustCompile("`([a-z0-9-]+)`")

// NamedRules returns the rules a script's comment lines starting with
// prefix ("# rules:" or "# rule:") name, comma-separated.
func NamedRules(text, prefix string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if r, ok := strings.CutPrefix(l, prefix); ok {
			for _, name := range strings.Split(r, ",") {
				if name = strings.TrimSpace(name); name != "" {
					out = append(out, name)
				}
			}
		}
	}
	return out
}
