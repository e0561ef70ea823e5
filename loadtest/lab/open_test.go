//go:build linux

package lab

import (
	"context"
	"fmt"
	"testing"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/host"
)

// TestTransient: OpenFlow opens again only on the failures a busy machine
// causes in a ready lab; a refusal that holds, or the caller's context
// ending, is returned at once.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: us-east/dst after 5s", host.ErrOpenTimeout), true},
		{&flowctl.Error{Code: flowctl.CodeRegionUnreachable, Reason: "no WAN connection to a live gateway of us-east"}, true},
		{&flowctl.Error{Code: flowctl.CodeRouteLost}, true},
		{fmt.Errorf("wrapped: %w", &flowctl.Error{Code: flowctl.CodeUnknownEndpoint}), true},
		{&flowctl.Error{Code: flowctl.CodeUnknownRegion}, false},
		{&flowctl.Error{Code: flowctl.CodeNoCapacity}, false},
		{&flowctl.Error{Code: flowctl.CodeBadRequest}, false},
		{context.DeadlineExceeded, false},
		{host.ErrClosed, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
