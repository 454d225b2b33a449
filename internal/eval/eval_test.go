package eval

import (
	"context"
	"math"
	"testing"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestMetrics(t *testing.T) {
	ranked := []bool{false, true, false, true}
	if r := Recall(ranked, 2, 2); !near(r, 0.5) {
		t.Fatalf("recall@2 = %v", r)
	}
	if r := Recall(ranked, 2, 10); !near(r, 1) {
		t.Fatalf("recall@10 = %v", r)
	}
	if rr := ReciprocalRank(ranked); !near(rr, 0.5) {
		t.Fatalf("MRR = %v", rr)
	}
	want := (1/math.Log2(3) + 1/math.Log2(5)) / (1 + 1/math.Log2(3))
	if n := NDCG(ranked, 2, 10); !near(n, want) {
		t.Fatalf("nDCG = %v, want %v", n, want)
	}
	if ReciprocalRank([]bool{false}) != 0 || NDCG(nil, 0, 10) != 0 {
		t.Fatal("empty cases")
	}
}

// TestRunOnTheBundledSet runs the evaluation on the bundled set: sparse
// only, then with an embeddings engine (the simulator, whose vectors carry
// no meaning, so only the mechanics are checked for dense and hybrid).
func TestRunOnTheBundledSet(t *testing.T) {
	ctx := context.Background()
	scores, err := Run(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(scores) != 1 || scores[0].Mode != "sparse" || scores[0].Queries != 17 {
		t.Fatalf("scores = %+v", scores)
	}
	s := scores[0]
	t.Logf("sparse: recall@10 %.3f MRR %.3f nDCG@10 %.3f", s.Recall, s.MRR, s.NDCG10)
	// Every query's passage exists and keyword search finds most of them;
	// a corpus or chunking regression shows up here.
	if s.Recall < 0.5 || s.MRR <= 0 || s.NDCG10 <= 0 || s.Recall > 1 {
		t.Fatalf("sparse scores out of range: %+v", s)
	}
	_, base, closeFn, err := enginesim.Start(enginesim.Config{Models: []string{"emb"}, EmbeddingDims: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	scores, err = Run(ctx, Options{CorpusDir: "dataset/corpus", QueriesFile: "dataset/queries.json", EmbeddingURL: base, EmbeddingModel: "emb"})
	if err != nil {
		t.Fatal(err)
	}
	if len(scores) != 3 || scores[1].Mode != "dense" || scores[2].Mode != "hybrid" {
		t.Fatalf("modes = %+v", scores)
	}
}
