//go:build linux && race

package flood

// raceEnabled: the race detector allows 8,128 goroutines alive at once.
const raceEnabled = true
