//go:build linux

package ecn

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listen opens a UDP socket on loopback for the given network ("udp4" or
// "udp6"), skipping the test if IPv6 loopback is unavailable.
func listen(t *testing.T, network string) *net.UDPConn {
	t.Helper()
	ip := net.IPv4(127, 0, 0, 1)
	if network == "udp6" {
		ip = net.IPv6loopback
	}
	c, err := net.ListenUDP(network, &net.UDPAddr{IP: ip})
	if err != nil {
		if network == "udp6" {
			t.Skipf("IPv6 loopback ::1 unavailable on this machine: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLoopbackECN sends datagrams with each codepoint over loopback and
// checks that the receiver reads the same codepoint back from its cmsgs.
func TestLoopbackECN(t *testing.T) {
	for _, network := range []string{"udp4", "udp6"} {
		t.Run(network, func(t *testing.T) {
			rx := listen(t, network)
			tx := listen(t, network)
			if err := EnableReceive(rx); err != nil {
				t.Fatal(err)
			}
			dst := rx.LocalAddr().(*net.UDPAddr)
			v6 := network == "udp6"
			for _, cp := range []Codepoint{ECT0, CE, ECT1, NotECT} {
				oob := AppendECN(nil, v6, cp)
				payload := []byte("ecn " + cp.String())
				if _, _, err := tx.WriteMsgUDP(payload, oob, dst); err != nil {
					t.Fatalf("send %v: %v", cp, err)
				}
				buf := make([]byte, 64)
				roob := make([]byte, RecvSpace)
				rx.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, nn, _, _, err := rx.ReadMsgUDP(buf, roob)
				if err != nil {
					t.Fatalf("receive %v: %v", cp, err)
				}
				if !bytes.Equal(buf[:n], payload) {
					t.Fatalf("payload %q, want %q", buf[:n], payload)
				}
				c, err := ParseControl(roob[:nn])
				if err != nil {
					t.Fatal(err)
				}
				if !c.HasECN {
					t.Fatalf("no TOS/TCLASS cmsg in %x", roob[:nn])
				}
				if c.ECN != cp {
					t.Errorf("sent %v, received %v", cp, c.ECN)
				}
			}
		})
	}
}

// TestLoopbackNoReceiveOption checks that without EnableReceive the kernel
// reports nothing and ParseControl says so rather than inventing Not-ECT.
func TestLoopbackNoReceiveOption(t *testing.T) {
	rx := listen(t, "udp4")
	tx := listen(t, "udp4")
	if _, _, err := tx.WriteMsgUDP([]byte("x"), AppendECN(nil, false, CE), rx.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	roob := make([]byte, RecvSpace)
	_, nn, _, _, err := rx.ReadMsgUDP(make([]byte, 8), roob)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseControl(roob[:nn])
	if err != nil || c.HasECN {
		t.Fatalf("got %+v, %v; want no ECN info", c, err)
	}
}

// TestLoopbackGSOAndGRO sends one GSO super-datagram carrying CE and checks
// both receive paths: a plain socket sees separate datagrams, each marked
// CE; a GRO socket sees one buffer with the segment size reported.
func TestLoopbackGSOAndGRO(t *testing.T) {
	const seg, total = 1000, 2500 // 1000 + 1000 + 500
	payload := make([]byte, total)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	oob := AppendECN(nil, false, CE)
	oob = AppendGSO(oob, seg)
	if len(oob) > SendSpace {
		t.Fatalf("TOS+GSO cmsgs take %d bytes, SendSpace is %d", len(oob), SendSpace)
	}

	t.Run("split", func(t *testing.T) {
		rx := listen(t, "udp4")
		tx := listen(t, "udp4")
		if err := EnableReceive(rx); err != nil {
			t.Fatal(err)
		}
		if _, _, err := tx.WriteMsgUDP(payload, oob, rx.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Skipf("kernel refuses UDP_SEGMENT: %v", err)
		}
		var got []byte
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		for i, want := range []int{1000, 1000, 500} {
			buf := make([]byte, 4096)
			roob := make([]byte, RecvSpace)
			n, nn, _, _, err := rx.ReadMsgUDP(buf, roob)
			if err != nil {
				t.Fatal(err)
			}
			if n != want {
				t.Fatalf("segment %d: %d bytes, want %d", i, n, want)
			}
			c, err := ParseControl(roob[:nn])
			if err != nil || c.ECN != CE || c.GROSize != 0 {
				t.Fatalf("segment %d: control %+v, %v; want CE and no GRO", i, c, err)
			}
			got = append(got, buf[:n]...)
		}
		if !bytes.Equal(got, payload) {
			t.Fatal("segments do not reassemble to the payload")
		}
	})

	t.Run("gro", func(t *testing.T) {
		rx := listen(t, "udp4")
		tx := listen(t, "udp4")
		if err := EnableReceive(rx); err != nil {
			t.Fatal(err)
		}
		rc, _ := rx.SyscallConn()
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) })
		if serr != nil {
			t.Skipf("kernel refuses UDP_GRO: %v", serr)
		}
		if _, _, err := tx.WriteMsgUDP(payload, oob, rx.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Skipf("kernel refuses UDP_SEGMENT: %v", err)
		}
		buf := make([]byte, 65536)
		roob := make([]byte, RecvSpace)
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, nn, _, _, err := rx.ReadMsgUDP(buf, roob)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseControl(roob[:nn])
		if err != nil {
			t.Fatal(err)
		}
		if n != total || c.GROSize != seg || c.ECN != CE {
			t.Fatalf("got %d bytes, control %+v; want %d bytes, GRO size %d, CE", n, c, total, seg)
		}
		if !bytes.Equal(buf[:n], payload) {
			t.Fatal("GRO buffer differs from the payload")
		}
	})
}

// TestAppendMatchesKernelLayout checks the hand-made cmsgs against x/sys's
// own parser and CMSG_SPACE.
func TestAppendMatchesKernelLayout(t *testing.T) {
	prefix := []byte{0xAA} // appending must not touch existing bytes
	oob := AppendTrafficClass(prefix, true, 0xB9)
	oob = AppendGSO(oob, 1400)
	oob = AppendECN(oob, false, ECT0)
	if oob[0] != 0xAA {
		t.Fatal("prefix overwritten")
	}
	if want := 1 + 2*unix.CmsgSpace(4) + unix.CmsgSpace(2); len(oob) != want {
		t.Fatalf("len %d, want %d", len(oob), want)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[1:])
	if err != nil {
		t.Fatal(err)
	}
	type m struct {
		level, typ int32
		data       []byte
	}
	want := []m{
		{unix.IPPROTO_IPV6, unix.IPV6_TCLASS, binary.NativeEndian.AppendUint32(nil, 0xB9)},
		{unix.SOL_UDP, unix.UDP_SEGMENT, binary.NativeEndian.AppendUint16(nil, 1400)},
		{unix.IPPROTO_IP, unix.IP_TOS, binary.NativeEndian.AppendUint32(nil, uint32(ECT0))},
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d cmsgs, want %d", len(msgs), len(want))
	}
	for i, w := range want {
		g := msgs[i]
		if g.Header.Level != w.level || g.Header.Type != w.typ || !bytes.Equal(g.Data, w.data) {
			t.Errorf("cmsg %d: level %d type %d data %x; want %d %d %x", i, g.Header.Level, g.Header.Type, g.Data, w.level, w.typ, w.data)
		}
	}
	c, err := ParseControl(oob[1:])
	if err != nil {
		t.Fatal(err)
	}
	// The last TOS cmsg wins; the GSO cmsg is not a GRO report.
	if c.ECN != ECT0 || c.TrafficClass != byte(ECT0) || c.GROSize != 0 {
		t.Fatalf("ParseControl = %+v", c)
	}
}

func TestParseControlMalformed(t *testing.T) {
	good := AppendECN(nil, false, CE)
	bad := bytes.Clone(good)
	binary.NativeEndian.PutUint32(bad[0:], uint32(len(bad)+1)) // longer than the buffer
	if _, err := ParseControl(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("overlong cmsg: err %v, want ErrMalformed", err)
	}
	short := bytes.Clone(good)
	binary.NativeEndian.PutUint32(short[0:], 3) // shorter than its own header
	if _, err := ParseControl(short); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short cmsg: err %v, want ErrMalformed", err)
	}
	// Fewer bytes than a header are trailing padding, not an error.
	if c, err := ParseControl(good[:hdrSize-1]); err != nil || c.HasECN {
		t.Fatalf("truncated buffer: %+v, %v", c, err)
	}
}

func TestCodepoint(t *testing.T) {
	for tos, want := range map[byte]Codepoint{0x00: NotECT, 0xB8: NotECT, 0xB9: ECT1, 0x02: ECT0, 0xFF: CE} {
		if got := FromTOS(tos); got != want {
			t.Errorf("FromTOS(%#x) = %v, want %v", tos, got, want)
		}
	}
	if NotECT.IsECT() || !ECT0.IsECT() || !ECT1.IsECT() || !CE.IsECT() {
		t.Error("IsECT wrong")
	}
	if ECT0.String() != "ECT(0)" || CE.String() != "CE" {
		t.Error("String wrong")
	}
}

func TestAllocationFree(t *testing.T) {
	oob := make([]byte, 0, SendSpace)
	recv := AppendGSO(AppendECN(nil, false, CE), 1200)
	allocs := testing.AllocsPerRun(100, func() {
		oob = AppendGSO(AppendECN(oob[:0], true, ECT0), 1400)
		if _, err := ParseControl(recv); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("append+parse allocate %.1f times per run", allocs)
	}
}

// FuzzParseControl checks ParseControl against x/sys's allocating parser:
// whenever that parser accepts the buffer, ParseControl must accept it and
// report the last TOS/TCLASS and UDP_GRO values it lists.
func FuzzParseControl(f *testing.F) {
	f.Add(AppendECN(nil, false, CE))
	f.Add(AppendECN(nil, true, ECT0))
	f.Add(AppendGSO(AppendECN(nil, false, ECT1), 1400))
	gro, data := appendCmsg(nil, unix.SOL_UDP, unix.UDP_GRO, 4)
	binary.NativeEndian.PutUint32(data, 1200)
	f.Add(gro)
	tos1, data := appendCmsg(nil, unix.IPPROTO_IP, unix.IP_TOS, 1) // how IPv4 delivers it
	data[0] = 0x03
	f.Add(tos1)
	f.Add([]byte{})
	f.Add(make([]byte, hdrSize))
	f.Fuzz(func(t *testing.T, oob []byte) {
		got, err := ParseControl(oob)
		msgs, refErr := unix.ParseSocketControlMessage(oob)
		if refErr != nil {
			if err == nil {
				// x/sys stops at the first bad header; so must we,
				// unless the bad part is shorter than a header.
				t.Fatalf("x/sys rejects %x (%v) but ParseControl accepts it", oob, refErr)
			}
			return
		}
		if err != nil {
			t.Fatalf("ParseControl rejects %x (%v), x/sys accepts it", oob, err)
		}
		var want Control
		for _, m := range msgs {
			lv, ty := m.Header.Level, m.Header.Type
			v, ok := cmsgInt(m.Data)
			if !ok {
				continue
			}
			if (lv == unix.IPPROTO_IP && ty == unix.IP_TOS) || (lv == unix.IPPROTO_IPV6 && ty == unix.IPV6_TCLASS) {
				want.TrafficClass, want.ECN, want.HasECN = byte(v), FromTOS(byte(v)), true
			}
			if lv == unix.SOL_UDP && ty == unix.UDP_GRO && v > 0 {
				want.GROSize = v
			}
		}
		if got != want {
			t.Fatalf("ParseControl(%x) = %+v, reference %+v", oob, got, want)
		}
	})
}

func BenchmarkAppendECNAndGSO(b *testing.B) {
	b.ReportAllocs()
	oob := make([]byte, 0, SendSpace)
	for b.Loop() {
		oob = AppendGSO(AppendECN(oob[:0], false, ECT0), 1400)
	}
}

func BenchmarkParseControl(b *testing.B) {
	b.ReportAllocs()
	oob := AppendGSO(AppendECN(nil, false, CE), 1400) // two cmsgs, like TOS+GRO
	for b.Loop() {
		if _, err := ParseControl(oob); err != nil {
			b.Fatal(err)
		}
	}
}
