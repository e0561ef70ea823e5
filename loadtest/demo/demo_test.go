//go:build linux

package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDemoShort runs the demo at a small scale: it must move messages both
// ways, fail a plane halfway, and report no duplicate and no failed message.
// Only correctness is asserted; the rates depend on the machine.
func TestDemoShort(t *testing.T) {
	o := Defaults()
	o.Duration = 3 * time.Second
	o.Planes = 2
	o.RateMbit = 20
	o.Flows = 1
	o.MsgSize = 64 << 10
	var progress bytes.Buffer
	o.Progress = &progress
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Messages == 0 {
		t.Errorf("no message completed:\n%s", progress.String())
	}
	if rep.Duplicates != 0 {
		t.Errorf("%d duplicates reached the destinations", rep.Duplicates)
	}
	if rep.FailedPlane != 1 || !rep.PlaneStats[1].Down || rep.PlaneStats[0].Down {
		t.Errorf("plane 1 should have failed at half time and plane 0 stayed up: %+v", rep.PlaneStats)
	}
	for _, e := range rep.Errors {
		// The 15 s grace for the last messages is a wall-clock budget a
		// very busy machine may exceed; anything else is a fault.
		if !strings.Contains(e, "still incomplete") {
			t.Errorf("demo error: %s", e)
		}
	}
	var out bytes.Buffer
	rep.Print(&out)
	for _, want := range []string{"plane", "host goodput", "plane 1 failed", "expected ranges", "machine:", "verdict:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(progress.String(), "gateways up") {
		t.Errorf("no progress banner:\n%s", progress.String())
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, mut := range map[string]func(*Options){
		"short":  func(o *Options) { o.Duration = time.Second },
		"planes": func(o *Options) { o.Planes = 0 },
		"flows":  func(o *Options) { o.Flows = 0 },
		"size":   func(o *Options) { o.MsgSize = 0 },
		"rate":   func(o *Options) { o.RateMbit = 0 },
	} {
		o := Defaults()
		mut(&o)
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%s: invalid options accepted", name)
		}
	}
}
