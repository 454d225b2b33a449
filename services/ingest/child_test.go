package ingest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aiforge/aiforge/services/ingest/internal/hostile"
)

// The test binary doubles as the parser child: ChildProcess tests start it
// with AIFORGE_TEST_PARSE_CHILD=1, as aiforge starts itself with __parse.
func TestMain(m *testing.M) {
	if os.Getenv("AIFORGE_TEST_PARSE_CHILD") == "1" {
		if err := ServeParse(context.Background(), os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func childParser(t *testing.T, lim ChildLimits) *ChildProcess {
	t.Helper()
	t.Setenv("AIFORGE_TEST_PARSE_CHILD", "1")
	return &ChildProcess{Command: []string{os.Args[0]}, Limits: lim}
}

// maxChildRSS is the documented bound on the parser child's peak resident
// set for any document of the hostile corpus (see ChildLimits).
const maxChildRSS = 1 << 30

// Each hostile document fails in the child with its limit named, and the
// child's peak RSS stays under maxChildRSS; the legitimate ones parse.
func TestChildParsesHostileCorpusWithinBounds(t *testing.T) {
	p := childParser(t, ChildLimits{})
	for _, c := range hostile.Corpus() {
		t.Run(c.Name, func(t *testing.T) {
			if c.Heavy && raceEnabled {
				t.Skip("decompresses a gigabyte: minutes under the race detector")
			}
			data := c.Data()
			start := time.Now()
			parsed, err := p.Parse(context.Background(), ParseRequest{Filename: c.Filename, Data: data})
			elapsed := time.Since(start)
			var fe *FileError
			switch {
			case c.Limit == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case c.Limit == "":
				t.Logf("%s: %d bytes, %d chunks, peak RSS %d MiB, %s", c.Name, len(data), parsed.Chunks, parsed.PeakRSS>>20, elapsed)
				if parsed.PeakRSS <= 0 || parsed.PeakRSS > maxChildRSS && !raceEnabled { // the race detector's shadow memory is not the parser's
					t.Fatalf("peak RSS %d", parsed.PeakRSS)
				}
			case !errors.As(err, &fe):
				t.Fatalf("Parse = %v, want a FileError naming %s", err, c.Limit)
			case fe.Limit != c.Limit || fe.Code != "invalid_file":
				t.Fatalf("FileError %+v, want limit %s", fe, c.Limit)
			default:
				t.Logf("%s: %d bytes, peak RSS %d MiB, %s: %s", c.Name, len(data), fe.PeakRSS>>20, elapsed, fe.Message)
				if fe.PeakRSS <= 0 || fe.PeakRSS > maxChildRSS && !raceEnabled {
					t.Fatalf("peak RSS %d", fe.PeakRSS)
				}
			}
		})
	}
}

// A child that needs more memory than its limit dies, and the file fails
// with the limit named.
func TestChildMemoryLimit(t *testing.T) {
	if raceEnabled {
		t.Skip("a race-enabled binary maps its heap's address space at start: the limit on further mappings is not reached")
	}
	p := childParser(t, ChildLimits{MemoryBytes: 64 << 20})
	// 96 MiB of ordinary words: the child holds the file, its text and its
	// chunks, far more than 64 MiB beyond what it had mapped at start.
	words := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog\n"), 96<<20/44)
	_, err := p.Parse(context.Background(), ParseRequest{Filename: "words.txt", Data: words})
	var fe *FileError
	if !errors.As(err, &fe) || fe.Limit != "parser.max_memory_bytes" {
		t.Fatalf("Parse = %v, want a FileError naming parser.max_memory_bytes", err)
	}
}

// A child still running at the time budget is killed, and the file fails
// with the budget named.
func TestChildTimeBudget(t *testing.T) {
	p := childParser(t, ChildLimits{Timeout: time.Millisecond})
	_, err := p.Parse(context.Background(), ParseRequest{Filename: "letters.txt", Data: hostile.LetterRun()})
	var fe *FileError
	if !errors.As(err, &fe) || fe.Limit != "parser.time_budget" {
		t.Fatalf("Parse = %v, want a FileError naming parser.time_budget", err)
	}
}

// A parse whose caller gives up is not the file's fault.
func TestChildCallerCancel(t *testing.T) {
	p := childParser(t, ChildLimits{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Parse(ctx, ParseRequest{Filename: "letters.txt", Data: hostile.LetterRun()})
	var fe *FileError
	if errors.As(err, &fe) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Parse = %v, want context.Canceled", err)
	}
}
