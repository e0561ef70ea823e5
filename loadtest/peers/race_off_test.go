//go:build linux && !race

package peers

// raceEnabled: see race_on_test.go.
const raceEnabled = false
