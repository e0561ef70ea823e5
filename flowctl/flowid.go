package flowctl

import (
	"fmt"
	"log/slog"
)

// FlowID is a flow id as logs show it: 16 hex digits, as `mrgw host send`
// prints it ("flow 0123456789abcdef"), so that a line of the host's log,
// the gateway's and the command's output can be matched by the id. Logs
// printed it in decimal.
type FlowID uint64

func (f FlowID) String() string { return fmt.Sprintf("%016x", uint64(f)) }

// LogValue formats the id only when the line is written.
func (f FlowID) LogValue() slog.Value { return slog.StringValue(f.String()) }
