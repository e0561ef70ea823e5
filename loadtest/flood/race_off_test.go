//go:build linux && !race

package flood

const raceEnabled = false
