//go:build linux

package chaos

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/mrgw/mrgw/host"
)

// ChildArgs are the arguments of the mrgw binary that run RunChild: the
// scenario starts its host processes as `BIN ChildArgs... FLAGS`.
var ChildArgs = []string{"loadtest", "chaos", "host-child"}

// RunChild is a host process of the scenario (what host kill -9 kills): a
// host of the package host library that registers with its region's
// gateways and runs one writer, printing "flow ID" for every flow it opens
// and "done WRITER FLOW SEQ N" for every message completed end to end, so
// that the scenario can hold every completion to a delivery even after the
// process is killed. It runs until stdin closes (its parent is gone) or
// ctx ends. Its flags are those of childFlags.
func RunChild(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("host-child", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		gws, region, name, listen, to string
		id, size, slots, window       int
		deadAfter                     time.Duration
	)
	fs.StringVar(&gws, "gateways", "", "LAN addresses of the region's gateways, comma-separated")
	fs.StringVar(&region, "region", "", "region")
	fs.StringVar(&name, "name", "", "endpoint name")
	fs.StringVar(&listen, "listen", "127.0.0.1:0", "listening address")
	fs.StringVar(&to, "to", "", "destination REGION/ENDPOINT")
	fs.IntVar(&id, "writer", 0, "writer id")
	fs.IntVar(&size, "size", 0, "message size")
	fs.IntVar(&slots, "slots", 0, "slots per writer area")
	fs.IntVar(&window, "window", 0, "messages in flight")
	fs.DurationVar(&deadAfter, "dead-after", 0, "host.Config.DeadAfter (0: the library default)")
	logLevel := fs.String("log-level", "warn", "level of the log on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dstRegion, dst, ok := strings.Cut(to, "/")
	if !ok || size < hdrSize || slots <= window || window < 1 {
		return fmt.Errorf("host-child: bad arguments %q", args)
	}
	var addrs []netip.AddrPort
	for _, g := range strings.Split(gws, ",") {
		a, err := netip.ParseAddrPort(g)
		if err != nil {
			return fmt.Errorf("host-child: --gateways: %w", err)
		}
		addrs = append(addrs, a)
	}
	la, err := netip.ParseAddrPort(listen)
	if err != nil {
		return fmt.Errorf("host-child: --listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The parent holds stdin open; EOF means it is gone.
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	lv, ok := slogLevel(*logLevel)
	if !ok {
		return fmt.Errorf("host-child: --log-level %q", *logLevel)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	h, err := host.New(hostConfig(name, region, addrs, la, deadAfter, log))
	if err != nil {
		return err
	}
	defer h.Close()
	out := bufio.NewWriter(stdout)
	var mu sync.Mutex
	say := func(format string, a ...any) {
		mu.Lock()
		fmt.Fprintf(out, format, a...)
		out.Flush()
		mu.Unlock()
	}
	w := &writer{id: id, lay: layout{size: size, slots: slots, window: window}, h: h, region: dstRegion, dst: dst,
		onFlow: func(_ int, flow uint64) { say("flow %d\n", flow) },
		onDone: func(id int, flow, seq, n uint64) { say("done %d %d %d %d\n", id, flow, seq, n) },
		onFail: func(id int, flow, n uint64, err error) {
			fmt.Fprintf(stderr, "writer %d flow %x message %d: %v\n", id, flow, n, err)
		},
	}
	w.run(ctx, nil)
	return nil
}
