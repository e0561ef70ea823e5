package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress is the simulator's progress on stderr: on a terminal one line
// redrawn every second (run i of n, what, elapsed, the time left once a
// run has finished); elsewhere (a log, a CI job) a line per run.
type progress struct {
	w     io.Writer
	tty   bool
	name  string
	start time.Time

	mu      sync.Mutex
	i, n    int
	what    string
	stop    chan struct{}
	stopped sync.WaitGroup
}

func newProgress(w io.Writer, name string) *progress {
	p := &progress{w: w, name: name, start: time.Now(), stop: make(chan struct{})}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	if p.tty {
		p.stopped.Add(1)
		go p.tick()
	}
	return p
}

// say prints a line of its own.
func (p *progress) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// update is scenario.Options.Progress: run i of n is starting.
func (p *progress) update(i, n int, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.i, p.n, p.what = i, n, what
	if p.tty {
		p.draw()
		return
	}
	fmt.Fprintln(p.w, p.line())
}

// line is "[i/n] what, 1m05s elapsed, ~2m10s left"; the caller holds mu.
func (p *progress) line() string {
	el := time.Since(p.start)
	s := fmt.Sprintf("[%d/%d] %s, %s elapsed", p.i, p.n, p.what, roundDur(el))
	if done := p.i - 1; done > 0 && p.n >= p.i {
		left := time.Duration(float64(el) / float64(done) * float64(p.n-done))
		s += ", ~" + roundDur(left) + " left"
	}
	return s
}

func (p *progress) draw() { fmt.Fprint(p.w, "\r\033[K"+p.line()) }

func (p *progress) tick() {
	defer p.stopped.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if p.n > 0 {
				p.draw()
			}
			p.mu.Unlock()
		}
	}
}

// finish clears the line and says how long the scenario took.
func (p *progress) finish() {
	close(p.stop)
	p.stopped.Wait()
	p.say("%s: done in %s", p.name, roundDur(time.Since(p.start)))
}

// roundDur prints d for people: 850ms, 12s, 3m20s, 1h05m.
func roundDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

func scaleOr1(s float64) float64 {
	if s > 0 {
		return s
	}
	return 1
}

// quickHint suggests a shorter run when est is more than a few minutes.
func quickHint(est time.Duration) string {
	if est <= 3*time.Minute {
		return ""
	}
	return fmt.Sprintf(" (--scale %.2g for a quick look of about %s)", 30*float64(time.Second)/float64(est), "30s")
}
