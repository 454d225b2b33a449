package chunk

import (
	"context"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/services/ingest/extract"
)

// segments cut the text into pieces that concatenate back to it, and cut
// before whitespace where cl100k's pre-tokenizer cuts: the count of prose
// is exact.
func TestSegmentsKeepProseCountsExact(t *testing.T) {
	tok, err := NewTiktoken()
	if err != nil {
		t.Fatal(err)
	}
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog.  Then it rests;\n\n", 400)
	var b strings.Builder
	n := 0
	segments(prose, func(s string) {
		if s == "" {
			t.Fatal("empty segment")
		}
		b.WriteString(s)
		n++
	})
	if b.String() != prose || n < 2 {
		t.Fatalf("%d segments do not rebuild the text", n)
	}
	tt := tok.(tiktokenTokenizer)
	if got, want := tok.Count(prose), len(tt.enc.EncodeOrdinary(prose)); got != want {
		t.Fatalf("Count = %d, whole-text encoding = %d", got, want)
	}
}

// A 2 MB run of one letter (minutes for naive byte-pair merging) is counted
// and chunked; the test's own timeout is the bound.
func TestLetterRunIsChunked(t *testing.T) {
	tok, err := NewTiktoken()
	if err != nil {
		t.Fatal(err)
	}
	run := strings.Repeat("a", 2_000_000)
	if n := tok.Count(run); n < len(run)/maxRun {
		t.Fatalf("Count = %d", n)
	}
	doc := &extract.Document{Blocks: []extract.Block{{Kind: extract.KindParagraph, Text: run}}}
	chunks, err := Split(context.Background(), doc, Options{}, tok)
	if err != nil || len(chunks) == 0 {
		t.Fatalf("Split: %d chunks, %v", len(chunks), err)
	}
	total := 0
	for _, c := range chunks {
		total += len(c.Text)
	}
	if total < len(run) {
		t.Fatalf("chunks hold %d bytes of %d", total, len(run))
	}
}

// Split stops when its context is done.
func TestSplitStopsOnCancel(t *testing.T) {
	tok, err := NewTiktoken()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	doc := &extract.Document{Blocks: []extract.Block{{Kind: extract.KindParagraph, Text: strings.Repeat("word ", 200_000)}}}
	if _, err := Split(ctx, doc, Options{}, tok); err != context.Canceled {
		t.Fatalf("Split = %v, want context.Canceled", err)
	}
}
