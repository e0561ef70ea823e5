package wordlist

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// rule is one pattern of process words. A hit on a line that also matches
// unless is not one (a technical use of the same words).
type rule struct {
	what   string
	re     *regexp.Regexp
	unless *regexp.Regexp
	mdOnly bool // prose only: Go code has identifiers and test vectors of that shape
	hex    bool // the hit must be a word of commit-hash length
}

func re(s string) *regexp.Regexp { return regexp.MustCompile(s) }

// rules are the patterns over the contents of the scanned files.
var rules = []rule{
	{what: "a numbered work period", re: re(`(?i)\bsessions?[ -]?[0-9]+\b|\bwork periods?\b|\bround[0-9]+\b`)},
	{what: "an issue, pull request or item number", re: re(`(?i)\bissues?[ -]#?[0-9]+|(^|[\s(\[,;])#[0-9]+\b|\bitems? [0-9]+\b|\bPR #?[0-9]+`),
		unless: re(`(?i)\bitem [0-9]+ of the|PKCS #[0-9]`)},
	{what: "who ran what", re: re(`(?i)\bthe lead\b|\blead's\b|\b(other|another|six|the) engineers?'?s?\b( work| run| simulations?)?|\bengineers' |\bthe helper's\b|\bhelper session\b|\bthe brief\b|\bbrief of\b|\bclosing note\b`),
		unless: re(`infrastructure engineers`)},
	// Branch names: backticked after or before "branch", and the names
	// the history had; prose in docs is held tighter below.
	{what: "a branch name", re: re(`(?i)\b(hygiene|ccfair|hyregion)\b|\bon main\b|\bmain at\b|\bthe issue's\b|\bbranch(es)? ` + "`" + `[^` + "`" + `]+` + "`" + `|` + "`" + `[^` + "`" + `]+` + "` branch" + `\b|\bmerged branch\b|\bbranch's history\b`)},
	{what: "a numbered work period", re: re(`(?i)\b(this|first|second|third|fourth|final) round\b('s|[,.:;)]| [^t]|$)|\b(this|whole) session\b|\bthis branch\b|\bbranch's\b|\b(this|until this|the previous) revision\b|\bmain (had|was|gave|ends)\b|\b[a-z]+[0-9]* branch\b`), mdOnly: true},
	{what: "a commit hash", re: re(`(?i)\b(commit|clone of|main at|before|since|at) \(?[0-9a-f]{7,40}\b`)},
	{what: "a commit hash", re: re(`\b[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]*\b`), mdOnly: true, hex: true,
		unless: re(`0123456789ab|\b0x[0-9a-f]+\b|v0\.0\.0-[0-9]{14}-[0-9a-f]{12}`)},
}

// nameRule is the pattern over file names: result files and tests are named
// by what they measure, not by when they were taken.
var nameRule = re(`(?i)(^|[-_.])(s[0-9]+|session[0-9]+|round[0-9]+)([-_.]|$)`)

// hexWord keeps the md-only hash rule to words of hash length.
var hexWord = re(`^[0-9a-f]{7,40}$`)

func root(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// scanned says which files' contents the rules read.
func scanned(name string) bool {
	for _, ext := range []string{".go", ".md", ".sh", ".yaml", ".yml", ".tf"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

// self is this package: it spells the patterns out.
const self = "internal/wordlist/"

// hits returns every line of the tree that a rule flags, as "path:line: what: text".
func hits(t *testing.T, top string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(top, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if rel != "." && nameRule.MatchString(d.Name()) {
				out = append(out, rel+": file name names a work period")
			}
			return nil
		}
		if nameRule.MatchString(strings.TrimSuffix(d.Name(), filepath.Ext(d.Name()))) {
			out = append(out, rel+": file name names a work period")
		}
		if strings.HasPrefix(rel, self) || !scanned(d.Name()) {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		md := strings.HasSuffix(d.Name(), ".md")
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			for _, r := range rules {
				if r.mdOnly && !md {
					continue
				}
				m := r.re.FindString(line)
				if m == "" || (r.unless != nil && r.unless.MatchString(line)) {
					continue
				}
				if r.hex && !hexWord.MatchString(m) {
					continue
				}
				out = append(out, rel+":"+itoa(n)+": "+r.what+": "+strings.TrimSpace(m))
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// TestNoProcessWords fails on any mention, in the code, the docs or a file
// name, of how the project was built rather than what it is.
func TestNoProcessWords(t *testing.T) {
	for _, h := range hits(t, root(t)) {
		t.Error(h)
	}
}

// TestRulesCatch keeps the patterns honest: each sample must be flagged and
// each technical use of the same words must not.
func TestRulesCatch(t *testing.T) {
	flag := func(line string, md bool) bool {
		for _, r := range rules {
			if r.mdOnly && !md {
				continue
			}
			m := r.re.FindString(line)
			if m == "" || (r.unless != nil && r.unless.MatchString(line)) {
				continue
			}
			if r.hex && !hexWord.MatchString(m) {
				continue
			}
			return true
		}
		return false
	}
	// The samples the rules must catch are kept in ROT13, so that this file
	// reads as what it is, a rule, and not as the narration it forbids.
	for _, s := range rot13(
		"zrnfherq va frffvba 8", "Frffvba-9 svtherf", "gur yrnq'f eha", "bgure ratvarref' jbex",
		"(vffhr 16 vgrz 3)", "frr #15", "oenapu `ultvrar`", "gur `pbrkvfg` oenapu", "gur ppsnve oenapu",
		"pyrna pybar bs 78q2081", "qngncngu-pch-ebhaq2", "gur oevrs bs gur sybbq grfg",
		"vg snvyf ba znva", "gur vffhr'f gnetrg",
	) {
		if !flag(s, false) {
			t.Errorf("not flagged: %q", s)
		}
	}
	for _, s := range []string{"main was a1b2c3d then", "until this revision", "tried on the planes5 branch", "the second round's figures"} {
		if !flag(s, true) {
			t.Errorf("not flagged in prose: %q", s)
		}
	}
	for _, s := range []string{
		"the QUIC control session", "a TLS session resumes", "the path split", "a round trip",
		"gossip.seeds: item 1 of the 4 comma-separated items is empty", "PKCS #8", "s0 := st.Total()",
		"for network and infrastructure engineers", "a helper process", "the test helpers", "a brief stall",
		"round robin", "4194304 bytes",
	} {
		if flag(s, true) {
			t.Errorf("flagged: %q", s)
		}
	}
	// Code comments speak of branches of code; only prose is held to the
	// tighter branch rule.
	for _, s := range []string{"callers can branch on errors.Is", "the else branch of the switch"} {
		if flag(s, false) {
			t.Errorf("flagged in code: %q", s)
		}
	}
	for _, n := range rot13("crref-ybff-fjrrc-f8-ernygvzr", "qngncngu-pch-ebhaq2", "ybff-frffvba3") {
		if !nameRule.MatchString(n) {
			t.Errorf("file name not flagged: %q", n)
		}
	}
	for _, n := range []string{"peers-loss-sweep-50ms", "session", "s2s", "loss-sweep-cc-05-longrtt-scalable_0_"} {
		if nameRule.MatchString(n) {
			t.Errorf("file name flagged: %q", n)
		}
	}
}

// rot13 decodes test samples kept in ROT13.
func rot13(enc ...string) []string {
	out := make([]string, len(enc))
	for i, e := range enc {
		out[i] = strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z':
				return 'a' + (r-'a'+13)%26
			case r >= 'A' && r <= 'Z':
				return 'A' + (r-'A'+13)%26
			}
			return r
		}, e)
	}
	return out
}
