package extract_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/aiforge/aiforge/services/ingest/extract"
	"github.com/aiforge/aiforge/services/ingest/internal/hostile"
)

// Every hostile document of the corpus breaks the limit it is built to
// break, and the error names it.
func TestHostileCorpusBreaksItsLimit(t *testing.T) {
	for _, c := range hostile.Corpus() {
		t.Run(c.Name, func(t *testing.T) {
			if c.Heavy && raceEnabled {
				t.Skip("decompresses a gigabyte: minutes under the race detector")
			}
			data := c.Data()
			ex, ok := extract.ForFormat(extract.Sniff(c.Filename, data))
			if !ok {
				t.Fatalf("no extractor for %s", c.Filename)
			}
			doc, err := ex.Extract(context.Background(), bytes.NewReader(data), int64(len(data)))
			if c.Limit == "" {
				if err != nil {
					t.Fatalf("Extract: %v", err)
				}
				if len(doc.Blocks) == 0 {
					t.Fatal("no blocks")
				}
				return
			}
			var le *extract.LimitError
			if !errors.As(err, &le) {
				t.Fatalf("Extract = %v, want a LimitError naming %s", err, c.Limit)
			}
			if le.Limit != c.Limit || !errors.Is(err, extract.ErrTooLarge) {
				t.Fatalf("limit %q (%v), want %q", le.Limit, err, c.Limit)
			}
		})
	}
}
