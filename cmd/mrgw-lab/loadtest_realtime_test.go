package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/internal/cli"
)

// fakeFIFO stands in for rtsched.FIFO: it records what the flag asked of
// the scheduler, in order with what the command did, and never changes
// this process's scheduling.
type fakeFIFO struct {
	events []string
	refuse error // returned instead of a restore, when set
}

func (f *fakeFIFO) fifo(prio int) (func() error, error) {
	f.events = append(f.events, fmt.Sprintf("fifo %d", prio))
	if f.refuse != nil {
		return nil, f.refuse
	}
	return func() error { f.events = append(f.events, "restore"); return nil }, nil
}

// errNoPrivilege is what rtsched.FIFO says without root or CAP_SYS_NICE
// (its text; the kernel's EPERM under it).
var errNoPrivilege = errors.New("rtsched: SCHED_FIFO 20 needs root or CAP_SYS_NICE: operation not permitted")

// TestRealtimeFlagApply is the hook on its own: 0 asks nothing, a valid
// priority sets every thread and leaves a restore for after the command,
// an out-of-range one is refused before the scheduler is asked, and the
// scheduler's refusal comes back naming the flag and the reason.
func TestRealtimeFlagApply(t *testing.T) {
	t.Run("zero does nothing", func(t *testing.T) {
		f := &fakeFIFO{}
		rt := &realtimeFlag{prio: 0, fifo: f.fifo}
		var w strings.Builder
		if err := rt.apply(&w); err != nil {
			t.Fatal(err)
		}
		if err := rt.undo(); err != nil {
			t.Fatal(err)
		}
		if len(f.events) != 0 || w.Len() != 0 {
			t.Fatalf("--realtime 0 asked %v and said %q; want nothing", f.events, w.String())
		}
	})
	t.Run("20 sets every thread, restores after", func(t *testing.T) {
		f := &fakeFIFO{}
		rt := &realtimeFlag{prio: 20, fifo: f.fifo}
		var w strings.Builder
		if err := rt.apply(&w); err != nil {
			t.Fatal(err)
		}
		if want := []string{"fifo 20"}; !slices.Equal(f.events, want) {
			t.Fatalf("after apply: %v, want %v (restore only after the command)", f.events, want)
		}
		if !strings.Contains(w.String(), "SCHED_FIFO priority 20 (--realtime)") {
			t.Errorf("apply said %q; want a line naming the priority and the flag", w.String())
		}
		if err := rt.undo(); err != nil {
			t.Fatal(err)
		}
		if err := rt.undo(); err != nil { // a second undo restores nothing again
			t.Fatal(err)
		}
		if want := []string{"fifo 20", "restore"}; !slices.Equal(f.events, want) {
			t.Fatalf("after undo: %v, want %v", f.events, want)
		}
	})
	t.Run("out of range refused", func(t *testing.T) {
		for _, p := range []int{-1, 100, 1000} {
			f := &fakeFIFO{}
			rt := &realtimeFlag{prio: p, fifo: f.fifo}
			err := rt.apply(&strings.Builder{})
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--realtime %d", p)) || !strings.Contains(err.Error(), "1..99") {
				t.Errorf("--realtime %d: err = %v; want a refusal naming the flag and 1..99", p, err)
			}
			if len(f.events) != 0 {
				t.Errorf("--realtime %d asked the scheduler: %v", p, f.events)
			}
			if rt.restore != nil {
				t.Errorf("--realtime %d: a restore left behind", p)
			}
		}
		for _, p := range []int{1, 99} { // the ends of the range are valid
			f := &fakeFIFO{}
			if err := (&realtimeFlag{prio: p, fifo: f.fifo}).apply(&strings.Builder{}); err != nil || len(f.events) != 1 {
				t.Errorf("--realtime %d: err = %v, scheduler asked %v", p, err, f.events)
			}
		}
	})
	t.Run("scheduler refusal", func(t *testing.T) {
		f := &fakeFIFO{refuse: errNoPrivilege}
		rt := &realtimeFlag{prio: 20, fifo: f.fifo}
		var w strings.Builder
		err := rt.apply(&w)
		if err == nil || !strings.HasPrefix(err.Error(), "--realtime 20: ") || !strings.Contains(err.Error(), "CAP_SYS_NICE") || !errors.Is(err, errNoPrivilege) {
			t.Fatalf("err = %v; want it to name --realtime 20 and wrap the scheduler's reason", err)
		}
		if w.Len() != 0 {
			t.Errorf("a refused --realtime still said %q", w.String())
		}
		if err := rt.undo(); err != nil || !slices.Equal(f.events, []string{"fifo 20"}) {
			t.Errorf("after a refusal undo: %v, events %v; want nothing restored", err, f.events)
		}
	})
}

// TestRealtimeFlagThroughCobra is the wiring in the command tree: the hook
// runs after the flags are parsed and before the chosen load test, the
// restore after it. A probe subcommand stands for the load test, so that
// nothing is started.
func TestRealtimeFlagThroughCobra(t *testing.T) {
	tree := func(f *fakeFIFO) *cobra.Command {
		root := &cobra.Command{Use: "mrgw-lab", SilenceUsage: true, SilenceErrors: true}
		lt := newLoadtestCmdWith(f.fifo)
		lt.AddCommand(&cobra.Command{Use: "probe", RunE: func(*cobra.Command, []string) error {
			f.events = append(f.events, "run")
			return nil
		}})
		root.AddCommand(lt)
		return root
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"loadtest", "probe"}, []string{"run"}},
		{[]string{"loadtest", "--realtime", "0", "probe"}, []string{"run"}},
		{[]string{"loadtest", "--realtime", "20", "probe"}, []string{"fifo 20", "run", "restore"}},
		{[]string{"loadtest", "probe", "--realtime", "20"}, []string{"fifo 20", "run", "restore"}}, // persistent: after the subcommand too
	} {
		f := &fakeFIFO{}
		_, errOut, err := cli.Run(tree(f), c.args...)
		if err != nil || !slices.Equal(f.events, c.want) {
			t.Errorf("%v: err %v, events %v; want %v", c.args, err, f.events, c.want)
		}
		if on := slices.Contains(c.want, "fifo 20"); on != strings.Contains(errOut, "(--realtime)") {
			t.Errorf("%v: stderr %q", c.args, errOut)
		}
	}
	// Refused, by range or by the scheduler: the load test does not run,
	// and the error names the flag.
	f := &fakeFIFO{}
	if _, _, err := cli.Run(tree(f), "loadtest", "--realtime", "100", "probe"); err == nil || !strings.Contains(err.Error(), "--realtime 100") || len(f.events) != 0 {
		t.Errorf("--realtime 100: err %v, events %v; want a refusal naming the flag and nothing run", err, f.events)
	}
	f = &fakeFIFO{refuse: errNoPrivilege}
	if _, _, err := cli.Run(tree(f), "loadtest", "--realtime", "20", "probe"); err == nil || !strings.Contains(err.Error(), "--realtime 20") ||
		!strings.Contains(err.Error(), "CAP_SYS_NICE") || !slices.Equal(f.events, []string{"fifo 20"}) {
		t.Errorf("refused by the scheduler: err %v, events %v; want the flag and the reason, and nothing run", err, f.events)
	}
}

// TestRealtimeFlagRealTree runs the real mrgw-lab tree (rtsched.FIFO
// itself, never reached: the priorities are out of range). The leaf is
// datapath with a cipher (--cipher) that does not exist, so that even a tree
// whose hook were not wired would stop at the suite before any load.
func TestRealtimeFlagRealTree(t *testing.T) {
	for _, p := range []string{"100", "-1"} {
		_, errOut, err := run(t, "loadtest", "--realtime", p, "datapath", "--cipher", "no-such-suite")
		if err == nil || !strings.Contains(err.Error(), "--realtime "+p) || strings.Contains(err.Error(), "no-such-suite") {
			t.Errorf("--realtime %s: err = %v; want the flag refused before datapath ran", p, err)
		}
		if strings.Contains(errOut, "SCHED_FIFO") {
			t.Errorf("--realtime %s: stderr %q", p, errOut)
		}
	}
	// The flag is on every load test (persistent) and documented.
	out, _, err := run(t, "loadtest", "loss-sweep", "--help")
	if err != nil || !strings.Contains(out, "--realtime int") || !strings.Contains(out, "1-99") {
		t.Errorf("loadtest loss-sweep --help: err %v, no --realtime 1-99 in:\n%s", err, out)
	}
}
