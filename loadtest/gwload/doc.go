// Package gwload runs load tests through real gateways with real sockets:
// the two-region lab (loadtest/lab: 2 regions × 2 gateways, the loopback
// ECMP emulator between them) with hosts (package host) on both sides,
// driven by a Scenario: planes and their links, a workload (bulk flows,
// incast or a synchronized allreduce) and faults at given times (a plane
// failing or coming back, a gateway killed).
//
// Scenarios come from YAML files (ParseScenario, LoadScenario) or from the
// built-in sets (Builtin): plane-failure, gateway-failure, connections,
// incast, allreduce and fairness. Fairness (Scenario.Sources) replaces the
// lab's two regions by three source regions 10, 50 and 150 ms away from
// one destination gateway, whose WAN capacity (the emulated planes) they
// share.
//
// Every number is measured end to end at the hosts: goodput is the bytes
// delivered to the destination applications; a message counts as lost when
// its source saw it complete (Pending.Wait returned nil) and no delivery of
// one of its segments reached the destination, and as duplicated when a
// destination application received one of its segments twice. Messages
// still incomplete when the drain time is over, and messages that failed
// with an error, are counted separately: both are outcomes, not crashes.
//
// Every loop is bounded: the run lasts Scenario.Duration, then drains
// what is in flight until nothing was delivered for Options.Drain (no
// write starts after Duration, so the drain ends: at worst one Drain per
// message in flight), each step of a synchronized workload at most that,
// and opening flows at most Options.OpenTimeout.
package gwload
