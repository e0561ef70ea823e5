//go:build linux

package chaos

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// testBinaries builds mrgw and mrgw-lab for a test.
func testBinaries(t *testing.T) (daemon, lab string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	daemon, err := Build(ctx, dir, "mrgw")
	if err != nil {
		t.Fatal(err)
	}
	if lab, err = Build(ctx, dir, "mrgw-lab"); err != nil {
		t.Fatal(err)
	}
	return daemon, lab
}

// TestChaosShort is the short form of `mrgw-lab loadtest chaos`: real gateway
// processes, a gateway killed with SIGKILL and restarted, a plane lost and
// restored, a host process killed and restarted, a bad SIGHUP and a junk
// flood, in about 45 s. It asserts correctness only: nothing lost,
// duplicated, corrupted or failed, every flow delivering again within the
// (generous) recovery bound, every check passed. Stalls are logged, not
// asserted: this machine's load decides them.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four gateway processes for about 40 s")
	}
	var progress strings.Builder
	daemon, lab := testBinaries(t)
	o := Options{
		Duration: 40 * time.Second, Seed: 3, Binary: daemon, LabBinary: lab,
		Faults: []string{FaultGatewayKill, FaultPlaneLoss, FaultHostKill, FaultHUPBad, FaultJunk},
		Flows:  2, PlaneRateBps: 10e6, JunkPerSocket: 200, RecoverBound: 45 * time.Second,
		Progress: &progress,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		t.Logf("%-14s injections %d worst stall %6.0f ms lost %d dup %d corrupt %d failed %d not recovered %d %s",
			r.Fault, r.Injections, r.RecoveryMs, r.MessagesLost, r.MessagesDuplicated, r.MessagesCorrupted, r.MessagesFailed, r.FlowsNotRecovered, r.Note)
	}
	var kinds []string
	for _, in := range rep.Injections {
		kinds = append(kinds, in.Fault)
	}
	for _, want := range []string{FaultGatewayKill, FaultPlaneLoss} {
		if !slices.Contains(kinds, want) {
			t.Errorf("no %s injected (injected: %v)", want, kinds)
		}
	}
	if rep.Completed < 100 {
		t.Errorf("only %d messages completed", rep.Completed)
	}
	if !rep.OK() {
		t.Errorf("lost %d, duplicated %d, corrupted %d, failed %d; errors:\n%s\nfiles: %s",
			rep.Lost, rep.Duplicated, rep.Corrupted, rep.Failed, strings.Join(rep.Errors, "\n"), rep.Dir)
	}
}

// TestChaosGossipPartition partitions the gossip between the regions while
// the WAN data path stays up, long enough for gossip to declare the other
// region's gateways dead. memberlist does not probe dead members, so
// without the gateways' rejoin loop (gateway/gossip.go) they would keep
// the other region dead after the heal, routing would refuse every flow
// ("region unreachable") and the hosts would fail their messages after
// FailAfter. Nothing may be lost, duplicated, corrupted or failed.
func TestChaosGossipPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four gateway processes")
	}
	var progress strings.Builder
	daemon, lab := testBinaries(t)
	o := Options{Duration: 10 * time.Second, Seed: 1, Binary: daemon, LabBinary: lab, Faults: []string{FaultPartition},
		Flows: 2, PlaneRateBps: 10e6, RecoverBound: 45 * time.Second, Progress: &progress}
	rep, err := Run(context.Background(), o)
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range rep.Injections {
		t.Logf("%s: %s", in.Fault, in.Note)
		if in.Fault == FaultPartition && !in.CutSeen {
			t.Errorf("no gateway saw the other region's gateways die during the cut: the partition did not reach gossip (%s)", in.Note)
		}
	}
	if !rep.OK() {
		t.Errorf("lost %d, duplicated %d, corrupted %d, failed %d; errors:\n%s",
			rep.Lost, rep.Duplicated, rep.Corrupted, rep.Failed, strings.Join(rep.Errors, "\n"))
	}
}

// TestChaosRollingUpgrade upgrades the four gateway processes one at a
// time under traffic, as docs/OPERATIONS.md tells an operator to:
// SIGTERM, the binary replaced (a second build of the daemon), started,
// ready before the next. The gateways not yet upgraded speak as the
// release before wire version 2 and gossip metadata version 2
// (--wire-versions 1 --gossip-meta-version 1): the first upgraded
// gateway's connections agree version 1, the last one's version 2. Nothing
// may be lost, duplicated, corrupted or failed, and every flow must
// deliver again. Stalls are logged, not asserted.
func TestChaosRollingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four gateway processes and restarts each")
	}
	var progress strings.Builder
	daemon, lab := testBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	next, err := Build(ctx, t.TempDir(), "mrgw")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{
		Duration: 10 * time.Second, Seed: 1, Binary: daemon, UpgradeBinary: next, OldArgs: []string{"--wire-versions", "1", "--gossip-meta-version", "1"}, LabBinary: lab,
		Faults: []string{FaultUpgrade}, Flows: 2, PlaneRateBps: 10e6, RecoverBound: 45 * time.Second,
		Progress: &progress,
	}
	rep, err := Run(ctx, o)
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatal(err)
	}
	upgraded := 0
	for _, in := range rep.Injections {
		if in.Fault != FaultUpgrade {
			continue
		}
		upgraded++
		t.Logf("%s: stall %.0f ms, %s %s", in.Fault, in.StallMs, in.Note, in.Err)
		steps := strings.Split(strings.TrimPrefix(in.Note, "stop to ready: "), "; ")
		if len(steps) != 4 || !strings.Contains(steps[0], " v1") || strings.Contains(steps[0], " v2") ||
			!strings.Contains(steps[3], " v2") || strings.Contains(steps[3], " v1") {
			t.Errorf("want the first gateway upgraded on wire version 1 with its peers and the last on version 2: %q", in.Note)
		}
	}
	if upgraded == 0 {
		t.Fatal("no rolling upgrade injected")
	}
	if rep.Completed < 100 {
		t.Errorf("only %d messages completed", rep.Completed)
	}
	if !rep.OK() {
		t.Errorf("lost %d, duplicated %d, corrupted %d, failed %d; errors:\n%s\nfiles: %s",
			rep.Lost, rep.Duplicated, rep.Corrupted, rep.Failed, strings.Join(rep.Errors, "\n"), rep.Dir)
	}
}
