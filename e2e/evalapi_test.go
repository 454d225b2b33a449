package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	retrieval "github.com/aiforge/aiforge/internal/eval"
	"github.com/aiforge/aiforge/services/retriever/index"
)

// TestEvalMeasuresWhatTheAPIServes: `aiforge eval retrieval` indexes
// documents in process with the retriever's extractor, chunking, analyzer and
// index; a user uploads the file and searches through the API. Its figures
// are only worth something if both rank alike: the Debian FAQ PDF (73 pages)
// goes through the OpenAI SDK into a vector store with the default chunking
// and no embedding model, each question of the held-out set is searched
// there, and the rank of its answer must be the rank the eval's sparse mode
// reports for it, question by question. Skipped loudly where the package is
// not installed (apt-get install -y debian-faq), failed under CI=true.
func TestEvalMeasuresWhatTheAPIServes(t *testing.T) {
	const faq = "doc/debian/FAQ/debian-faq.en.pdf.gz"
	o := retrieval.Options{Set: "debian-heldout", Files: []string{faq}}
	set, _, err := retrieval.LoadSet(o)
	var gz []byte
	if err == nil {
		gz, err = os.ReadFile(filepath.Join(set.Root, faq))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Debian FAQ is not installed (%v), and CI installs it: %s", err, set.Install)
		}
		t.Skipf("SKIPPING: the Debian FAQ is not installed (%v): %s", err, set.Install)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	pdf, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scores, err := retrieval.Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var want retrieval.Scores
	for _, s := range scores {
		if s.Mode == retrieval.ModeSparse {
			want = s
		}
	}
	if len(want.Ranks) != len(set.Queries) || len(set.Queries) < 30 {
		t.Fatalf("eval scored %d questions of %d", len(want.Ranks), len(set.Queries))
	}

	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	vs, _ := storePDF(t, client, "debian-faq.en.pdf", pdf, 180*time.Second)

	top5 := 0
	for i := range set.Queries {
		q := &set.Queries[i]
		res, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
			Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String(q.Query)}, MaxNumResults: openai.Int(10)})
		if err != nil {
			t.Fatalf("%q: %v", q.Query, err)
		}
		rank := 0
		for j, r := range res.Data {
			var text string
			for _, c := range r.Content {
				text += c.Text
			}
			if q.Answers(index.Chunk{FileID: faq, Text: text}) {
				rank = j + 1
				break
			}
		}
		if rank >= 1 && rank <= 5 {
			top5++
		}
		if want.Questions[i] != q.Query || rank != want.Ranks[i] {
			t.Errorf("%q: the API ranks its answer %d, the eval %d (%q)", q.Query, rank, want.Ranks[i], want.Questions[i])
		}
	}
	t.Logf("%d questions: %d answered in the API's top 5 (recall@5 %.3f; eval %.3f)", len(set.Queries), top5,
		float64(top5)/float64(len(set.Queries)), want.Recall5)
}
