package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// IsTerminal reports whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Progress draws a byte progress bar: done/total, rate and ETA. On a
// terminal it redraws one line at most ten times a second; elsewhere it
// prints a plain line at most every PlainEvery. It is safe for concurrent
// use. A nil *Progress does nothing.
type Progress struct {
	w          io.Writer
	tty        bool
	label      string
	total      int64
	PlainEvery time.Duration

	mu      sync.Mutex
	done    int64
	sent    int64     // bytes moved in this run (skipped ones excluded), for the rate
	first   time.Time // when the first byte moved: hashing and setup before it are no transfer time
	start   time.Time
	last    time.Time
	drawn   bool
	stopped bool
	now     func() time.Time
}

// NewProgress starts a bar of total bytes on w.
func NewProgress(w io.Writer, tty bool, label string, total int64) *Progress {
	now := time.Now
	return &Progress{w: w, tty: tty, label: label, total: total, PlainEvery: 2 * time.Second, start: now(), now: now}
}

// Skip counts bytes already done (a resumed part) without counting them in
// the rate.
func (p *Progress) Skip(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.done += n
	p.maybeDraw()
	p.mu.Unlock()
}

// Add counts n bytes moved.
func (p *Progress) Add(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.sent == 0 && n > 0 {
		p.first = p.now()
	}
	p.done += n
	p.sent += n
	p.maybeDraw()
	p.mu.Unlock()
}

// rateWindow is how long bytes must have moved before a rate, and an ETA
// from it, mean anything: the first reads fill buffers in microseconds.
const rateWindow = time.Second

// Done is the number of bytes counted so far.
func (p *Progress) Done() int64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Undo takes back n bytes counted for an attempt that failed.
func (p *Progress) Undo(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.done -= n
	p.sent -= n
	p.mu.Unlock()
}

// Finish draws the final state and ends the line.
func (p *Progress) Finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	p.draw()
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

func (p *Progress) maybeDraw() {
	if p.stopped {
		return
	}
	every := 100 * time.Millisecond
	if !p.tty {
		every = p.PlainEvery
	}
	if t := p.now(); !p.drawn || t.Sub(p.last) >= every {
		p.draw()
	}
}

func (p *Progress) draw() {
	t := p.now()
	p.last, p.drawn = t, true
	// The rate is the mean since the first byte moved, shown once it
	// covers rateWindow (or the transfer is over); until then the rate and
	// the ETA are unknown, not guessed from a few buffered bytes.
	finished := p.done >= p.total
	elapsed := t.Sub(p.first)
	rate, eta := "--", "--:--"
	if p.sent > 0 && elapsed > 0 && (elapsed >= rateWindow || finished) {
		bps := float64(p.sent) / elapsed.Seconds()
		rate = HumanBytes(int64(bps)) + "/s"
		if !finished {
			eta = fmtDuration(time.Duration(float64(p.total-p.done) / bps * float64(time.Second)))
		}
	}
	if finished {
		eta = "0:00"
	}
	stats := fmt.Sprintf("%s / %s  %s  ETA %s", HumanBytes(p.done), HumanBytes(p.total), rate, eta)
	if !p.tty {
		fmt.Fprintf(p.w, "%s: %s (%d%%)\n", p.label, stats, percent(p.done, p.total))
		return
	}
	const width = 30
	filled := width * percent(p.done, p.total) / 100
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	fmt.Fprintf(p.w, "\r\033[K%s [%s] %3d%%  %s", p.label, bar, percent(p.done, p.total), stats)
}

func percent(done, total int64) int {
	if total <= 0 {
		return 100
	}
	return int(min(100, max(0, done*100/total)))
}

func fmtDuration(d time.Duration) string {
	s := int64(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// HumanBytes formats n bytes in decimal units (kB, MB, GB).
func HumanBytes(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "kB", "MB", "GB", "TB"} {
		if f < 1000 || u == "TB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.1f %s", f, u)
		}
		f /= 1000
	}
	return ""
}

// Spinner shows that a command is waiting, with the latest status: on a
// terminal a redrawn line with a spinner and the time waited (cleared when
// it stops); elsewhere one plain line per status change. A nil *Spinner
// does nothing.
type Spinner struct {
	w     io.Writer
	tty   bool
	label string

	mu      sync.Mutex
	status  string
	frame   int
	start   time.Time
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// StartSpinner starts a spinner for label on w; on a terminal it redraws
// every tick.
func StartSpinner(w io.Writer, tty bool, label string, tick time.Duration) *Spinner {
	s := &Spinner{w: w, tty: tty, label: label, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	if !tty {
		close(s.done)
		return s
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			s.mu.Lock()
			s.draw()
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Status sets what the spinner says after its label.
func (s *Spinner) Status(status string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || status == s.status {
		return
	}
	s.status = status
	if !s.tty {
		fmt.Fprintf(s.w, "%s: %s\n", s.label, status)
	}
}

// Stop ends the spinner and, on a terminal, clears its line.
func (s *Spinner) Stop() {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	if s.tty {
		close(s.stop)
	}
	<-s.done
	if s.tty {
		s.mu.Lock()
		fmt.Fprint(s.w, "\r\033[K")
		s.mu.Unlock()
	}
}

func (s *Spinner) draw() {
	f := spinnerFrames[s.frame%len(spinnerFrames)]
	s.frame++
	line := f + " " + s.label
	if s.status != "" {
		line += ": " + s.status
	}
	fmt.Fprintf(s.w, "\r\033[K%s (%s)", line, fmtDuration(time.Since(s.start)))
}
