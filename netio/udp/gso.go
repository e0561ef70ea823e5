//go:build linux

package udp

import (
	"github.com/mrgw/mrgw/internal/ecn"
)

// Kernel limits of one UDP_SEGMENT send.
const (
	maxGSOSegments = ecn.MaxGSOSegments
	// maxGSOBytes is the most payload one sendmsg may carry: a UDP length
	// of 65535 less the 8-byte UDP and 20-byte IPv4 headers. IPv6 would
	// allow 20 more bytes; one limit for both keeps the rule simple.
	maxGSOBytes = 65507
)

// sendGroup is a run of consecutive messages that leave in one sendmsg: as
// a single datagram when count is 1, else as a GSO super-datagram cut into
// segments of segSize bytes (the last one possibly shorter).
type sendGroup struct {
	start, count int
	segSize      int
	bytes        int
	ecn          ecn.Codepoint
}

// planGSO appends to groups the partition of msgs into sendGroups and
// returns it. It is a pure function of its arguments. A message joins the
// group before it only when the kernel would cut the group's concatenated
// payload back into exactly these datagrams:
//
//   - same destination and same ECN codepoint (one cmsg set per sendmsg);
//   - its length is at most the group's segment size (the first message's
//     length), and every earlier member had exactly the segment size: only
//     the last segment may be short;
//   - neither it nor the group is empty (a zero segment size is invalid);
//   - the group stays within maxSegs segments and maxBytes of payload.
//
// maxSegs <= 1 disables coalescing. def is the codepoint that stands for a
// message's ECN of NotECT (see Message).
func planGSO(groups []sendGroup, msgs []Message, maxSegs, maxBytes int, def ecn.Codepoint) []sendGroup {
	for i := range msgs {
		m := &msgs[i]
		cp := resolveECN(m.ECN, def)
		if n := len(groups); n > 0 {
			g := &groups[n-1]
			first := &msgs[g.start]
			lastFull := msgs[g.start+g.count-1].N == g.segSize
			if maxSegs > 1 && m.N > 0 && g.segSize > 0 && lastFull &&
				m.N <= g.segSize && m.Addr == first.Addr && cp == g.ecn &&
				g.count < maxSegs && g.bytes+m.N <= maxBytes {
				g.count++
				g.bytes += m.N
				continue
			}
		}
		groups = append(groups, sendGroup{start: i, count: 1, segSize: m.N, bytes: m.N, ecn: cp})
	}
	return groups
}

// resolveECN applies the Conn's default to a message that names no
// codepoint.
func resolveECN(cp, def ecn.Codepoint) ecn.Codepoint {
	if cp == ecn.NotECT {
		return def
	}
	return cp
}
