//go:build linux && race

package gateway_test

// raceEnabled: under the race detector every packet costs several times
// its normal CPU, and on this 2-core machine the hosts and gateways of a
// test, not its emulated WAN, become the bottleneck.
const raceEnabled = true
