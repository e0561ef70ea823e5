//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/host"
)

// OpenFlow opens a flow as h.OpenFlow does, and opens it again, after a
// pause of 100 ms doubling to 2 s, while the failure is one a busy machine
// causes in a lab whose gateways were ready (Transient), until ctx ends.
// logf (may be nil) is told of every failed attempt.
//
// Why: everything of a lab shares one process, and on a machine too busy
// to run it (CI's 2 cores beside a build, load 10 to 16 under the race
// detector) its failure detectors fire on starvation. A WAN connection
// whose peer was not scheduled for the lab's DeadAfter (1 s) is dropped
// and dialled again, and an OPEN in that gap is refused "region
// unreachable" at once (routing never waits, relay.route); a host that
// found its gateway silent re-registers, and an OPEN reaching the
// destination gateway meanwhile is refused "unknown endpoint"; an OPEN
// the gateways answer later than the host's OpenTimeout times out. Each
// was the first OPEN of a test or of the demo failing with the lab
// recovering a moment later. An application retries such an OPEN; so do
// the lab's users where opening is not what they test. A refusal that
// holds (a name that is not registered, a region that does not exist) is
// still returned once ctx ends, with the attempts made.
func OpenFlow(ctx context.Context, h *host.Host, region, endpoint string, opts host.FlowOptions, logf func(format string, args ...any)) (*host.Flow, error) {
	return OpenFlowIf(ctx, h, region, endpoint, opts, Transient, logf)
}

// OpenPatience bounds OpenFlow and OpenFlowIf when ctx has no deadline.
const OpenPatience = time.Minute

// OpenFlowIf is OpenFlow opening again only while retry(err) says so: a
// test of one of the refusals Transient names passes a narrower retry, so
// that the refusal it guards against is never retried away.
func OpenFlowIf(ctx context.Context, h *host.Host, region, endpoint string, opts host.FlowOptions, retry func(error) bool, logf func(format string, args ...any)) (*host.Flow, error) {
	what := fmt.Sprintf("%s -> %s/%s", h.Name(), region, endpoint)
	return openRetrying(ctx, OpenPatience, what, func(ctx context.Context) (*host.Flow, error) {
		return h.OpenFlow(ctx, region, endpoint, opts)
	}, retry, logf)
}

// openRetrying calls open until it succeeds, fails in a way retry does
// not accept, or ctx ends; a ctx without a deadline is given patience.
func openRetrying(ctx context.Context, patience time.Duration, what string, open func(context.Context) (*host.Flow, error),
	retry func(error) bool, logf func(format string, args ...any)) (*host.Flow, error) {
	if _, ok := ctx.Deadline(); !ok {
		// Every retry loop ends by itself: a caller without a deadline
		// gets its patience, not a loop that a refusal which holds (a
		// name never registered) would keep going for ever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, patience)
		defer cancel()
	}
	pause := 100 * time.Millisecond
	var last error // the last attempt's failure, for an error at ctx's end
	for attempt := 1; ; attempt++ {
		f, err := open(ctx)
		if err != nil && last != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("%w (after %d attempts, the last failed: %v; %w)", err, attempt, last, ctx.Err())
		}
		if err == nil || !retry(err) {
			return f, err
		}
		last = err
		if logf != nil {
			logf("lab: open %s, attempt %d: %v (the lab recovers from this on a busy machine; opening again)", what, attempt, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (after %d attempts; %w)", err, attempt, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// Transient reports whether an OpenFlow error may clear by itself in a lab
// whose gateways were ready: no answer within OpenTimeout, or a refusal
// for region unreachable, route lost or unknown endpoint (OpenFlow says
// when each happens).
func Transient(err error) bool {
	if errors.Is(err, host.ErrOpenTimeout) {
		return true
	}
	var fe *flowctl.Error
	if !errors.As(err, &fe) {
		return false
	}
	switch fe.Code {
	case flowctl.CodeRegionUnreachable, flowctl.CodeRouteLost, flowctl.CodeUnknownEndpoint:
		return true
	}
	return false
}
