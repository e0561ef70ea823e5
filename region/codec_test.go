package region

import (
	"bytes"
	"errors"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

func TestMetaRoundTrip(t *testing.T) {
	m := testMeta("eu-west", 1)
	m.Planes = append(m.Planes, Plane{Name: "mapped", WAN: netip.MustParseAddrPort("[::ffff:10.0.0.1]:4791")})
	b, err := EncodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if !metaEqual(got, m) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
	}
	// No control listener is allowed and costs only its tag byte.
	m.Control = netip.AddrPort{}
	if b2, err := EncodeMeta(m); err != nil || len(b2) != len(b)-6 {
		t.Errorf("without control: %d bytes, %v; want %d", len(b2), err, len(b)-6)
	}
}

func TestMetaRejects(t *testing.T) {
	ok := testMeta("r", 1)
	for name, mut := range map[string]func(*Meta){
		"no region":      func(m *Meta) { m.Region = "" },
		"empty plane":    func(m *Meta) { m.Planes[0].Name = "" },
		"plane no addr":  func(m *Meta) { m.Planes[0].WAN = netip.AddrPort{} },
		"port 0":         func(m *Meta) { m.Planes[0].WAN = netip.MustParseAddrPort("10.0.0.1:0") },
		"zone":           func(m *Meta) { m.Control = netip.MustParseAddrPort("[fe80::1%eth0]:1") },
		"bad utf8":       func(m *Meta) { m.Capabilities = []string{"\xff"} },
		"long name":      func(m *Meta) { m.Region = strings.Repeat("r", 256) },
		"over 512 bytes": func(m *Meta) { m.Capabilities = slices.Repeat([]string{strings.Repeat("c", 60)}, 9) },
	} {
		m := cloneMeta(ok)
		mut(&m)
		if _, err := EncodeMeta(m); err == nil {
			t.Errorf("%s: EncodeMeta accepted %+v", name, m)
		}
	}
	m := cloneMeta(ok)
	m.Capabilities = slices.Repeat([]string{strings.Repeat("c", 60)}, 9)
	if _, err := EncodeMeta(m); !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("oversize metadata error = %v, want ErrMetaTooLarge", err)
	}
}

func TestMetaVersions(t *testing.T) {
	want := testMeta("r", 1)
	b, _ := EncodeMeta(want)
	if b[0] != 2 {
		t.Fatalf("EncodeMeta writes version %d, want 2", b[0])
	}
	if _, err := DecodeMeta(append(slices.Clone(b), 0)); err == nil {
		t.Error("version 2 with a trailing byte decoded")
	}
	// A version-1 writer (gateways before fleets): no wire versions, no
	// capacity; placement weighs it DefaultCapacity.
	v1 := metaV1(t, want)
	got, err := DecodeMeta(v1)
	old := cloneMeta(want)
	old.Wire, old.Capacity = nil, 0
	if err != nil || !metaEqual(got, old) || got.Weight() != DefaultCapacity {
		t.Errorf("version 1 = %+v, %v", got, err)
	}
	if _, err := DecodeMeta(append(slices.Clone(v1), 0)); err == nil {
		t.Error("version 1 with a trailing byte decoded")
	}
	// A version-3 writer appends fields; this reader keeps the v2 part.
	v3 := append(slices.Clone(b), 0xAA, 0xBB)
	v3[0] = 3
	got, err = DecodeMeta(v3)
	if err != nil || !metaEqual(got, want) {
		t.Errorf("version 3 = %+v, %v", got, err)
	}
	for i := range b {
		if _, err := DecodeMeta(b[:i]); err == nil {
			t.Errorf("truncated to %d bytes decoded", i)
		}
	}
}

func sampleHealth() HealthReport {
	return HealthReport{From: "a1", Peer: "b2", Plane: "p3", State: pathmgr.Probing, RTT: 87654 * time.Microsecond,
		Loss: 0.125, ECNFraction: 1, At: time.Unix(1700000000, 123456789)}
}

// sampleBatch is a verdict batch of two reporters: one entry on the
// reporter's own plane, one on a peer's, and one of another reporter.
func sampleBatch() []byte {
	h := sampleHealth()
	own := h
	own.Peer, own.State = h.From, pathmgr.Down
	e1, _ := appendBatchEntry(nil, own, time.Second)
	e2, _ := appendBatchEntry(nil, h, 2*time.Second)
	other := h
	other.From = "c3"
	e3, _ := appendBatchEntry(nil, other, 0)
	b, _ := appendBatchGroup([]byte{kindBatch, batchVersion}, h.From, [][]byte{e1, e2})
	b, _ = appendBatchGroup(b, other.From, [][]byte{e3})
	return b
}

func TestHealthCodec(t *testing.T) {
	h := sampleHealth()
	b, err := appendHealth(nil, h, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	got, age, err := decodeHealth(b)
	if err != nil {
		t.Fatal(err)
	}
	if age != 1500*time.Millisecond || !healthEqual(got, HealthReport{From: "a1", Peer: "b2", Plane: "p3",
		State: pathmgr.Probing, RTT: 87654 * time.Microsecond, Loss: 8192.0 / 65535, ECNFraction: 1, At: h.At}) {
		t.Errorf("decoded %+v age %s", got, age)
	}
	if math.Abs(got.Loss-h.Loss) > 1.0/65535 {
		t.Errorf("loss %v quantized too coarsely", got.Loss)
	}
	for name, mut := range map[string]func(*HealthReport){
		"no peer":      func(h *HealthReport) { h.Peer = "" },
		"bad state":    func(h *HealthReport) { h.State = 9 },
		"NaN loss":     func(h *HealthReport) { h.Loss = math.NaN() },
		"loss > 1":     func(h *HealthReport) { h.Loss = 1.5 },
		"negative ecn": func(h *HealthReport) { h.ECNFraction = -0.1 },
		"negative rtt": func(h *HealthReport) { h.RTT = -1 },
	} {
		h := sampleHealth()
		mut(&h)
		if _, err := appendHealth(nil, h, 0); err == nil {
			t.Errorf("%s: encoded %+v", name, h)
		}
	}
	for i := range b {
		if _, _, err := decodeHealth(b[:i]); err == nil {
			t.Errorf("truncated to %d bytes decoded", i)
		}
	}
	batch := appendHealthBatch(nil, [][]byte{b, b})
	recs, err := decodeHealthBatch(batch)
	if err != nil || len(recs) != 2 || !bytes.Equal(recs[1], b) {
		t.Errorf("batch = %d records, %v", len(recs), err)
	}
	bye, _ := appendGoodbye(nil, "b1")
	if name, err := decodeGoodbye(bye); err != nil || name != "b1" {
		t.Errorf("goodbye = %q, %v", name, err)
	}
}

// FuzzDecodeMeta: never panics; whatever decodes as the version EncodeMeta
// writes (2) encodes back to the same bytes (one encoding per value, so peers compare equal).
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []Meta{testMeta("r", 1), {Region: "x"}} {
		b, _ := EncodeMeta(m)
		f.Add(b)
		f.Add(metaV1(f, m))
	}
	f.Add([]byte{3, 1, 'r', 0, 0, 0, 1, 2, 0, 0, 0, 1, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			return
		}
		again, err := EncodeMeta(m)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		if b[0] == metaVersion && !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, again)
		}
	})
}

// FuzzDecodeHealth covers health messages, batches and goodbyes, the three
// things NotifyMsg and MergeRemoteState accept from the network.
func FuzzDecodeHealth(f *testing.F) {
	b, _ := appendHealth(nil, sampleHealth(), time.Second)
	f.Add(b)
	f.Add(appendHealthBatch(nil, [][]byte{b}))
	bye, _ := appendGoodbye(nil, "a1")
	f.Add(bye)
	f.Add(sampleBatch())
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, age, err := decodeHealth(b); err == nil {
			if err := checkHealth(&h); err != nil {
				return // e.g. a loss above 1 in fixed point; NotifyMsg drops it
			}
			again, err := appendHealth(nil, h, age)
			if err != nil {
				t.Fatalf("decoded %+v does not encode: %v", h, err)
			}
			if b[1] == healthVersion && !bytes.Equal(again, b) {
				t.Fatalf("re-encoding differs:\n in %x\nout %x", b, again)
			}
		}
		if recs, err := decodeHealthBatch(b); err == nil {
			for _, r := range recs {
				_, _, _ = decodeHealth(r)
			}
		}
		if hs, ages, err := decodeBatch(b); err == nil {
			// Re-encoding what decoded decodes to the same verdicts (not
			// always the same bytes: a peer equal to the reporter may be
			// spelt out, the encoder leaves it empty).
			again := []byte{kindBatch, batchVersion}
			for i, h := range hs {
				if checkHealth(&h) != nil {
					return
				}
				e, err := appendBatchEntry(nil, h, ages[i])
				if err != nil {
					t.Fatalf("decoded %+v does not encode: %v", h, err)
				}
				if again, err = appendBatchGroup(again, h.From, [][]byte{e}); err != nil {
					t.Fatal(err)
				}
			}
			hs2, ages2, err := decodeBatch(again)
			if err != nil || !reflect.DeepEqual(hs, hs2) || !reflect.DeepEqual(ages, ages2) {
				t.Fatalf("batch re-encodes as %x: %v", again, err)
			}
		}
		if name, err := decodeGoodbye(b); err == nil && b[1] == goodbyeVersion {
			if again, _ := appendGoodbye(nil, name); !bytes.Equal(again, b) {
				t.Fatalf("goodbye re-encodes as %x", again)
			}
		}
	})
}

// TestWriteSeedCorpus regenerates testdata/fuzz from the encoders:
// REGION_UPDATE_CORPUS=1 go test -run TestWriteSeedCorpus ./region
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("REGION_UPDATE_CORPUS") == "" {
		t.Skip("set REGION_UPDATE_CORPUS=1 to regenerate testdata/fuzz")
	}
	write := func(target, name string, b []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		data := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := EncodeMeta(testMeta("eu-west", 1))
	write("FuzzDecodeMeta", "meta-v1", metaV1(t, testMeta("eu-west", 1)))
	write("FuzzDecodeMeta", "meta-v2", m)
	m3 := append(slices.Clone(m), 7)
	m3[0] = 3
	write("FuzzDecodeMeta", "meta-v3", m3)
	h, _ := appendHealth(nil, sampleHealth(), 2*time.Second)
	write("FuzzDecodeHealth", "health-v1", h)
	write("FuzzDecodeHealth", "batch-v1", appendHealthBatch(nil, [][]byte{h, h}))
	bye, _ := appendGoodbye(nil, "b2")
	write("FuzzDecodeHealth", "goodbye-v1", bye)
	write("FuzzDecodeHealth", "verdict-batch-v1", sampleBatch())
}
