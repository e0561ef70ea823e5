package cli

import (
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/mrgw/mrgw/units"
)

// Flag values with units, shared by both binaries: every rate flag takes
// "50mbit", "10gbit", "1.5Gbps" (package units), every size flag "1MiB",
// "64KiB", and each prints its default once, in those units. A zero
// default ("the scenario's own", say) prints no "(default ...)": the
// usage text says what it means.

// rateValue is a rate in bits per second.
type rateValue struct{ p *float64 }

// RateVar defines a rate flag in bits per second (package units:
// "50mbit", "10gbit", "200Mbit/s"; a plain number is bit/s).
func RateVar(fs *pflag.FlagSet, p *float64, name string, value float64, usage string) {
	*p = value
	fs.Var(rateValue{p}, name, usage)
}

func (v rateValue) Set(s string) error {
	r, err := units.ParseRate(s)
	if err != nil {
		return err
	}
	*v.p = r
	return nil
}

func (v rateValue) String() string {
	if v.p == nil || *v.p == 0 {
		return ""
	}
	return units.FormatRate(*v.p)
}

func (rateValue) Type() string { return "rate" }

// Size is what a size flag may be bound to.
type Size interface {
	~int | ~int64 | ~uint64
}

// sizeValue is a size in bytes.
type sizeValue[T Size] struct{ p *T }

// SizeVar defines a size flag in bytes (package units: "1MiB", "64KiB",
// "1.5GB"; a plain number is bytes).
func SizeVar[T Size](fs *pflag.FlagSet, p *T, name string, value T, usage string) {
	*p = value
	fs.Var(sizeValue[T]{p}, name, usage)
}

func (v sizeValue[T]) Set(s string) error {
	n, err := units.ParseBytes(s)
	if err != nil {
		return err
	}
	if T(n) < 0 || int64(T(n)) != n {
		return errTooLarge(s)
	}
	*v.p = T(n)
	return nil
}

type errTooLarge string

func (e errTooLarge) Error() string { return "size " + string(e) + " is too large" }

func (v sizeValue[T]) String() string {
	if v.p == nil || *v.p == 0 {
		return ""
	}
	return units.FormatBytes(int64(*v.p))
}

func (sizeValue[T]) Type() string { return "size" }

// fractionsValue is a list of fractions ("0.01" or "1%").
type fractionsValue struct {
	p       *[]float64
	changed bool
}

// FractionsVar defines a comma-separated list of fractions, each a number
// in 0..1 or a percentage ("0,0.1%,1%,0.05"). Given more than once, the
// lists add up.
func FractionsVar(fs *pflag.FlagSet, p *[]float64, name string, value []float64, usage string) {
	*p = value
	fs.Var(&fractionsValue{p: p}, name, usage)
}

func (v *fractionsValue) Set(s string) error {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		x, err := units.ParseFraction(f)
		if err != nil {
			return err
		}
		out = append(out, x)
	}
	if !v.changed {
		*v.p = nil
		v.changed = true
	}
	*v.p = append(*v.p, out...)
	return nil
}

func (v *fractionsValue) String() string {
	parts := make([]string, len(*v.p))
	for i, x := range *v.p {
		parts[i] = units.FormatFraction(x)
	}
	return strings.Join(parts, ",")
}

func (*fractionsValue) Type() string { return "fractions" }

// durationsValue is a list of durations.
type durationsValue struct {
	p       *[]time.Duration
	changed bool
}

// DurationsVar defines a comma-separated list of durations ("10ms,50ms").
// Unlike pflag's DurationSlice, an empty default prints nothing rather
// than "(default [])".
func DurationsVar(fs *pflag.FlagSet, p *[]time.Duration, name string, value []time.Duration, usage string) {
	*p = value
	fs.Var(&durationsValue{p: p}, name, usage)
}

func (v *durationsValue) Set(s string) error {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		out = append(out, d)
	}
	if !v.changed {
		*v.p = nil
		v.changed = true
	}
	*v.p = append(*v.p, out...)
	return nil
}

func (v *durationsValue) String() string {
	parts := make([]string, len(*v.p))
	for i, d := range *v.p {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (*durationsValue) Type() string { return "durations" }

// fractionValue is one fraction ("0.01" or "1%").
type fractionValue struct{ p *float64 }

// FractionVar defines a fraction flag: a number in 0..1 or a percentage
// ("0.01" or "1%").
func FractionVar(fs *pflag.FlagSet, p *float64, name string, value float64, usage string) {
	*p = value
	fs.Var(fractionValue{p}, name, usage)
}

func (v fractionValue) Set(s string) error {
	x, err := units.ParseFraction(s)
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v fractionValue) String() string {
	if v.p == nil || *v.p == 0 {
		return ""
	}
	return units.FormatFraction(*v.p)
}

func (fractionValue) Type() string { return "fraction" }
