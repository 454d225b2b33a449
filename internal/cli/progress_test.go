package cli

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable time source.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestProgressETAIsUnknownUntilTheRateMeansSomething(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	p := NewProgress(&buf, false, "upload m", 10_000_000)
	p.now, p.start, p.PlainEvery = clk.now, clk.t, 2*time.Second
	clk.advance(3 * time.Second) // hashing the first part: no transfer time
	p.Add(59)                    // the first buffered read, microseconds after the start
	clk.advance(2 * time.Second)
	p.Add(1_999_941) // 2 MB in the 2 s since the first byte
	clk.advance(2 * time.Second)
	p.Add(2_000_000) // 4 MB in 4 s
	clk.advance(time.Second)
	p.Add(6_000_000)
	p.Finish()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		"upload m: 59 B / 10.0 MB  --  ETA --:-- (0%)",
		"upload m: 2.0 MB / 10.0 MB  1.0 MB/s  ETA 0:08 (20%)",
		"upload m: 4.0 MB / 10.0 MB  1.0 MB/s  ETA 0:06 (40%)",
		"upload m: 10.0 MB / 10.0 MB  2.0 MB/s  ETA 0:00 (100%)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("progress lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestProgressAllSkippedShowsNoRate(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, false, "upload m", 100)
	p.Skip(100)
	p.Finish()
	if got := strings.TrimSpace(buf.String()); !strings.HasSuffix(got, "100 B / 100 B  --  ETA 0:00 (100%)") {
		t.Fatalf("got %q", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestSpinnerPlainPrintsEachStatusOnce(t *testing.T) {
	var buf syncBuffer
	s := StartSpinner(&buf, false, "waiting on m version 1", time.Millisecond)
	s.Status("scanning")
	s.Status("scanning")
	s.Status("scanning 50%")
	s.Stop()
	s.Status("late")
	want := "waiting on m version 1: scanning\nwaiting on m version 1: scanning 50%\n"
	if got := buf.String(); got != want {
		t.Fatalf("plain spinner wrote %q, want %q", got, want)
	}
}

func TestSpinnerOnATerminalRedrawsAndClearsItsLine(t *testing.T) {
	var buf syncBuffer
	s := StartSpinner(&buf, true, "waiting on m version 1", time.Millisecond)
	s.Status("scanning")
	// The spinner turns: wait until two different frames have shown the
	// status (the ticker decides when, so poll for it).
	turned := func(out string) bool {
		frames := 0
		for _, f := range spinnerFrames {
			if strings.Contains(out, f+" waiting on m version 1: scanning (0:") {
				frames++
			}
		}
		return frames >= 2
	}
	deadline := time.Now().Add(10 * time.Second)
	for !turned(buf.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("the spinner did not turn with the status: %q", buf.String())
		}
		time.Sleep(time.Millisecond)
	}
	s.Stop()
	s.Stop()
	out := buf.String()
	if !strings.HasSuffix(out, "\r\033[K") || strings.Contains(out, "\n") {
		t.Fatalf("terminal spinner output %q: want redrawn frames, no newline, a cleared line at the end", out)
	}
}
