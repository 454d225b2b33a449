package chunk_test

import (
	"bytes"
	"context"
	"github.com/aiforge/aiforge/pkg/lexical"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/services/ingest/chunk"
	"github.com/aiforge/aiforge/services/ingest/extract"
	"github.com/aiforge/aiforge/services/ingest/internal/testpdf"
)

// extractAndChunk is the ingest pipeline without the service around it:
// sniff, extract, chunk.
func extractAndChunk(tb testing.TB, name string, data []byte, tok chunk.Tokenizer) (*extract.Document, []chunk.Chunk) {
	tb.Helper()
	format := extract.Sniff(name, data[:min(len(data), 4096)])
	ex, ok := extract.ForFormat(format)
	if !ok {
		tb.Fatalf("unsupported %q", name)
	}
	doc, err := ex.Extract(context.Background(), bytes.NewReader(data), int64(len(data)))
	if err != nil {
		tb.Fatal(err)
	}
	chunks, err := chunk.Split(context.Background(), doc, chunk.Options{}, tok)
	if err != nil {
		tb.Fatal(err)
	}
	return doc, chunks
}

func TestPDFToChunksKeepPages(t *testing.T) {
	tok, err := chunk.NewTiktoken()
	if err != nil {
		t.Fatal(err)
	}
	data := testpdf.Report(t, 8)
	doc, chunks := extractAndChunk(t, "report.pdf", data, tok)
	if doc.Pages != 8 || len(chunks) < 8 {
		t.Fatalf("%d pages, %d chunks", doc.Pages, len(chunks))
	}
	found := false
	for _, c := range chunks {
		if c.Tokens > chunk.DefaultMaxTokens {
			t.Errorf("chunk %d has %d tokens", c.Index, c.Tokens)
		}
		if len(c.Pages) == 0 {
			t.Errorf("chunk %d has no pages", c.Index)
		}
		if strings.Contains(c.Text, testpdf.KnownSentence) {
			found = true
			if !slices.Contains(c.Pages, 3) {
				t.Errorf("known sentence chunk pages = %v", c.Pages)
			}
			if len(c.HeadingPath) == 0 || c.HeadingPath[0] != "Chapter 3: Topic 3" {
				t.Errorf("known sentence chunk heading path = %q", c.HeadingPath)
			}
		}
	}
	if !found {
		t.Fatal("known sentence in no chunk")
	}
	// re-ingesting the same file: same content hash, same chunks
	h1, _ := chunk.Hash(bytes.NewReader(data))
	h2, _ := chunk.Hash(bytes.NewReader(testpdf.Report(t, 8)))
	if h1 != h2 {
		t.Error("the same file hashes differently")
	}
	_, again := extractAndChunk(t, "report.pdf", data, tok)
	if !reflect.DeepEqual(chunks, again) {
		t.Error("the same file chunks differently")
	}
}

// BenchmarkExtractAndChunk70Pages measures the PDF path end to end on a
// generated 70-page report and reports pages per second.
func BenchmarkExtractAndChunk70Pages(b *testing.B) {
	const pages = 70
	tok, err := chunk.NewTiktoken()
	if err != nil {
		b.Fatal(err)
	}
	data := testpdf.Report(b, pages)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	n := 0
	for b.Loop() {
		doc, chunks := extractAndChunk(b, "report.pdf", data, tok)
		if doc.Pages != pages || len(chunks) == 0 {
			b.Fatal("bad result")
		}
		n++
	}
	b.ReportMetric(float64(pages*n)/b.Elapsed().Seconds(), "pages/s")
}

// BenchmarkExtractChunkAndSparse70Pages adds what the embedder does with no
// embedding engine: the sparse lexical vector of every chunk.
func BenchmarkExtractChunkAndSparse70Pages(b *testing.B) {
	const pages = 70
	tok, err := chunk.NewTiktoken()
	if err != nil {
		b.Fatal(err)
	}
	an := lexical.NewEnglish()
	data := testpdf.Report(b, pages)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	n := 0
	for b.Loop() {
		_, chunks := extractAndChunk(b, "report.pdf", data, tok)
		terms := 0
		for _, c := range chunks {
			_, l := an.TermFreqs(c.Text)
			terms += l
		}
		if terms == 0 {
			b.Fatal("no terms")
		}
		n++
	}
	b.ReportMetric(float64(pages*n)/b.Elapsed().Seconds(), "pages/s")
}
