// Package units gives rates their units: BitRate (bits per second) and
// ByteRate (bytes per second) are distinct types, so that the compiler
// refuses a rate in one unit where the other is meant (after quic-go's
// protocol.ByteCount and congestion.Bandwidth). Bits() and Bytes() are the
// only conversions between them: the one place in the module that
// multiplies or divides a rate by 8 (TestNoBareConversions holds the rest
// of the module to it).
//
// Configuration, command lines, the wire's rate hints and reports speak
// bits per second (line rates, capacities); controllers and pacing speak
// bytes per second (they count the bytes they send). The boundaries
// between them carry these types; arithmetic inside a controller, where
// every term has one unit, may stay in float64.
//
// It also reads and prints the sizes and rates of the command lines
// (ParseBytes, ParseRate, ParseFraction and their Format counterparts,
// parse.go).
//
// This package imports nothing of the project and sits under every package
// that does (internal/layering gives it the lowest floor).
package units

import (
	"math"
	"strconv"
	"time"
)

// BitsPerByte is the factor between the two rates.
const BitsPerByte = 8

// BitRate is a rate in bits per second: a line rate, a link's or a
// receiver's capacity, a configured ceiling, a rate hint on the wire, a
// measured goodput in a report.
type BitRate float64

// ByteRate is a rate in bytes per second: what a controller paces at and
// what a receiver's share is when a sender applies it.
type ByteRate float64

// Common bit rates.
const (
	Kbps BitRate = 1e3
	Mbps BitRate = 1e6
	Gbps BitRate = 1e9
)

// Bytes returns r in bytes per second.
func (r BitRate) Bytes() ByteRate { return ByteRate(r / BitsPerByte) }

// Bits returns r in bits per second.
func (r ByteRate) Bits() BitRate { return BitRate(r * BitsPerByte) }

// BytesIn returns the bytes that r carries in d (a bandwidth-delay
// product, a queue of d at r), unrounded.
func (r ByteRate) BytesIn(d time.Duration) float64 { return float64(r) * d.Seconds() }

// String prints r for people in the largest decimal unit that keeps it at
// least 1: "10Gbit/s", "1.5Gbit/s", "200Mbit/s", "999bit/s"; "0" for 0.
// ParseRate reads it back.
func (r BitRate) String() string {
	return formatRate(float64(r), []unit{{"Tbit/s", 1e12}, {"Gbit/s", 1e9}, {"Mbit/s", 1e6}, {"kbit/s", 1e3}}, "bit/s")
}

// String prints r for people in decimal byte units: "1.25GB/s",
// "12.5MB/s", "100B/s"; "0" for 0.
func (r ByteRate) String() string {
	return formatRate(float64(r), []unit{{"TB/s", 1e12}, {"GB/s", 1e9}, {"MB/s", 1e6}, {"kB/s", 1e3}}, "B/s")
}

type unit struct {
	name string
	mult float64
}

func formatRate(v float64, us []unit, base string) string {
	if v == 0 {
		return "0"
	}
	for _, u := range us {
		if math.Abs(v) >= u.mult {
			return strconv.FormatFloat(v/u.mult, 'f', -1, 64) + u.name
		}
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + base
}

// Throughput is the bit rate at which bytes were delivered in seconds (a
// measured goodput), unrounded.
func Throughput(bytes, seconds float64) BitRate { return ByteRate(bytes / seconds).Bits() }

// Ms is d in milliseconds, to the microsecond: the unit of delays in the
// gateway's status, its logs and the load tests' rows.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
