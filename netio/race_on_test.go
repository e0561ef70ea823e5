//go:build linux && race

package netio

// raceEnabled: the race detector makes sync.Pool (used inside x/net's
// sendmmsg and by the AEAD's nonces) drop items at random, so allocation
// counts are meaningless.
const raceEnabled = true
