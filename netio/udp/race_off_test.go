//go:build linux && !race

package udp

const raceEnabled = false
