//go:build linux

package flood

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
)

// transfer is the transfer in flight during a flood: one flow from a host
// in eu-west to a host in us-east, WRITEs of msgSize bytes into a ring of
// slots of the destination's memory. Every message carries its number and
// a pattern derived from it; the destination reads each delivered message
// back (Host.ReadMemory) and checks it byte for byte, and its address.
type transfer struct {
	src, dst *host.Host
	flow     *host.Flow
	msgSize  int
	slots    int

	mu        sync.Mutex
	times     []time.Time // delivery times
	delivered map[uint64]bool
	completed []uint64 // message numbers whose send completed
	failed    int
	errs      []string
	corrupt   int
	dups      int
	overwrite int // a slot rewritten before it was checked (not corruption)
	verified  atomic.Uint64
	writeErr  error

	stop    context.CancelFunc
	wg      sync.WaitGroup
	checkWG sync.WaitGroup
}

const memKey = 1

// transferOpenTimeout bounds the transfer hosts' REGISTER and OPEN
// (host.Config.OpenTimeout), before any flood starts: under the race
// detector at a load average of 12 to 16 an OPEN took more than the
// library's 5 s (TestFloodShort lan-junk, wan-junk: "OPEN timed out:
// us-east/flood-sink after 5s"); a starved lab's gateways answered a
// host's INIT up to 3.3 s late (docs/GATEWAY.md, "Registration under
// load"). As loadtest/gwload's hostOpenTimeout. The flood's own
// registration probe (register) keeps the library's 5 s in a run (it is measured;
// Options.RegisterTimeout), TestFloodShort gives it this.
const transferOpenTimeout = 20 * time.Second

func startTransfer(ctx context.Context, l *lab.Lab, msgSize int, logger *slog.Logger) (*transfer, error) {
	t := &transfer{msgSize: msgSize, slots: 256, delivered: map[uint64]bool{}}
	var err error
	t.dst, err = host.New(host.Config{Name: "flood-sink", Region: lab.RegionB, Gateways: l.HostGateways(lab.RegionB), Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: transferOpenTimeout, Logger: logger, Protocol: lab.HostProtocol()})
	if err != nil {
		return nil, fmt.Errorf("flood: destination host: %w", err)
	}
	if err := t.dst.RegisterMemory(memKey, make([]byte, t.slots*msgSize)); err != nil {
		t.dst.Close()
		return nil, err
	}
	t.src, err = host.New(host.Config{Name: "flood-src", Region: lab.RegionA, Gateways: l.HostGateways(lab.RegionA), Key: l.HostKey,
		DeadAfter: time.Second, OpenTimeout: transferOpenTimeout, Logger: logger, Protocol: lab.HostProtocol()})
	if err != nil {
		t.dst.Close()
		return nil, fmt.Errorf("flood: source host: %w", err)
	}
	octx, ocancel := context.WithTimeout(ctx, transferOpenTimeout)
	defer ocancel()
	// Opened again on a failure a busy machine causes (lab.OpenFlow),
	// within transferOpenTimeout.
	t.flow, err = lab.OpenFlow(octx, t.src, lab.RegionB, "flood-sink", host.FlowOptions{}, func(format string, args ...any) {
		logger.Warn(fmt.Sprintf(format, args...))
	})
	if err != nil {
		t.close()
		return nil, fmt.Errorf("flood: open flow: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	t.stop = cancel
	t.checkWG.Add(1)
	go t.check()
	t.wg.Add(1)
	go t.write(wctx)
	return t, nil
}

// fill writes message n's content: its number, then 8-byte words of a
// pattern derived from it.
func fill(b []byte, n uint64) {
	binary.LittleEndian.PutUint64(b, n)
	x := splitmix(n)
	for i := 8; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], x+uint64(i))
	}
}

func (t *transfer) write(ctx context.Context) {
	defer t.wg.Done()
	const window = 32
	pool := make(chan []byte, window)
	for range window {
		pool <- make([]byte, t.msgSize)
	}
	type pend struct {
		n   uint64
		p   *host.Pending
		buf []byte
	}
	waits := make(chan pend, window)
	var waiter sync.WaitGroup
	waiter.Add(1)
	go func() {
		defer waiter.Done()
		for w := range waits {
			// Every message written is waited for (bounded by the
			// drain in close): it counts only once it completed.
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := w.p.Wait(dctx)
			cancel()
			t.mu.Lock()
			if err != nil {
				t.failed++
				if len(t.errs) < 5 {
					t.errs = append(t.errs, err.Error())
				}
			} else {
				t.completed = append(t.completed, w.n)
			}
			t.mu.Unlock()
			pool <- w.buf
		}
	}()
	defer func() { close(waits); waiter.Wait() }()
	for n := uint64(0); ctx.Err() == nil; n++ {
		// Never reuse a slot whose last message is not checked yet.
		for n >= t.verified.Load()+uint64(t.slots/2) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		var buf []byte
		select {
		case buf = <-pool:
		case <-ctx.Done():
			return
		}
		fill(buf, n)
		addr := (n % uint64(t.slots)) * uint64(t.msgSize)
		p, err := t.flow.Write(ctx, memKey, addr, buf)
		if err != nil {
			if ctx.Err() == nil {
				t.mu.Lock()
				t.writeErr = err
				t.mu.Unlock()
			}
			if p != nil {
				waits <- pend{n, p, buf}
			}
			return
		}
		waits <- pend{n, p, buf}
	}
}

func (t *transfer) check() {
	defer t.checkWG.Done()
	got := make([]byte, t.msgSize)
	want := make([]byte, t.msgSize)
	for d := range t.dst.Received() {
		now := time.Now()
		ok := int(d.Len) == t.msgSize
		var n uint64
		if ok {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := t.dst.ReadMemory(ctx, memKey, d.Addr, got)
			cancel()
			ok = err == nil
			n = binary.LittleEndian.Uint64(got)
		}
		t.mu.Lock()
		t.times = append(t.times, now)
		// One segment per message (msgSize is below half the credit), so
		// the flow sequence is the message number.
		seq, slot := d.Seq, func(n uint64) uint64 { return (n % uint64(t.slots)) * uint64(t.msgSize) }
		switch {
		case !ok || d.Addr != slot(seq):
			t.corrupt++
		case t.delivered[seq]:
			t.dups++
		case n != seq && n > seq && (n-seq)%uint64(t.slots) == 0:
			t.overwrite++ // a later message in the slot already
		default:
			fill(want, seq)
			if string(want) == string(got) {
				t.delivered[seq] = true
			} else {
				t.corrupt++
			}
		}
		t.mu.Unlock()
		t.verified.Add(1)
	}
}

// deliveredBytesIn is the bytes delivered in [from, to).
func (t *transfer) deliveredIn(from, to time.Time) (bytes uint64, worstGap time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.times), func(i int) bool { return !t.times[i].Before(from) })
	prev := from
	for ; i < len(t.times) && t.times[i].Before(to); i++ {
		bytes += uint64(t.msgSize)
		worstGap = max(worstGap, t.times[i].Sub(prev))
		prev = t.times[i]
	}
	worstGap = max(worstGap, to.Sub(prev))
	return bytes, worstGap
}

// result stops writing, waits for the messages in flight (at most drain)
// and checks that every completed message was delivered once, byte-exact.
type transferResult struct {
	Messages  int      `json:"messages_completed"`
	Delivered int      `json:"messages_delivered"`
	Missing   int      `json:"messages_missing"`
	Corrupt   int      `json:"messages_corrupt"`
	Dups      int      `json:"messages_duplicated"`
	Failed    int      `json:"messages_failed"`
	Errors    []string `json:"errors,omitempty"`
	ByteExact bool     `json:"byte_exact"`
}

func (t *transfer) finish(drain time.Duration) transferResult {
	t.stop()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(drain + 30*time.Second):
	}
	// Deliveries of completed messages precede their completion (DONE
	// comes from the destination after placement), but the checker may
	// still be reading: give it a moment.
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) {
		t.mu.Lock()
		missing := 0
		for _, n := range t.completed {
			if !t.delivered[n] {
				missing++
			}
		}
		t.mu.Unlock()
		if missing == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := transferResult{Messages: len(t.completed), Delivered: len(t.delivered), Corrupt: t.corrupt, Dups: t.dups, Failed: t.failed}
	for _, n := range t.completed {
		if !t.delivered[n] {
			r.Missing++
		}
	}
	r.Errors = append(r.Errors, t.errs...)
	if t.writeErr != nil {
		r.Errors = append(r.Errors, "write: "+t.writeErr.Error())
	}
	if t.overwrite > 0 {
		r.Errors = append(r.Errors, fmt.Sprintf("%d slots rewritten before they were checked (checker lag, not corruption)", t.overwrite))
	}
	r.ByteExact = r.Messages > 0 && r.Missing == 0 && r.Corrupt == 0 && r.Dups == 0 && r.Failed == 0 && t.writeErr == nil
	return r
}

func (t *transfer) close() {
	if t.stop != nil {
		t.stop()
	}
	if t.src != nil {
		t.src.Close()
	}
	if t.dst != nil {
		t.dst.Close()
	}
	t.checkWG.Wait()
}
