//go:build linux && race

package datapath

// raceEnabled: under the race detector every Go instruction of the
// datapath is instrumented and the AEAD's assembly is not, and a short
// window on a shared machine carries a few hundred datagrams: the rows'
// CPU per Gbit/s then say nothing about how the systems compare.
const raceEnabled = true
