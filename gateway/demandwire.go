package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/mrgw/mrgw/units"
)

// capRegionDemand is the capability (region.Meta.Capabilities) of a
// gateway that reads demand reports: a gateway sends them only to those,
// and counts the others at their static part, so that a region can be
// upgraded one gateway at a time.
const capRegionDemand = "region-demand-v1"

// demandReport is what a gateway tells its region's other gateways every
// demandEvery, in a region gateway message (region.Cluster.SendMessage).
//
// Wire layout, version 1 (integers big-endian):
//
//	version  1 byte (1)
//	flags    1 byte: bit 0 limited (its part held it back); others 0
//	seq      uint64: the sender's wall clock in Unix nanoseconds when it
//	         sent, which orders its reports (a datagram overtaken on the
//	         way is dropped)
//	rate     uint64 bit/s on the wire: what its WAN connections carried
//	         over the last exchange, the larger direction
//	part     uint64 bit/s on the wire: its part of the region's rate when
//	         it sent (for /status)
//	region   len (1 byte) + bytes
//	from     len (1 byte) + bytes
//
// A later version may append fields: a reader of version 1 reads these
// and ignores the rest.
type demandReport struct {
	Region, From string
	Seq          uint64
	demandSample
	Part units.BitRate
}

const (
	demandVersion    = 1
	demandFlagLimit  = 1 << 0
	demandFixedBytes = 1 + 1 + 8 + 8 + 8
	// maxDemandRate bounds the rates a report carries (1 Pbit/s): a
	// larger one is malformed, not a demand.
	maxDemandRate = 1e15
)

var errBadDemand = errors.New("malformed demand report")

func appendDemand(b []byte, r demandReport) ([]byte, error) {
	switch {
	case r.Region == "" || r.From == "":
		return nil, fmt.Errorf("%w: empty region or name", errBadDemand)
	case len(r.Region) > 255 || len(r.From) > 255:
		return nil, fmt.Errorf("%w: region or name longer than 255 bytes", errBadDemand)
	case !(r.Rate >= 0 && r.Rate <= maxDemandRate && r.Part >= 0 && r.Part <= maxDemandRate):
		return nil, fmt.Errorf("%w: rate %v, part %v", errBadDemand, r.Rate, r.Part)
	}
	var flags byte
	if r.Limited {
		flags |= demandFlagLimit
	}
	b = append(b, demandVersion, flags)
	b = binary.BigEndian.AppendUint64(b, r.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(math.Round(float64(r.Rate))))
	b = binary.BigEndian.AppendUint64(b, uint64(math.Round(float64(r.Part))))
	b = append(b, byte(len(r.Region)))
	b = append(b, r.Region...)
	b = append(b, byte(len(r.From)))
	return append(b, r.From...), nil
}

func decodeDemand(b []byte) (demandReport, error) {
	var r demandReport
	if len(b) < demandFixedBytes+2 {
		return r, fmt.Errorf("%w: %d bytes", errBadDemand, len(b))
	}
	v, flags := b[0], b[1]
	if v == 0 {
		return r, fmt.Errorf("%w: version 0", errBadDemand)
	}
	if v == demandVersion && flags&^demandFlagLimit != 0 {
		return r, fmt.Errorf("%w: flags %#x", errBadDemand, flags)
	}
	r.Limited = flags&demandFlagLimit != 0
	r.Seq = binary.BigEndian.Uint64(b[2:])
	rate, part := binary.BigEndian.Uint64(b[10:]), binary.BigEndian.Uint64(b[18:])
	if rate > maxDemandRate || part > maxDemandRate {
		return r, fmt.Errorf("%w: rate %d, part %d bit/s", errBadDemand, rate, part)
	}
	r.Rate, r.Part = units.BitRate(rate), units.BitRate(part)
	rest := b[demandFixedBytes:]
	var err error
	if r.Region, rest, err = demandString(rest, "region"); err != nil {
		return r, err
	}
	if r.From, rest, err = demandString(rest, "name"); err != nil {
		return r, err
	}
	if v == demandVersion && len(rest) != 0 {
		return r, fmt.Errorf("%w: %d trailing bytes", errBadDemand, len(rest))
	}
	return r, nil
}

// demandString reads a length-prefixed, non-empty UTF-8 string.
func demandString(b []byte, what string) (string, []byte, error) {
	if len(b) < 1 || b[0] == 0 || len(b) < 1+int(b[0]) {
		return "", nil, fmt.Errorf("%w: %s missing or cut short", errBadDemand, what)
	}
	s := string(b[1 : 1+int(b[0])])
	if !utf8.ValidString(s) {
		return "", nil, fmt.Errorf("%w: %s is not UTF-8", errBadDemand, what)
	}
	return s, b[1+int(b[0]):], nil
}
