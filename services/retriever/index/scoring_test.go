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
	// Default weights: the agreement fusion's dense list at AgreementDenseWeight; the others equal; weights a
	// query gives stay as given.
	for _, tc := range []struct {
		f             Fusion
		dense, sparse float64
	}{
		{Fusion{}, AgreementDenseWeight, 1},
		{Fusion{Method: FusionAgreement, DenseWeight: 1, SparseWeight: 1}, 1, 1},
		{Fusion{Method: FusionZScore}, 1, 1},
		{Fusion{Method: FusionRRF}, 1, 1},
		{Fusion{Method: FusionWeighted}, 1, 1},
	} {
		p, err := PrepareQuery(Query{Tenant: "t", Dense: []float32{1}, Fusion: tc.f}, 0)
		if err != nil || p.Fusion.DenseWeight != tc.dense || p.Fusion.SparseWeight != tc.sparse {
			t.Errorf("fusion %+v: weights %v / %v (%v), want %v / %v", tc.f, p.Fusion.DenseWeight, p.Fusion.SparseWeight, err, tc.dense, tc.sparse)
		}
	}
	if p, err := PrepareQuery(Query{Tenant: "t", Mode: ModeSparse, Phrase: []string{"to", "be"}}, 0); err != nil || !p.UseSparse {
		t.Fatalf("a phrase-only sparse query: %v", err)
	}
	if _, err := PrepareQuery(Query{Tenant: "t", Mode: ModeSparse, TermWeights: map[string]float64{"a": math.Inf(1)}}, 0); err == nil {
		t.Fatal("an infinite term weight accepted")
	}
}

func TestFuseAgreement(t *testing.T) {
	mk := func(keys ...string) []Ranked[string] {
		l := make([]Ranked[string], len(keys))
		for i, k := range keys {
			l[i] = Ranked[string]{k, float64(len(keys) - i)}
		}
		return l
	}
	if a := Agreement(mk("a", "b", "c", "d"), mk("c", "x", "a"), 10); math.Abs(a-2.0/3) > 1e-12 {
		t.Fatalf("agreement = %v, want 2/3 (two common over the shorter list of 3)", a)
	}
	if a := Agreement(mk("a"), nil, 10); a != 0 {
		t.Fatalf("agreement with an empty list = %v", a)
	}
	if a := Agreement(mk("a", "b", "c"), mk("c", "b", "a"), 2); a != 0.5 {
		t.Fatalf("agreement at depth 2 = %v, want 1/2", a)
	}
	abs := []bool{true, false}
	// A dense list that shares nothing with the sparse one counts for nothing: sparse order, dense-only 0.
	dense := mk("d1", "d2", "d3", "d4")
	sparse := mk("s1", "s2", "s3")
	r := FuseWeights([][]Ranked[string]{dense, sparse}, []float64{1, 1}, abs, Fusion{Method: FusionAgreement}, 10, strings.Compare)
	if r[0].Key != "s1" || r[0].Score <= 0 {
		t.Fatalf("disagreeing: %v", r)
	}
	for _, c := range r {
		if c.Key[0] == 'd' && c.Score != 0 {
			t.Fatalf("disagreeing: dense-only %s scored %v", c.Key, c.Score)
		}
	}
	// The zero Fusion is agreement.
	if z := FuseWeights([][]Ranked[string]{dense, sparse}, []float64{1, 1}, abs, Fusion{}, 10, strings.Compare); z[0] != r[0] {
		t.Fatalf("zero fusion %v, agreement %v", z, r)
	}
	// Full agreement: both lists count equally; the scores are the mean of the clipped, scaled z-scores.
	dense = []Ranked[string]{{"b", 0.9}, {"a", 0.5}, {"c", 0.1}}
	sparse = []Ranked[string]{{"a", 10}, {"b", 6}, {"c", 2}}
	r = FuseWeights([][]Ranked[string]{dense, sparse}, []float64{1, 1}, abs, Fusion{Method: FusionAgreement}, 10, strings.Compare)
	// Each list: mean m, population sd s = √(8/3)·unit; z of the best = √(3/2), of the middle 0; divided by √2.
	top := math.Sqrt(1.5) / math.Sqrt2
	want := map[string]float64{"a": top / 2, "b": top / 2, "c": 0}
	for _, c := range r {
		if math.Abs(c.Score-want[c.Key]) > 1e-12 {
			t.Fatalf("agreeing: %s = %v, want %v (%v)", c.Key, c.Score, want[c.Key], r)
		}
	}
	if r[2].Key != "c" {
		t.Fatalf("agreeing: %v", r)
	}
	// An empty sparse list leaves the dense one alone, ungated.
	r = FuseWeights([][]Ranked[string]{dense, nil}, []float64{1, 1}, abs, Fusion{Method: FusionAgreement}, 10, strings.Compare)
	if r[0].Key != "b" || math.Abs(r[0].Score-top) > 1e-12 {
		t.Fatalf("dense alone: %v", r)
	}
}

func TestFuseZScore(t *testing.T) {
	abs := []bool{true, false}
	// The z-scores of agreement without its factor: a dense list that shares nothing with the sparse one
	// counts at its weight, so with more weight on it its best candidate comes first.
	dense := []Ranked[string]{{"d1", 0.9}, {"d2", 0.5}, {"d3", 0.1}}
	sparse := []Ranked[string]{{"s1", 10}, {"s2", 6}, {"s3", 2}}
	lists := [][]Ranked[string]{dense, sparse}
	top := math.Sqrt(1.5) / math.Sqrt2 // the scaled z-score of the best of three evenly spaced scores
	r := FuseWeights(lists, []float64{1.5, 1}, abs, Fusion{Method: FusionZScore}, 10, strings.Compare)
	want := map[string]float64{"d1": 1.5 * top / 2.5, "s1": top / 2.5}
	if r[0].Key != "d1" || r[1].Key != "s1" || math.Abs(r[0].Score-want["d1"]) > 1e-12 || math.Abs(r[1].Score-want["s1"]) > 1e-12 {
		t.Fatalf("zscore, dense at 1.5: %v, want d1 %v then s1 %v", r, want["d1"], want["s1"])
	}
	for _, c := range r[2:] {
		if c.Score != 0 {
			t.Fatalf("zscore: %s below average scored %v", c.Key, c.Score)
		}
	}
	// Agreement on the same lists ignores the dense one.
	if a := FuseWeights(lists, []float64{1.5, 1}, abs, Fusion{Method: FusionAgreement}, 10, strings.Compare); a[0].Key != "s1" {
		t.Fatalf("agreement: %v", a)
	}
	// An empty list is left out of the normalisation, as in agreement.
	r = FuseWeights([][]Ranked[string]{dense, nil}, []float64{1.5, 1}, abs, Fusion{Method: FusionZScore}, 10, strings.Compare)
	if r[0].Key != "d1" || math.Abs(r[0].Score-top) > 1e-12 {
		t.Fatalf("zscore, dense alone: %v", r)
	}
}
