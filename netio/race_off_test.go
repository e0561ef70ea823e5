//go:build linux && !race

package netio

const raceEnabled = false
