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
	sent    int64 // bytes moved in this run (skipped ones excluded), for the rate
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
	p.done += n
	p.sent += n
	p.maybeDraw()
	p.mu.Unlock()
}

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
	elapsed := t.Sub(p.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(p.sent) / elapsed
	}
	eta := "--:--"
	if rate > 0 && p.total >= p.done {
		eta = fmtDuration(time.Duration(float64(p.total-p.done) / rate * float64(time.Second)))
	}
	stats := fmt.Sprintf("%s / %s  %s/s  ETA %s", HumanBytes(p.done), HumanBytes(p.total), HumanBytes(int64(rate)), eta)
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
