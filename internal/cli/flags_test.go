package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// Every unit flag parses units and prints its default once, in units.
func TestUnitFlags(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var (
		rate, unset float64
		size        int
		mem         uint64
		losses      []float64
		rtts        []time.Duration
		noRTTs      []time.Duration
	)
	RateVar(fs, &rate, "rate", 50e6, "link rate")
	RateVar(fs, &unset, "capacity", 0, "capacity (default: the scenario's own)")
	SizeVar(fs, &size, "message-size", 256<<10, "bytes per message")
	SizeVar(fs, &mem, "memory", 64<<20, "memory")
	FractionsVar(fs, &losses, "loss", []float64{0, 0.001, 0.07}, "loss rates")
	DurationsVar(fs, &rtts, "rtt", []time.Duration{10 * time.Millisecond, 50 * time.Millisecond}, "round trips")
	DurationsVar(fs, &noRTTs, "rtts", nil, "round trips (default 10ms,50ms,100ms)")
	usage := fs.FlagUsages()
	for _, want := range []string{
		"--rate rate ", "link rate (default 50Mbit/s)",
		"--message-size size ", "bytes per message (default 256KiB)",
		"memory (default 64MiB)",
		"loss rates (default 0,0.1%,7%)",
		"round trips (default 10ms,50ms)",
	} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}
	for _, line := range strings.Split(usage, "\n") {
		if strings.Count(line, "(default") > 1 || strings.Contains(line, "[]") {
			t.Errorf("default printed twice or empty: %q", line)
		}
		if strings.Contains(line, "--capacity") && strings.Count(line, "default") != 1 {
			t.Errorf("a zero default must print only the usage's own words: %q", line)
		}
	}
	if err := fs.Parse([]string{"--rate", "1.5Gbps", "--capacity=200mbit", "--message-size", "1MiB", "--memory", "1GB",
		"--loss", "1%,0.05", "--loss", "10%", "--rtt", "150ms"}); err != nil {
		t.Fatal(err)
	}
	if rate != 1.5e9 || unset != 200e6 || size != 1<<20 || mem != 1e9 {
		t.Errorf("parsed rate %v capacity %v size %v memory %v", rate, unset, size, mem)
	}
	if len(losses) != 3 || losses[0] != 0.01 || losses[1] != 0.05 || losses[2] != 0.1 {
		t.Errorf("losses %v", losses)
	}
	if len(rtts) != 1 || rtts[0] != 150*time.Millisecond {
		t.Errorf("rtts %v", rtts)
	}
	for _, bad := range [][]string{{"--rate", "50"}, {"--rate", "50MB/s"}, {"--message-size", "1,5MB"}, {"--loss", "2"}} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.SetOutput(&strings.Builder{})
		RateVar(fs, &rate, "rate", 0, "")
		SizeVar(fs, &size, "message-size", 0, "")
		FractionsVar(fs, &losses, "loss", nil, "")
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
