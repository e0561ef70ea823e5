package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/mrgw/mrgw/filecopy"
	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/internal/cli"
	"github.com/mrgw/mrgw/stream"
)

func newHostCpCmd() *cobra.Command {
	var (
		hf      hostFlags
		chunk   int64
		buffers int
		class   string
		asJSON  bool
		quiet   bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "cp [host flags] SRC... REGION/ENDPOINT:PORT[/DEST-DIR]",
		Short: "Copy files and directory trees to an endpoint in another region",
		Long: `cp copies files and directory trees to the receiver (mrgw host cp-serve) of an
endpoint in another region. Each SRC lands in DEST-DIR (below the receiver's root;
its root if none) by its base name. The data is WRITTEN straight into the
destination files, which the receiver maps as memory; each chunk's CRC32C is
checked there, and each file's SHA-256 is compared at both ends before it is
renamed into place with its mode and modification time.

Run the same command again after a failure (either host or a gateway killed, the
network gone): it sends only what the receiver has not verified yet, and skips
files it holds already (same size, mode and modification time). Holes of
sparse files are not sent. Symbolic links given as SRC are followed; inside a
tree they are skipped, as is anything that is neither a file nor a directory.

A progress bar (rate and ETA) is drawn on stderr when it is a terminal; --json
prints a summary on stdout.`,
		Example: `  # to us-east's trainer-0, which runs mrgw host cp-serve --port 7000:
  mrgw host cp --gateway 127.0.0.11:14791,127.0.0.12:14792 --region eu-west \
      --name loader-0 --listen 127.0.0.32:0 --key-file config/examples/two-region/host.key \
      ckpt/ shard-0.bin us-east/trainer-0:7000/run-42`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcs, dst := args[:len(args)-1], args[len(args)-1]
			to, dest, err := filecopy.ParseTarget(dst)
			if err != nil {
				return err
			}
			// A missing source is reported before anything connects.
			for _, src := range srcs {
				if _, err := os.Stat(src); err != nil {
					return err
				}
			}
			cfg, err := hf.config(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := hostRunContext(cmd, timeout)
			defer stop()
			h, err := host.New(cfg)
			if err != nil {
				return err
			}
			defer h.Close()
			m, err := stream.New(h, stream.Config{Class: class, Logger: cfg.Logger})
			if err != nil {
				return err
			}
			defer m.Close()
			var bar *progressBar
			errOut := cmd.ErrOrStderr()
			if !quiet && isTerminal(errOut) {
				bar = newProgressBar(errOut)
				defer bar.stop()
			}
			opt := filecopy.Options{Chunk: chunk, Buffers: buffers, Class: class}
			if bar != nil {
				opt.Progress = bar.set
			}
			sum, err := filecopy.Send(ctx, m, to, dest, srcs, opt)
			if bar != nil {
				bar.stop()
			}
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("copy to %s interrupted (run the same command again to resume): %w", dst, context.Cause(ctx))
				}
				return cpError(err, dst)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Destination string `json:"destination"`
					*filecopy.Summary
				}{dst, sum})
			}
			fmt.Fprintf(out, "%d files (%s) in %d directories to %s in %v: sent %s at %s, skipped %s (resume) and %s of holes; %d verified by SHA-256 at both ends, %d already there\n",
				sum.Files, humanize.IBytes(uint64(sum.Bytes)), sum.Dirs, dst, sum.Duration.Round(time.Millisecond),
				humanize.IBytes(uint64(sum.BytesSent)), hostRate(uint64(sum.BytesSent), sum.Duration),
				humanize.IBytes(uint64(sum.BytesSkipped)), humanize.IBytes(uint64(sum.BytesHoles)), sum.Verified, sum.Skipped)
			return nil
		},
	}
	hf.add(cmd)
	fl := cmd.Flags()
	cli.SizeVar(fl, &chunk, "chunk", 4<<20, "unit of verification and resume, a power of two from 64KiB to 64MiB")
	fl.IntVar(&buffers, "buffers", 8, "chunks read and in flight at once (memory: buffers x chunk)")
	fl.StringVar(&class, "class", "", "scheduling class of the copy's flows")
	fl.BoolVar(&asJSON, "json", false, "print a JSON summary on stdout: files, bytes, bytes sent, skipped, holes, duration, rate, SHA-256 per file")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	fl.DurationVar(&timeout, "timeout", 0, "give up after this long (0: none); run again to resume")
	return cmd
}

// cpError says what to do about the refusals an operator meets.
func cpError(err error, dst string) error {
	switch {
	case errors.Is(err, stream.ErrRefused):
		return fmt.Errorf("%s refused the copy: nothing listens on the port (is mrgw host cp-serve running there?): %w", dst, err)
	case errors.Is(err, filecopy.ErrNotAllowed):
		return fmt.Errorf("%s: path not allowed by the receiver (it writes only below its --root, never through symbolic links): %w", dst, err)
	case errors.Is(err, filecopy.ErrDiskFull):
		return fmt.Errorf("%s: the receiver's disk is full: %w", dst, err)
	}
	var fe *flowctl.Error
	if errors.As(err, &fe) && fe.Code == flowctl.CodeUnknownEndpoint {
		return fmt.Errorf("%s: no such endpoint registered in that region: %w", dst, err)
	}
	return err
}

func newHostCpServeCmd() *cobra.Command {
	var (
		hf          hostFlags
		root        string
		port        string
		window      int64
		maxWindows  int
		inlineMax   int64
		maxCopies   int
		idleTimeout time.Duration
		credit      int64
	)
	cmd := &cobra.Command{
		Use:   "cp-serve --root DIR [host flags]",
		Short: "Receive the copies of mrgw host cp under a root directory",
		Long: `cp-serve registers this host's endpoint and receives copies (mrgw host cp) on a
stream port, below --root only: it refuses absolute paths, "..", and paths through
symbolic links. Large files are received into a temporary file beside their
destination (.NAME.mrgw-part), mapped --window bytes at a time (at most
--max-windows per copy) and WRITTEN straight into by the sender; a state file
beside it (.NAME.mrgw-state) records the verified chunks so that a copy run
again resumes. A file appears under its name only once complete, synced, with
its SHA-256 checked. It runs until SIGINT or SIGTERM.`,
		Example: `  # us-east of config/examples/two-region:
  mrgw host cp-serve --gateway 127.0.0.21:14793,127.0.0.22:14794 --region us-east \
      --name trainer-0 --listen 127.0.0.31:0 --key-file config/examples/two-region/host.key \
      --root /srv/mrgw-in --port 7000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := hf.config(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if credit != 0 {
				cfg.ReceiveCredit = uint64(credit)
			}
			if _, err := stream.ParsePort(port); err != nil {
				return fmt.Errorf("--port: %w", err)
			}
			ctx, stop := hostSignalContext(cmd)
			defer stop()
			h, err := host.New(cfg)
			if err != nil {
				return err
			}
			defer h.Close()
			m, err := stream.New(h, stream.Config{Logger: cfg.Logger})
			if err != nil {
				return err
			}
			defer m.Close()
			srv, err := filecopy.NewServer(m, filecopy.ServerConfig{Root: root, Port: port, Window: window,
				MaxWindows: maxWindows, InlineMax: inlineMax, MaxSessions: maxCopies, IdleTimeout: idleTimeout, Logger: cfg.Logger})
			if err != nil {
				return err
			}
			defer srv.Close()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "receiving copies to %s on %v (host %v)\n", root, srv.Addr(), h.LocalAddr())
			err = srv.Serve(ctx)
			srv.Close()
			st := srv.Stats()
			fmt.Fprintf(out, "%d copies (%d refused, %d failed): %d files committed (%d inline), %s verified in %d chunks (%d failed their CRC32C)\n",
				st.Sessions, st.Refused, st.Failed, st.Files, st.Inline, humanize.IBytes(st.BytesVerified), st.ChunksVerified, st.ChunksBad)
			return err
		},
	}
	hf.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&root, "root", "", "directory every copy lands under (created if missing)")
	fl.StringVar(&port, "port", "7000", "stream port copies dial")
	cli.SizeVar(fl, &window, "window", 64<<20, "bytes of a large file mapped under one memory key")
	fl.IntVar(&maxWindows, "max-windows", 4, "windows one copy may have mapped at once (address space and dirty pages: window x max-windows per copy)")
	cli.SizeVar(fl, &inlineMax, "inline-max", 256<<10, "files up to this size travel inside the control stream (at most 1MiB)")
	fl.IntVar(&maxCopies, "max-copies", 16, "copies received at once; more are refused")
	fl.DurationVar(&idleTimeout, "idle-timeout", 2*time.Minute, "drop a copy whose sender has sent nothing this long")
	cli.SizeVar(fl, &credit, "credit", 0, "credit granted to each incoming flow (default 64MiB)")
	_ = cmd.MarkFlagRequired("root")
	return cmd
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws bytes done of total, the rate and the time left on
// one terminal line, five times a second. It is hand-written: the
// progress-bar libraries are lab-only dependencies, kept out of the
// daemon's binary (deps_test.go).
type progressBar struct {
	w           io.Writer
	done, total atomic.Int64
	start       time.Time
	quit        chan struct{}
	exited      chan struct{}
	stopped     atomic.Bool
}

func newProgressBar(w io.Writer) *progressBar {
	b := &progressBar{w: w, start: time.Now(), quit: make(chan struct{}), exited: make(chan struct{})}
	go b.run()
	return b
}

// set records progress; it never blocks (the copy calls it with its
// state locked).
func (b *progressBar) set(done, total int64) {
	b.done.Store(done)
	b.total.Store(total)
}

func (b *progressBar) run() {
	defer close(b.exited)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-b.quit:
			b.draw()
			fmt.Fprintln(b.w)
			return
		case <-t.C:
			b.draw()
		}
	}
}

func (b *progressBar) draw() {
	done, total := b.done.Load(), b.total.Load()
	el := time.Since(b.start)
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	n := int(frac * width)
	bar := strings.Repeat("=", n) + strings.Repeat(" ", width-n)
	if n < width {
		bar = bar[:n] + ">" + bar[n+1:]
	}
	rate := 0.0
	if el > 0 {
		rate = float64(done) / el.Seconds()
	}
	eta := "--"
	if rate > 0 && total > done {
		eta = time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	fmt.Fprintf(b.w, "\r[%s] %3.0f%%  %s / %s  %s/s  ETA %s   ", bar, frac*100,
		humanize.IBytes(uint64(done)), humanize.IBytes(uint64(total)), humanize.IBytes(uint64(rate)), eta)
}

func (b *progressBar) stop() {
	if b.stopped.CompareAndSwap(false, true) {
		close(b.quit)
		<-b.exited
	}
}
