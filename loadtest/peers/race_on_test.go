//go:build linux && race

package peers

// raceEnabled: under the race detector every packet costs several times
// its normal CPU, and on a 2-core machine mrgw's senders, relay and
// receiver (one process), not the emulated link, become the bottleneck:
// three mrgw flows measured 4 Mbit/s in all. Tests that assert that every
// flow moves data do so without -race (scripts/test.sh runs them once so).
const raceEnabled = true
