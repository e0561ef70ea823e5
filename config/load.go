package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
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
// environment variables. The command also prints [Config.Warnings] and
// parses the control.tls.* files with tunnel/pki (CheckFiles), which this
// package must not import.
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
	// consults the environment for keys it knows about. Only those bindings
	// read the environment (no AutomaticEnv): a variable such as
	// MRGW_WAN_PLANES, which names a list of tables, is reported by
	// unknownEnv below instead of being decoded into the list.
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
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
	for _, fe := range unknownEnv(os.Environ()) {
		problems = append(problems, fe)
	}
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
	intHook,
	stringListHook,
)

// valueError is a decode hook's complaint about a value. Its message is the
// whole reason, value included, and is reported as it is after the key.
type valueError struct{ msg string }

func (e *valueError) Error() string { return e.msg }

func badValue(format string, args ...any) error {
	return &valueError{fmt.Sprintf(format, args...)}
}

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

// intHook checks a value for an integer key before mapstructure converts it,
// because mapstructure converts by truncating or wrapping: a fraction
// (mtu: 4096.5 became 4096), a number beyond int64 (1e20 became
// -9223372036854775808, 18446744073709551615 became -1), a boolean (true
// became 1), and a string read in base 0 (MRGW_WAN_MTU=01400 became 768, in
// octal). It accepts integers, floats without a fraction (1e9, which YAML
// reads as a float) and decimal strings (the environment and flags); it
// refuses everything else with the value and the reason.
func intHook(from, to reflect.Type, data any) (any, error) {
	if to.Kind() < reflect.Int || to.Kind() > reflect.Int64 || to == reflect.TypeFor[time.Duration]() {
		return data, nil
	}
	tooLarge := func(v string) error {
		if strings.HasPrefix(strings.Trim(v, `"`), "-") {
			return badValue("%s is too small for an integer (the smallest is %d)", v, int64(math.MinInt64))
		}
		return badValue("%s is too large for an integer (the largest is %d)", v, int64(math.MaxInt64))
	}
	rv := reflect.ValueOf(data)
	var n int64
	switch {
	case !rv.IsValid():
		return data, nil
	case rv.CanInt():
		n = rv.Int()
	case rv.CanUint():
		u := rv.Uint()
		if u > math.MaxInt64 {
			return nil, tooLarge(strconv.FormatUint(u, 10))
		}
		n = int64(u)
	case rv.CanFloat():
		f := rv.Float()
		s := strconv.FormatFloat(f, 'g', -1, 64)
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f):
			return nil, badValue("%s is not an integer", s)
		// -2^63 is exact as a float64 and fits; 2^63 is the first that
		// does not.
		case f < math.MinInt64 || f >= math.MaxInt64:
			return nil, tooLarge(s)
		}
		n = int64(f)
	case rv.Kind() == reflect.String:
		s := strings.TrimSpace(rv.String())
		var err error
		n, err = strconv.ParseInt(s, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			return nil, tooLarge(strconv.Quote(s))
		case err != nil:
			return nil, badValue("%s is not an integer (write it in decimal digits)", strconv.Quote(rv.String()))
		}
	case rv.Kind() == reflect.Bool:
		return nil, badValue("%v is not an integer", rv.Bool())
	default:
		return data, nil // a table or a list: mapstructure reports the type
	}
	if bits := to.Bits(); bits < 64 && (n < -1<<(bits-1) || n > 1<<(bits-1)-1) {
		return nil, badValue("%d does not fit in a %d-bit integer", n, bits)
	}
	return n, nil
}

// stringListHook splits a comma-separated string (from the environment, a
// flag or a file that wrote a string where a list goes) into a list of
// strings, trimming spaces around items. A string of only spaces is the
// empty list and one trailing comma is allowed ("a,b,"); any other empty
// item is refused, because dropping it would turn MRGW_GOSSIP_SEEDS=",,,"
// into an empty list that silently replaces the file's seeds. The value is
// not quoted: the list may be the gossip keyring.
func stringListHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to != reflect.TypeFor[[]string]() {
		return data, nil
	}
	s := reflect.ValueOf(data).String()
	if strings.TrimSpace(s) == "" {
		return []string{}, nil
	}
	items := strings.Split(s, ",")
	if n := len(items); n > 1 && strings.TrimSpace(items[n-1]) == "" && strings.TrimSpace(items[n-2]) != "" {
		items = items[:n-1] // "a,b,"
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, badValue("item %d of the %d comma-separated items is empty", i+1, len(items))
		}
		out = append(out, item)
	}
	return out, nil
}

// toolEnv are the prefixes of MRGW_ variables that are not configuration:
// the test harnesses read them (MRGW_TEST_LOG, MRGW_DATAPATH_MTU,
// MRGW_FLOOD_REPRO, MRGW_CC_DEFAULTS). No configuration section has one of
// these names; TestEveryMRGWVariableIsKnown keeps the list complete.
var toolEnv = []string{"MRGW_TEST_", "MRGW_DATAPATH_", "MRGW_FLOOD_", "MRGW_CC_"}

// unknownEnv reports every variable of environ ("NAME=value" strings) that
// starts with MRGW_ but sets no key, as a misspelt key in a file is: the
// variable is the key of its problem. Variables of the harnesses (toolEnv)
// are left alone.
func unknownEnv(environ []string) []*FieldError {
	known := map[string]bool{}
	fileOnly := map[string]string{} // variable → key that only a file can set
	for _, l := range leaves() {
		switch {
		case l.Env != "":
			known[l.Env] = true
		case !l.inList:
			fileOnly[envName(l.Name)] = l.Name
		}
	}
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix+"_") || known[name] || slices.ContainsFunc(toolEnv, func(p string) bool {
			return strings.HasPrefix(name, p)
		}) {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var out []*FieldError
	for _, name := range names {
		if !plainEnv.MatchString(name) {
			// A name with spaces or stranger things: never a key's, and
			// quoted so the message stays on one line.
			out = append(out, fieldErr(strconv.Quote(name), "unknown environment variable: it sets no key"))
			continue
		}
		if key, ok := fileOnly[name]; ok {
			out = append(out, fieldErr(name, "%s is a list of tables and can only be set in the file", key))
			continue
		}
		fe := fieldErr(name, "unknown environment variable: it sets no key")
		if s := suggestEnv(name, known); s != "" {
			fe.Msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		out = append(out, fe)
	}
	return out
}

var plainEnv = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// suggestEnv returns the known variable closest to an unknown one: at most
// two edits away, or else the only one that ends like it (MRGW_MTU →
// MRGW_WAN_MTU); "" when none is a likely intent.
func suggestEnv(name string, known map[string]bool) string {
	best, bestDist := "", 3
	var suffix []string
	rest := strings.TrimPrefix(name, envPrefix)
	for k := range known {
		if d := editDistance(name, k); d < bestDist || d == bestDist && k < best {
			best, bestDist = k, d
		}
		if strings.HasSuffix(k, rest) {
			suffix = append(suffix, k)
		}
	}
	if best == "" && len(suffix) == 1 {
		best = suffix[0]
	}
	return best
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
	var ve *valueError
	switch {
	case errors.As(inner, &ve):
		return []*FieldError{fieldErr(name, "%s", ve.msg)}, true
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
