package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// envPrefix starts every environment variable that overrides a key.
const envPrefix = "MRGW"

// Option changes how [Load], [Parse] and [Check] work.
type Option func(*options)

type options struct {
	flags          *pflag.FlagSet
	skipFileChecks bool
}

// WithFlags makes the flags of fs that the user set, and whose name is a key
// (see [BindFlags]), override the file and the environment. Flags with other
// names (--config, say) are ignored.
func WithFlags(fs *pflag.FlagSet) Option {
	return func(o *options) { o.flags = fs }
}

// SkipFileChecks turns off the check that control.tls.* name existing,
// readable files. Everything else is still checked. It is meant for checking a
// file's syntax away from the machine it runs on, and for tests of syntax;
// never for starting the daemon.
func SkipFileChecks() Option {
	return func(o *options) { o.skipFileChecks = true }
}

// Load reads the configuration file at path (YAML for .yaml and .yml, TOML for
// .toml), applies the defaults, MRGW_* environment variables and, with
// [WithFlags], command-line flags, and validates the result. Relative file
// paths in it are resolved against the directory of path.
//
// On failure the error is an [*Error] listing every problem found; the
// returned Config is nil.
func Load(path string, opts ...Option) (*Config, error) {
	format, err := formatOf(path)
	if err != nil {
		return nil, &Error{Path: path, Problems: []error{err}}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Path: path, Problems: []error{err}}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &Error{Path: path, Problems: []error{err}}
	}
	c, cerr := parse(data, format, filepath.Dir(abs), opts)
	if cerr != nil {
		cerr.Path = path
		return nil, cerr
	}
	c.Path = path
	return c, nil
}

// Parse is [Load] for a configuration held in memory. format is "yaml" or
// "toml"; relative file paths resolve against baseDir (the working directory
// when baseDir is "").
func Parse(data []byte, format, baseDir string, opts ...Option) (*Config, error) {
	c, err := parse(data, format, baseDir, opts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Check loads the file at path and reports every problem in it, or nil. It is
// what `mrgw config check FILE` runs; like the daemon, it applies MRGW_*
// environment variables.
func Check(path string, opts ...Option) error {
	_, err := Load(path, opts...)
	return err
}

// BindFlags defines on fs one flag per key that can be set from outside a
// file, named exactly like the key (--log.level, --wan.paths_per_peer), with
// the key's default and description. Flags fs already has are left alone.
// Pass the same FlagSet to [Load] with [WithFlags].
func BindFlags(fs *pflag.FlagSet) {
	def := reflect.ValueOf(Default()).Elem()
	for _, l := range leaves() {
		if l.Env == "" || fs.Lookup(l.Name) != nil {
			continue
		}
		usage := l.Doc + " (env " + l.Env + ")"
		dv := def.FieldByIndex(l.index)
		switch d := dv.Interface().(type) {
		case time.Duration:
			fs.Duration(l.Name, d, usage)
		case string:
			fs.String(l.Name, d, usage)
		case bool:
			fs.Bool(l.Name, d, usage)
		case int:
			fs.Int(l.Name, d, usage)
		case int64:
			fs.Int64(l.Name, d, usage)
		case []string:
			fs.StringSlice(l.Name, d, usage)
		}
		// A key of another type gets no flag; a test checks there is none.
	}
}

func formatOf(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
		return "yaml", nil
	case ".toml":
		return "toml", nil
	default:
		return "", fmt.Errorf("cannot tell the format from the extension %q: use .yaml, .yml or .toml", ext)
	}
}

// parse is the whole pipeline behind Load, Parse and Check.
func parse(data []byte, format, baseDir string, opts []Option) (*Config, *Error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	switch format {
	case "yaml", "yml", "toml":
	default:
		return nil, &Error{Problems: []error{fmt.Errorf("unknown format %q: want yaml or toml", format)}}
	}

	v := viper.New()
	v.SetConfigType(format)
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, &Error{Problems: []error{parseError(err)}}
	}

	// Every key gets its default and its environment binding. The binding is
	// what lets MRGW_X override a key the file does not mention: viper only
	// consults the environment for keys it knows about.
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	def := reflect.ValueOf(Default()).Elem()
	for _, l := range leaves() {
		if l.inList {
			continue
		}
		v.SetDefault(l.Name, toSetting(def.FieldByIndex(l.index)))
		if l.Env != "" {
			if err := v.BindEnv(l.Name); err != nil {
				return nil, &Error{Problems: []error{err}}
			}
		}
	}
	if o.flags != nil {
		applyFlags(v, o.flags)
	}

	c := new(Config)
	var problems []error
	var badKeys []string // keys whose value could not be decoded
	if err := v.UnmarshalExact(c, viper.DecodeHook(decodeHook)); err != nil {
		fes, bad := decodeProblems(v, err)
		for _, fe := range fes {
			problems = append(problems, fe)
		}
		badKeys = bad
	}
	c.resolvePaths(baseDir)
	for _, fe := range c.check(!o.skipFileChecks) {
		// A key that failed to decode holds its zero value; complaining
		// about that value as well would only repeat the problem.
		if !under(fe.Key, badKeys) {
			problems = append(problems, fe)
		}
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return c, nil
}

// decodeHook converts what files, the environment and flags hold into the
// types of Config. It replaces viper's default hooks with stricter ones.
var decodeHook = mapstructure.ComposeDecodeHookFunc(
	durationHook,
	stringListHook,
)

// durationHook parses "1m30s" into a time.Duration and refuses a bare number
// other than 0: YAML "key_rotation: 5" would otherwise mean 5 nanoseconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() {
		return data, nil
	}
	switch x := data.(type) {
	case string:
		return time.ParseDuration(strings.TrimSpace(x))
	case time.Duration:
		return x, nil
	}
	rv := reflect.ValueOf(data)
	switch {
	case !rv.CanInt() && !rv.CanUint() && !rv.CanFloat():
		return data, nil // not a number: mapstructure reports the type
	case rv.IsZero():
		return time.Duration(0), nil
	}
	return nil, errors.New("a number without a unit")
}

// stringListHook splits a comma-separated string (from the environment or a
// flag) into a list of strings, trimming spaces and dropping empty items.
func stringListHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to != reflect.TypeFor[[]string]() {
		return data, nil
	}
	var out []string
	for item := range strings.SplitSeq(data.(string), ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out, nil
}

// applyFlags copies the flags the user set onto viper, above every other
// source.
func applyFlags(v *viper.Viper, fs *pflag.FlagSet) {
	known := map[string]bool{}
	for _, l := range leaves() {
		if l.Env != "" {
			known[l.Name] = true
		}
	}
	fs.Visit(func(f *pflag.Flag) {
		if !known[f.Name] {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v.Set(f.Name, sv.GetSlice())
			return
		}
		v.Set(f.Name, f.Value.String())
	})
}

// resolvePaths makes the certificate paths absolute against baseDir.
func (c *Config) resolvePaths(baseDir string) {
	if baseDir == "" {
		return
	}
	for _, p := range []*string{&c.Control.TLS.CAFile, &c.Control.TLS.CertFile, &c.Control.TLS.KeyFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(baseDir, *p)
		}
	}
}

var yamlLine = regexp.MustCompile(`line (\d+): `)

// parseError turns a viper parse failure into a ParseError with the line.
func parseError(err error) *ParseError {
	var te *toml.DecodeError
	if errors.As(err, &te) {
		row, col := te.Position()
		return &ParseError{Line: row, Column: col, Msg: strings.TrimPrefix(te.Error(), "toml: ")}
	}
	msg := err.Error()
	if u := errors.Unwrap(err); u != nil {
		msg = u.Error() // drop viper's "While parsing config: "
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	pe := &ParseError{}
	if m := yamlLine.FindStringSubmatchIndex(msg); m != nil {
		pe.Line, _ = strconv.Atoi(msg[m[2]:m[3]])
		msg = msg[:m[0]] + msg[m[1]:]
	}
	// yaml says "cannot unmarshal !!seq into map[string]interface {}" when
	// the file is not a mapping of keys; say that in words.
	msg = strings.Replace(msg, " into map[string]interface {}", " at the top level: the file must be a mapping of keys (node:, wan:, ...)", 1)
	pe.Msg = strings.Join(strings.Fields(msg), " ")
	return pe
}

// decodeProblems turns mapstructure's errors into FieldErrors. It also
// returns the keys whose values had the wrong type.
func decodeProblems(v *viper.Viper, err error) (out []*FieldError, bad []string) {
	var visit func(error)
	visit = func(e error) {
		var de *mapstructure.DecodeError
		if d, ok := e.(*mapstructure.DecodeError); ok {
			if errors.As(d.Unwrap(), &de) {
				visit(d.Unwrap())
				return
			}
			fes, typeErr := describeDecodeError(v, d)
			out = append(out, fes...)
			if typeErr {
				bad = append(bad, d.Name())
			}
			return
		}
		switch x := e.(type) {
		case interface{ Unwrap() []error }:
			for _, inner := range x.Unwrap() {
				visit(inner)
			}
		case interface{ Unwrap() error }:
			if x.Unwrap() != nil {
				visit(x.Unwrap())
				return
			}
			out = append(out, &FieldError{Msg: e.Error()})
		default:
			out = append(out, &FieldError{Msg: e.Error()})
		}
	}
	visit(err)
	return out, bad
}

const unusedPrefix = "has invalid keys: "

func describeDecodeError(v *viper.Viper, d *mapstructure.DecodeError) (fes []*FieldError, typeErr bool) {
	name, inner := d.Name(), d.Unwrap()
	if msg := inner.Error(); strings.HasPrefix(msg, unusedPrefix) {
		for _, k := range strings.Split(strings.TrimPrefix(msg, unusedPrefix), ", ") {
			key := k
			if !plainKey.MatchString(k) {
				key = strconv.Quote(k) // a key with spaces or stranger things
			}
			if name != "" {
				key = name + "." + k
			}
			fe := fieldErr(key, "unknown key")
			if s := suggest(name, k); s != "" {
				fe.Msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			fes = append(fes, fe)
		}
		return fes, false
	}
	want := "a valid value"
	if l, ok := leafByName(name); ok {
		want = article(l.Type)
	} else if isSection(name) {
		want = "a table"
	}
	var pe *mapstructure.ParseError
	var ue *mapstructure.UnconvertibleTypeError
	switch {
	case errors.As(inner, &pe):
		return []*FieldError{fieldErr(name, "%s is not %s", describeValue(pe.Value), want)}, true
	case errors.As(inner, &ue):
		return []*FieldError{fieldErr(name, "%s is not %s", describeValue(ue.Value), want)}, true
	}
	// Decode hooks (durations) report only their own message; show the
	// value too when viper can tell it.
	if !strings.Contains(name, "[") && name != "" {
		if raw := v.Get(name); raw != nil {
			return []*FieldError{fieldErr(name, "%s is not %s (%v)", describeValue(raw), want, inner)}, true
		}
	}
	if want != "a valid value" {
		return []*FieldError{fieldErr(name, "is not %s (%v)", want, inner)}, true
	}
	return []*FieldError{fieldErr(name, "%v", inner)}, true
}

func describeValue(x any) string {
	switch x := x.(type) {
	case string:
		return strconv.Quote(x)
	case map[string]any:
		return "a table"
	case []any:
		return "a list"
	}
	return fmt.Sprint(x)
}

func article(typ string) string {
	switch typ {
	case "integer":
		return "an integer"
	case "duration":
		return `a duration such as "30s" or "1h"`
	}
	return "a " + typ
}

var plainKey = regexp.MustCompile(`^[a-z0-9_]+$`)

var listIndex = regexp.MustCompile(`\[\d+\]`)

// leafByName finds the key of a decoded name such as "wan.planes[1].local".
func leafByName(name string) (leaf, bool) {
	norm := listIndex.ReplaceAllString(name, "[]")
	for _, l := range leaves() {
		if l.Name == norm {
			return l, true
		}
	}
	return leaf{}, false
}

// isSection reports whether a decoded name is a table of keys ("wan",
// "wan.planes[0]") rather than a key.
func isSection(name string) bool {
	prefix := listIndex.ReplaceAllString(name, "[]")
	for _, l := range leaves() {
		if strings.HasPrefix(l.Name, prefix+".") {
			return true
		}
	}
	return false
}

// suggest returns the known key under parent closest to the unknown one, or
// "" when none is close enough to be a likely typo.
func suggest(parent, unknown string) string {
	prefix := listIndex.ReplaceAllString(parent, "[]")
	if prefix != "" {
		prefix += "."
	}
	best, bestDist := "", 3 // at most two edits
	seen := map[string]bool{}
	for _, l := range leaves() {
		rest, ok := strings.CutPrefix(l.Name, prefix)
		if !ok {
			continue
		}
		// The next path segment under parent is a candidate.
		cand, _, _ := strings.Cut(rest, ".")
		cand = strings.TrimSuffix(cand, "[]")
		if seen[cand] {
			continue
		}
		seen[cand] = true
		if d := editDistance(strings.ToLower(unknown), cand); d < bestDist {
			best, bestDist = cand, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// under reports whether key is one of keys or lies inside one of them.
func under(key string, keys []string) bool {
	for _, k := range keys {
		if key == k || k == "" || strings.HasPrefix(key, k+".") || strings.HasPrefix(key, k+"[") {
			return true
		}
	}
	return false
}
