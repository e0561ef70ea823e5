//go:build linux && !race

package datapath

const raceEnabled = false
