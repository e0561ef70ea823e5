package control

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// A dial the caller cancels (the gateway stopping) logs at debug, not
// warn; a dial that times out on its own still warns.
func TestCancelledDialDoesNotWarn(t *testing.T) {
	c := newCerts(t)
	// A UDP socket that never answers: the handshake waits until the
	// context ends.
	sink, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()

	d := newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	ctx, cancel := context.WithCancel(testCtx(t))
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := Dial(ctx, sink.LocalAddr().String(), "gw-a", d.cfg); err == nil {
		t.Fatal("Dial to a silent socket succeeded")
	}
	if logs := d.logs.String(); strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "control: dial failed") {
		t.Errorf("cancelled dial: want the failure at debug only, got:\n%s", logs)
	}

	d = newSide(c.creds(t, c.ca, "gw-b"), "us", "gw-a")
	d.cfg.HandshakeTimeout = 50 * time.Millisecond
	if _, err := Dial(testCtx(t), sink.LocalAddr().String(), "gw-a", d.cfg); err == nil {
		t.Fatal("Dial to a silent socket succeeded")
	}
	if logs := d.logs.String(); !strings.Contains(logs, "level=WARN msg=\"control: dial failed\"") {
		t.Errorf("timed-out dial: want a warning, got:\n%s", logs)
	}
}
