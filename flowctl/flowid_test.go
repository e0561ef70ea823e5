package flowctl

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestFlowIDInLogs: a flow id in a log line reads as the command line
// prints it (%016x), in text and JSON logs alike.
func TestFlowIDInLogs(t *testing.T) {
	const id = uint64(0x23c30d62e702f3ba)
	want := fmt.Sprintf("%016x", id)
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		slog.New(h(&b)).Info("x", "flow", FlowID(id))
		if !strings.Contains(b.String(), want) {
			t.Errorf("log line %q lacks the flow id %s", b.String(), want)
		}
	}
	if got := FlowID(1).String(); got != "0000000000000001" {
		t.Errorf("FlowID(1) = %q", got)
	}
}
