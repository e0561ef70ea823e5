package metaroce

import (
	"fmt"
	"strings"
	"time"

	"github.com/mrgw/mrgw/pathmgr"
)

// pathmgrScenarioConfig is the path configuration of the scenarios: WAN-like
// round numbers, so that the recorded times read easily.
func pathmgrScenarioConfig() pathmgr.Config {
	return pathmgr.Config{
		InitialRTT:       10 * time.Millisecond,
		MinPTO:           5 * time.Millisecond,
		MaxAckDelay:      2 * time.Millisecond,
		DownAfter:        3,
		ProbeInterval:    20 * time.Millisecond,
		MaxProbeInterval: time.Second,
		UpAfter:          2,
	}
}

// describe shows a datagram in one line. port is its path's port: the
// source port of DATA and PROBE, the destination port of replies.
func describe(b []byte, tx Transmit) string {
	_, t, _, err := Peek(b)
	if err != nil {
		return "garbage"
	}
	var s string
	switch {
	case t == TypeData && b[0] == Version2:
		var h DataHeaderV2
		p, err := DecodeDataV2(b, &h)
		if err != nil || tx.Conn == nil {
			return "bad DATA2"
		}
		s = fmt.Sprintf("DATA2 p%d seq=%d floor=%d msg=%d/%d", h.Path, h.Seq, int64(h.Seq)-int64(h.FloorGap), h.Stream, h.MsgSeq)
		if h.DescriptorOnly(len(p)) {
			return fmt.Sprintf("%s descriptor-only len=%d port=%d", s, h.MsgLen, tx.Entropy)
		}
		s += fmt.Sprintf(" off=%d len=%d", uint64(h.Chunk)*uint64(tx.Conn.MTU()), len(p))
		if h.Desc {
			s += " desc"
		}
		if h.Flags&FlagRetransmit != 0 {
			s += " retx"
		}
		return fmt.Sprintf("%s port=%d", s, tx.Entropy)
	}
	switch t {
	case TypeData:
		var h DataHeader
		p, err := DecodeData(b, &h)
		if err != nil {
			return "bad DATA"
		}
		s = fmt.Sprintf("DATA p%d seq=%d floor=%d msg=%d/%d off=%d len=%d", h.Path, h.Seq, h.Seq-uint64(h.FloorGap), h.Stream, h.MsgSeq, h.Offset, len(p))
		if h.Flags&FlagRetransmit != 0 {
			s += " retx"
		}
	case TypeAck:
		var a Ack
		if DecodeAck(b, &a) != nil {
			return "bad ACK"
		}
		s = fmt.Sprintf("ACK p%d cum=%d largest=%d", a.Path, a.Cum, a.Largest)
		if sk := sackRanges(&a); sk != "" {
			s += " sack=" + sk
		}
		if a.Flags&FlagAckNak != 0 {
			s += " nak"
		}
		if a.Flags&FlagAckAtCum != 0 {
			s += " at-cum"
		}
		if a.CECount > 0 {
			s += fmt.Sprintf(" ce=%d", a.CECount)
		}
		s += fmt.Sprintf(" rx=%d", a.RxCount)
		for _, st := range a.Streams[:a.NStreams] {
			s += fmt.Sprintf(" done=%d:%d", st.Stream, st.Completed)
		}
		if a.RateHintBps > 0 {
			s += fmt.Sprintf(" hint=%d", a.RateHintBps)
		}
	case TypeInit, TypeAccept:
		var h Handshake
		if DecodeHandshake(b, t, &h) != nil {
			return "bad handshake"
		}
		s = fmt.Sprintf("%v mtu=%d paths=%d", t, h.MTU, h.Paths)
		if h.Offer != 0 {
			s += fmt.Sprintf(" offer=%#b", h.Offer)
		}
		if h.Version != 0 {
			s += fmt.Sprintf(" version=%d", h.Version)
		}
		if h.RateHintBps > 0 {
			s += fmt.Sprintf(" hint=%d", h.RateHintBps)
		}
	case TypeClose:
		_, reason, ack, err := DecodeClose(b)
		if err != nil {
			return "bad CLOSE"
		}
		s = fmt.Sprintf("CLOSE reason=%d", reason)
		if ack {
			s += " ack"
		}
	case TypeProbe, TypeProbeAck:
		_, path, _, err := DecodeProbe(b, t)
		if err != nil {
			return "bad probe"
		}
		s = fmt.Sprintf("%v p%d", t, path)
	case TypeError:
		var e MessageError
		if DecodeError(b, &e) != nil {
			return "bad ERROR"
		}
		s = fmt.Sprintf("ERROR msg=%d/%d code=%d", e.Stream, e.MsgSeq, e.Code)
	default:
		s = t.String()
	}
	return fmt.Sprintf("%s port=%d", s, tx.Entropy)
}

// sackRanges lists the sequences at or above cum an ACK reports, as ranges.
func sackRanges(a *Ack) string {
	var parts []string
	base := a.SackBase()
	for s := base; s <= a.Largest && s-base < SackBits; s++ {
		if !a.Acked(s) || s < a.Cum {
			continue
		}
		e := s
		for e+1 <= a.Largest && a.Acked(e+1) {
			e++
		}
		if e == s {
			parts = append(parts, fmt.Sprint(s))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", s, e))
		}
		s = e
	}
	return strings.Join(parts, ",")
}

func describeEvent(ev Event) string {
	var s string
	switch ev.Kind {
	case EventConnected:
		s = "connected"
	case EventClosed:
		s = "closed"
	case EventSendComplete:
		s = fmt.Sprintf("send-complete %d/%d", ev.Stream, ev.Seq)
	case EventRecvComplete:
		s = fmt.Sprintf("recv-complete %d/%d", ev.Stream, ev.Seq)
	case EventPlacementError:
		s = fmt.Sprintf("placement-error %d/%d", ev.Stream, ev.Seq)
	case EventPath:
		tr := ev.Transition
		return fmt.Sprintf("path %d %v->%v (%s) port=%d", tr.Path, tr.From, tr.To, tr.Reason, tr.Entropy)
	}
	if ev.Err != nil {
		s += fmt.Sprintf(" err=%q", ev.Err)
	}
	return s
}
