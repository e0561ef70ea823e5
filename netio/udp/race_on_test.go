//go:build linux && race

package udp

// raceEnabled: the race detector makes sync.Pool (used inside x/net's batch
// I/O) drop items at random, so allocation counts are meaningless.
const raceEnabled = true
