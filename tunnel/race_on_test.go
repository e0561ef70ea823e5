//go:build race

package tunnel

// raceOn shrinks transfers: the race detector slows the datapath ~10x.
const raceOn = true
