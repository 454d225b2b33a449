package index

import (
	"math"
	"strings"
	"testing"
)

func TestFuseWeights(t *testing.T) {
	dense := []Ranked[string]{{"a", 0.9}, {"b", 0.5}, {"c", 0.1}}
	sparse := []Ranked[string]{{"c", 12}, {"a", 6}}
	// Equal weights, k 60: RRFFuse.
	eq := FuseWeights([][]Ranked[string]{dense, sparse}, []float64{1, 1}, nil, Fusion{Method: FusionRRF, RRFK: 60}, 10, strings.Compare)
	rrf := RRFFuse([][]Ranked[string]{dense, sparse}, 10, strings.Compare)
	for i := range rrf {
		if eq[i].Key != rrf[i].Key || math.Abs(eq[i].Score-rrf[i].Score) > 1e-12 {
			t.Fatalf("equal weights %v != RRF %v", eq, rrf)
		}
	}
	// Weighted RRF: the heavier list decides.
	if r := FuseWeights([][]Ranked[string]{dense, sparse}, []float64{0, 1}, nil, Fusion{Method: FusionRRF, RRFK: 60}, 10, strings.Compare); len(r) != 2 || r[0].Key != "c" || r[0].Score != 1 {
		t.Fatalf("sparse only: %v", r)
	}
	// Weighted scores: cosine kept (absolute), BM25 divided by its best.
	w := FuseWeights([][]Ranked[string]{dense, sparse}, []float64{1, 1}, []bool{true, false}, Fusion{Method: FusionWeighted}, 10, strings.Compare)
	want := map[string]float64{"a": (0.9 + 0.5) / 2, "b": 0.5 / 2, "c": (0.1 + 1) / 2}
	if len(w) != 3 || w[0].Key != "a" || w[1].Key != "c" {
		t.Fatalf("weighted = %v", w)
	}
	for _, r := range w {
		if math.Abs(r.Score-want[r.Key]) > 1e-12 {
			t.Fatalf("weighted %s = %v, want %v", r.Key, r.Score, want[r.Key])
		}
	}
	// A flat, uninformative dense list does not outvote a clear keyword winner.
	flat := []Ranked[string]{{"x", 0.12}, {"y", 0.11}}
	kw := []Ranked[string]{{"y", 10}, {"x", 2}}
	if r := FuseWeights([][]Ranked[string]{flat, kw}, []float64{1, 1}, []bool{true, false}, Fusion{Method: FusionWeighted}, 10, strings.Compare); r[0].Key != "y" {
		t.Fatalf("flat dense list won: %v", r)
	}
}

func TestFusionValidation(t *testing.T) {
	for _, f := range []Fusion{{Method: "max"}, {DenseWeight: -1}, {SparseWeight: math.NaN()}, {RRFK: -3}} {
		if _, err := PrepareQuery(Query{Tenant: "t", Dense: []float32{1}, Fusion: f}, 0); err == nil {
			t.Errorf("fusion %+v accepted", f)
		}
	}
	p, err := PrepareQuery(Query{Tenant: "t", Dense: []float32{1}}, 0)
	if err != nil || p.Fusion.Method != FusionAgreement || p.Fusion.ServerRRF() || p.Scoring != ScoringBM25F {
		t.Fatalf("defaults: %+v, %v", p.Fusion, err)
	}
	if p, err := PrepareQuery(Query{Tenant: "t", Mode: ModeSparse, Phrase: []string{"to", "be"}}, 0); err != nil || !p.UseSparse {
		t.Fatalf("a phrase-only sparse query: %v", err)
	}
	if _, err := PrepareQuery(Query{Tenant: "t", Mode: ModeSparse, TermWeights: map[string]float64{"a": math.Inf(1)}}, 0); err == nil {
		t.Fatal("an infinite term weight accepted")
	}
}
