//go:build !race

package tunnel

const raceOn = false
