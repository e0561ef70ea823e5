//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// TestOpenRetryingEndsWithoutADeadline: a caller whose context has no
// deadline still gets an answer when every open fails transiently: the
// loop gives up after its patience, with the last failure and the count of
// attempts, and a refusal retry does not accept ends it at the first try.
func TestOpenRetryingEndsWithoutADeadline(t *testing.T) {
	transient := &flowctl.Error{Code: flowctl.CodeUnknownEndpoint}
	calls := 0
	_, err := openRetrying(context.Background(), 300*time.Millisecond, "test", func(context.Context) (*host.Flow, error) {
		calls++
		return nil, transient
	}, Transient, t.Logf)
	if !errors.Is(err, transient) || !errors.Is(err, context.DeadlineExceeded) || calls < 2 {
		t.Errorf("after %d calls: %v; want the transient refusal, retried, ended by the patience", calls, err)
	}

	held := &flowctl.Error{Code: flowctl.CodeUnknownRegion}
	calls = 0
	_, err = openRetrying(context.Background(), time.Hour, "test", func(context.Context) (*host.Flow, error) {
		calls++
		return nil, held
	}, Transient, t.Logf)
	if !errors.Is(err, held) || calls != 1 {
		t.Errorf("after %d calls: %v; want the held refusal at once", calls, err)
	}
}
