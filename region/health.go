package region

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// HealthReport is one gateway's summary of its paths to a peer gateway over
// one plane, as the path manager measured it.
type HealthReport struct {
	From  string        // the reporting gateway (set by PublishHealth)
	Peer  string        // the gateway the paths lead to
	Plane string        // the plane they cross
	State pathmgr.State // the path manager's verdict
	RTT   time.Duration // smoothed RTT; carried in microseconds
	Loss  float64       // fraction of packets lost, 0..1; carried in 1/65535
	// ECNFraction is the fraction of packets CE-marked, 0..1.
	ECNFraction float64
	// At is when the reporter measured, on the reporter's clock. It orders
	// reports from one reporter; expiry does not use it, because the
	// clocks of two regions need not agree (see [Config.HealthTTL]).
	At time.Time
}

// Every user message starts with a kind byte, so that other kinds can be
// added later and old gateways skip them, then a version byte.
const (
	kindHealth     = 'h'
	healthVersion  = 1
	kindGoodbye    = 'g'
	goodbyeVersion = 1
)

// healthBatchVersion starts a push/pull state transfer of health reports.
const healthBatchVersion = 1

// maxRTT is the largest RTT the wire carries (uint32 microseconds, ~71 min).
const maxRTT = time.Duration(math.MaxUint32) * time.Microsecond

// maxAge is the largest age the wire carries (uint32 milliseconds).
const maxAge = time.Duration(math.MaxUint32) * time.Millisecond

// Wire layout of a health message, version 1:
//
//	kind     1 byte ('h')
//	version  1 byte (1)
//	from     len + bytes
//	peer     len + bytes
//	plane    len + bytes
//	state    1 byte (pathmgr.State: up, suspect, down, probing)
//	rtt      uint32 microseconds
//	loss     uint16, fraction × 65535
//	ecn      uint16, fraction × 65535
//	at       int64 Unix nanoseconds (reporter's clock)
//	age      uint32 milliseconds the report had already lived when sent
//
// The age, not "at", drives expiry: each gateway adds the time it held the
// report before passing it on, so every copy expires at about the same real
// time whatever the clocks say, and an expired report cannot come back.

func fraction16(f float64) uint16 { return uint16(math.Round(f * math.MaxUint16)) }

func checkHealth(h *HealthReport) error {
	switch {
	case h.From == "", h.Peer == "", h.Plane == "":
		return errors.New("region: health report needs From, Peer and Plane")
	case h.State > pathmgr.Probing:
		return fmt.Errorf("region: health report state %v is not a path state", h.State)
	case h.RTT < 0 || h.RTT > maxRTT:
		return fmt.Errorf("region: health report RTT %s out of range", h.RTT)
	case !(h.Loss >= 0 && h.Loss <= 1): // also refuses NaN
		return fmt.Errorf("region: health report loss %v is not a fraction", h.Loss)
	case !(h.ECNFraction >= 0 && h.ECNFraction <= 1):
		return fmt.Errorf("region: health report ECN fraction %v is not a fraction", h.ECNFraction)
	}
	return nil
}

// appendHealth appends the version-1 encoding of h, sent age after it was
// measured.
func appendHealth(b []byte, h HealthReport, age time.Duration) ([]byte, error) {
	if err := checkHealth(&h); err != nil {
		return nil, err
	}
	b = append(b, kindHealth, healthVersion)
	var err error
	for _, f := range [...]struct{ what, s string }{{"from", h.From}, {"peer", h.Peer}, {"plane", h.Plane}} {
		if b, err = appendString(b, f.what, f.s, false); err != nil {
			return nil, err
		}
	}
	return appendVerdict(b, h, age), nil
}

// decodeHealth decodes one health message and the age it was sent with.
func decodeHealth(b []byte) (HealthReport, time.Duration, error) {
	r := reader{b: b}
	kind, v := r.byte(), r.byte()
	switch {
	case r.err != nil:
	case kind != kindHealth:
		return HealthReport{}, 0, fmt.Errorf("%w: message kind %#x", errMalformed, kind)
	case v == 0:
		return HealthReport{}, 0, fmt.Errorf("%w: health message version 0", errMalformed)
	}
	h := HealthReport{From: r.str(false), Peer: r.str(false), Plane: r.str(false)}
	age := readVerdict(&r, &h)
	switch {
	case r.err != nil:
		return HealthReport{}, 0, fmt.Errorf("health report: %w", r.err)
	case v == healthVersion && len(r.b) != 0:
		// Newer versions may append fields; version 1 has none.
		return HealthReport{}, 0, fmt.Errorf("%w: %d trailing bytes in health report", errMalformed, len(r.b))
	case h.State > pathmgr.Probing:
		return HealthReport{}, 0, fmt.Errorf("%w: health report state %d", errMalformed, h.State)
	}
	return h, age, nil
}

// A batch (push/pull state) is a version byte, a uint16 count and that many
// records, each a uint16 length and a health message.

func appendHealthBatch(b []byte, msgs [][]byte) []byte {
	b = append(b, healthBatchVersion)
	n := min(len(msgs), math.MaxUint16)
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	for _, m := range msgs[:n] {
		b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}

// decodeHealthBatch returns the records of a batch; each still has to be
// decoded with decodeHealth. The records alias b.
func decodeHealthBatch(b []byte) ([][]byte, error) {
	r := reader{b: b}
	if v := r.byte(); r.err == nil && v != healthBatchVersion {
		return nil, fmt.Errorf("%w: health batch version %d", errMalformed, v)
	}
	n := int(r.u16())
	var out [][]byte
	for i := 0; i < n && r.err == nil; i++ {
		if p := r.take(int(r.u16())); p != nil {
			out = append(out, p)
		}
	}
	switch {
	case r.err != nil:
		return nil, fmt.Errorf("health batch: %w", r.err)
	case len(r.b) != 0:
		return nil, fmt.Errorf("%w: %d trailing bytes in health batch", errMalformed, len(r.b))
	}
	return out, nil
}

// A goodbye is kind 'g', version 1, then the leaving gateway's name (len +
// bytes). It exists because memberlist v0.7.0 cannot tell its EventDelegate
// whether a member left or died: NotifyLeave's Node.State is never updated
// (memberlist keeps the real state in a field that shadows it).

func appendGoodbye(b []byte, name string) ([]byte, error) {
	b = append(b, kindGoodbye, goodbyeVersion)
	return appendString(b, "name", name, false)
}

func decodeGoodbye(b []byte) (string, error) {
	r := reader{b: b}
	kind, v := r.byte(), r.byte()
	name := r.str(false)
	switch {
	case r.err != nil:
		return "", fmt.Errorf("goodbye: %w", r.err)
	case kind != kindGoodbye || v == 0:
		return "", fmt.Errorf("%w: goodbye kind %#x version %d", errMalformed, kind, v)
	case v == goodbyeVersion && len(r.b) != 0:
		return "", fmt.Errorf("%w: %d trailing bytes in goodbye", errMalformed, len(r.b))
	}
	return name, nil
}

// A verdict batch (kind 'b') carries many verdicts, of several reporters,
// in one gossip message. It exists for storms: a version-1 health message
// costs about 48 bytes in a gossip packet (its header, the reporter's and
// the peer's names, memberlist's 3 bytes of framing per message), so a
// 1,369-byte packet (1,400 less memberlist's header and encryption)
// carried 28 verdicts; in a batch the framing is paid once per packet,
// the reporter's name once per reporter, and a verdict on the reporter's
// own plane names no peer: 26 bytes an entry, 36 with the group header
// when every entry has another reporter (docs/GATEWAY.md, "Verdict
// batches").
//
// Wire layout, version 1:
//
//	kind     1 byte ('b')
//	version  1 byte (1)
//	then one or more groups, to the end of the message:
//	  from   len + bytes: the reporter of the group's entries
//	  count  1 byte, 1..255 entries, each:
//	    peer   len + bytes; length 0 means the reporter itself
//	    plane  len + bytes
//	    state  1 byte
//	    rtt    uint32 microseconds
//	    loss   uint16, fraction × 65535
//	    ecn    uint16, fraction × 65535
//	    at     int64 Unix nanoseconds (reporter's clock)
//	    age    uint32 milliseconds
//
// Entries are queued one by one (healthQueue keeps one per verdict and
// counts its transmissions): a batch is only how GetBroadcasts packs what
// is due into a packet, so no entry ever replaces another across batches.
// CapHealthBatch is the capability (Meta.Capabilities) of a gateway that
// reads verdict batches. A gateway sends batches only while every alive
// member announces it, else version-1 messages, so a fleet can be
// upgraded one gateway at a time.
const CapHealthBatch = "health-batch-v1"

const (
	kindBatch      = 'b'
	batchVersion   = 1
	batchHeader    = 2
	maxBatchCount  = 255
	batchEntryBase = 1 + 1 + 4 + 2 + 2 + 8 + 4 // peer len, state, rtt, loss, ecn, at, age
)

// groupHeaderSize is the size of a group's header for reporter from.
func groupHeaderSize(from string) int { return 1 + len(from) + 1 }

// appendBatchGroup appends a group of entries (appendBatchEntry) of
// reporter from; a batch is kindBatch, batchVersion and one or more groups.
func appendBatchGroup(b []byte, from string, entries [][]byte) ([]byte, error) {
	if len(entries) == 0 || len(entries) > maxBatchCount {
		return nil, fmt.Errorf("region: %d entries in a verdict batch group", len(entries))
	}
	b, err := appendString(b, "from", from, false)
	if err != nil {
		return nil, err
	}
	b = append(b, byte(len(entries)))
	for _, e := range entries {
		b = append(b, e...)
	}
	return b, nil
}

// appendBatchEntry appends the batch entry of h, sent age after it was
// measured.
func appendBatchEntry(b []byte, h HealthReport, age time.Duration) ([]byte, error) {
	if err := checkHealth(&h); err != nil {
		return nil, err
	}
	if _, err := appendString(nil, "from", h.From, false); err != nil {
		return nil, err // the group header will carry it
	}
	peer := h.Peer
	if peer == h.From {
		peer = ""
	}
	var err error
	if b, err = appendString(b, "peer", peer, true); err != nil {
		return nil, err
	}
	if b, err = appendString(b, "plane", h.Plane, false); err != nil {
		return nil, err
	}
	return appendVerdict(b, h, age), nil
}

// decodeBatch decodes a verdict batch into its reports and their ages.
func decodeBatch(b []byte) ([]HealthReport, []time.Duration, error) {
	r := reader{b: b}
	kind, v := r.byte(), r.byte()
	switch {
	case r.err != nil:
	case kind != kindBatch:
		return nil, nil, fmt.Errorf("%w: message kind %#x", errMalformed, kind)
	case v != batchVersion:
		// A later version may lay entries out differently: skip it whole.
		return nil, nil, fmt.Errorf("%w: verdict batch version %d", errMalformed, v)
	}
	if r.err == nil && len(r.b) == 0 {
		r.fail("empty verdict batch")
	}
	var hs []HealthReport
	var ages []time.Duration
	for r.err == nil && len(r.b) > 0 {
		from := r.str(false)
		n := int(r.byte())
		if r.err == nil && n == 0 {
			r.fail("empty verdict batch group")
		}
		for i := 0; i < n && r.err == nil; i++ {
			h := HealthReport{From: from, Peer: r.str(true), Plane: r.str(false)}
			if h.Peer == "" {
				h.Peer = from
			}
			age := readVerdict(&r, &h)
			if r.err == nil && h.State > pathmgr.Probing {
				r.fail("verdict batch state %d", h.State)
			}
			hs, ages = append(hs, h), append(ages, age)
		}
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("verdict batch: %w", r.err)
	}
	// A batch with one invalid entry is not a gateway's (its encoder
	// validates every entry): refused whole.
	for i := range hs {
		if err := checkHealth(&hs[i]); err != nil {
			return nil, nil, fmt.Errorf("verdict batch entry %d: %w", i, err)
		}
	}
	return hs, ages, nil
}

// appendVerdict appends what a single health message and a batch entry
// share after the names: state, RTT, loss, ECN fraction, the time of the
// verdict and the age it is sent with (clamped to maxAge).
// readVerdict reads what appendVerdict wrote into h and returns the age;
// r's error says whether it was there.
func readVerdict(r *reader, h *HealthReport) time.Duration {
	h.State = pathmgr.State(r.byte())
	h.RTT = time.Duration(r.u32()) * time.Microsecond
	h.Loss = float64(r.u16()) / math.MaxUint16
	h.ECNFraction = float64(r.u16()) / math.MaxUint16
	h.At = time.Unix(0, int64(r.u64()))
	return time.Duration(r.u32()) * time.Millisecond
}

func appendVerdict(b []byte, h HealthReport, age time.Duration) []byte {
	b = append(b, byte(h.State))
	b = binary.BigEndian.AppendUint32(b, uint32(h.RTT/time.Microsecond))
	b = binary.BigEndian.AppendUint16(b, fraction16(h.Loss))
	b = binary.BigEndian.AppendUint16(b, fraction16(h.ECNFraction))
	b = binary.BigEndian.AppendUint64(b, uint64(h.At.UnixNano()))
	age = min(max(age, 0), maxAge)
	return binary.BigEndian.AppendUint32(b, uint32(age/time.Millisecond))
}
