package netem

import (
	"math/bits"
	"net/netip"
)

// mix64 is the SplitMix64 finaliser: a cheap bijective mixer with good
// avalanche, enough for spreading flows over at most 64 planes.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// ecmpHash hashes a UDP 5-tuple with a seed, as a switch hashes the
// header fields. The direction is folded in so the two directions of one
// path are placed independently, as separate fabrics' hashes would.
func ecmpHash(seed uint64, d Dir, src, dst netip.AddrPort) uint64 {
	h := mix64(seed ^ (uint64(d)+1)*0x9e3779b97f4a7c15)
	for _, a := range [2]netip.AddrPort{src, dst} {
		b := a.Addr().As16()
		hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
			uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
		lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 |
			uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
		h = mix64(h ^ hi)
		h = mix64(h ^ lo)
		h = mix64(h ^ uint64(a.Port()))
	}
	return mix64(h ^ 17) // IP protocol number of UDP
}

// planeOf maps a hash onto n planes by multiply-shift (Lemire), which
// uses the hash's high bits and avoids modulo bias.
func planeOf(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}
