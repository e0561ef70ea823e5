//go:build linux && !race

package gateway_test

const raceEnabled = false
