// Package indextest is the contract suite every index.Index implementation passes: dense, sparse and hybrid
// search, filters, store scoping, tenant isolation (including keyword statistics), deletes, idempotent upserts,
// limits, thresholds, validation and, for persistent implementations, reopening.
package indextest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiforge/aiforge/services/retriever/index"
)

// Dim is the dense dimension the suite uses; factories configure their index for it.
const Dim = 8

// Run runs the contract suite. newIndex returns a fresh, empty index and arranges for it to be closed.
func Run(t *testing.T, newIndex func(t *testing.T) index.Index) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, index.Index)
	}{
		{"DenseSearch", testDense},
		{"SparseBM25", testSparse},
		{"Hybrid", testHybrid},
		{"HybridAgreement", testHybridAgreement},
		{"FilterInsideCandidateSearch", testFilterInsideCandidates},
		{"Filters", testFilters},
		{"InvalidFilters", testInvalidFilters},
		{"StoreScoping", testStoreScoping},
		{"TenantIsolation", testTenantIsolation},
		{"IDFIsolation", testIDFIsolation},
		{"DeleteFileAndStore", testDeletes},
		{"IdempotentUpsert", testIdempotent},
		{"LimitAndThreshold", testLimitThreshold},
		{"InvalidInput", testInvalidInput},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newIndex(t))
		})
	}
}

// RunPersistence checks that a persistent index survives Close and reopen. newOpener binds a fresh storage
// location and returns a function that opens the index on it; it is called several times, never with two
// indexes open at once.
func RunPersistence(t *testing.T, newOpener func(t *testing.T) func() (index.Index, error)) {
	t.Helper()
	t.Run("Reopen", func(t *testing.T) {
		ctx := context.Background()
		open := newOpener(t)
		ix := mustOpen(t, open)
		var chunks []index.Chunk
		for i := range 40 {
			c := chunk("t1", "s1", fmt.Sprintf("f%d", i%4), i, fmt.Sprintf("text %d", i),
				basis(i%Dim, 0.2*float32(i%5)), map[string]uint32{"common": 1, fmt.Sprintf("w%d", i%7): 3})
			c.Attributes = map[string]any{"n": float64(i), "even": i%2 == 0, "name": fmt.Sprintf("n%d", i)}
			c.Pages = []int{i, i + 1}
			c.HeadingPath = []string{"H1", fmt.Sprintf("H2-%d", i)}
			chunks = append(chunks, c)
		}
		for i := 0; i < len(chunks); i += 10 {
			mustUpsert(t, ix, chunks[i:i+10]...)
		}
		mustUpsert(t, ix, chunk("t2", "s9", "g", 0, "other tenant", basis(1, 0), map[string]uint32{"common": 2}))
		if err := ix.DeleteFile(ctx, "t1", "s1", "f3"); err != nil {
			t.Fatal(err)
		}
		queries := []index.Query{
			{Tenant: "t1", Dense: basis(2, 0.1), Mode: index.ModeDense, Limit: 20},
			{Tenant: "t1", Terms: map[string]uint32{"w3": 1, "common": 1}, Mode: index.ModeSparse, Limit: 20},
			{Tenant: "t1", Dense: basis(0, 0.3), Terms: map[string]uint32{"w1": 1}, Limit: 15,
				Filter: &index.Filter{Type: "eq", Key: "even", Value: true}},
			{Tenant: "t2", Terms: map[string]uint32{"common": 1}},
		}
		before := make([][]index.Hit, len(queries))
		for i, q := range queries {
			before[i] = mustSearch(t, ix, q)
		}
		if err := ix.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if _, err := ix.Search(ctx, queries[0]); !errors.Is(err, index.ErrClosed) {
			t.Errorf("Search after Close: %v, want ErrClosed", err)
		}
		if err := ix.Upsert(ctx, chunks[:1]); !errors.Is(err, index.ErrClosed) {
			t.Errorf("Upsert after Close: %v, want ErrClosed", err)
		}

		ix = mustOpen(t, open)
		wantCount(t, ix, "t1", "", 30)
		wantCount(t, ix, "t2", "", 1)
		for i, q := range queries {
			sameHits(t, fmt.Sprintf("query %d after reopen", i), before[i], mustSearch(t, ix, q))
		}
		hits := mustSearch(t, ix, index.Query{Tenant: "t1", Dense: basis(1, 0.2), Mode: index.ModeDense, Limit: 1})
		if len(hits) != 1 || len(hits[0].Chunk.Pages) != 2 || len(hits[0].Chunk.HeadingPath) != 2 ||
			len(hits[0].Chunk.Attributes) != 3 {
			t.Fatalf("chunk fields lost across reopen: %+v", hits)
		}
		// Keep writing after a reopen, then reopen again.
		mustUpsert(t, ix, chunk("t1", "s2", "new", 0, "after reopen", basis(3, 0), map[string]uint32{"fresh": 1}))
		if err := ix.DeleteStore(ctx, "t2", "s9"); err != nil {
			t.Fatal(err)
		}
		if err := ix.Close(); err != nil {
			t.Fatal(err)
		}
		ix = mustOpen(t, open)
		defer ix.Close()
		wantCount(t, ix, "t1", "", 31)
		wantCount(t, ix, "t2", "", 0)
		wantIDs(t, "fresh term after second reopen", mustSearch(t, ix, index.Query{Tenant: "t1",
			Terms: map[string]uint32{"fresh": 1}}), index.ChunkID("t1", "s2", "new", 0))
	})
}

func mustOpen(t *testing.T, open func() (index.Index, error)) index.Index {
	t.Helper()
	ix, err := open()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return ix
}

// ---- helpers ----

func chunk(tenant, store, file string, i int, text string, dense []float32, terms map[string]uint32) index.Chunk {
	length := 0
	for _, tf := range terms {
		length += int(tf)
	}
	return index.Chunk{
		ID: index.ChunkID(tenant, store, file, i), Tenant: tenant, StoreID: store, FileID: file, Index: i,
		Text: text, Dense: dense, Terms: terms, Length: length,
	}
}

// basis returns e_i plus w·e_(i+1).
func basis(i int, w float32) []float32 {
	v := make([]float32, Dim)
	v[i%Dim] = 1
	v[(i+1)%Dim] += w
	return v
}

func vec(xs ...float32) []float32 {
	v := make([]float32, Dim)
	copy(v, xs)
	return v
}

func cosine(a, b []float32) float64 {
	var d, na, nb float64
	for i := range a {
		d += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return d / math.Sqrt(na*nb)
}

// bm25 is the reference scorer of the contract: idf = ln(1 + (N − n + 0.5)/(n + 0.5)),
// tf' = tf·(k1+1)/(tf + k1·(1 − b + b·dl/avgdl)), k1 = 1.2, b = 0.75.
func bm25(tf, dl int, avgdl float64, n, total int) float64 {
	idf := math.Log(1 + (float64(total)-float64(n)+0.5)/(float64(n)+0.5))
	f := float64(tf)
	return idf * f * 2.2 / (f + 1.2*(1-0.75+0.75*float64(dl)/avgdl))
}

// rrfScore is the normalised fused score of a chunk at the given 0-based positions of some of the lists lists.
func rrfScore(lists int, positions ...int) float64 {
	s := 0.0
	for _, p := range positions {
		s += 1 / float64(index.RRFK+p)
	}
	return s * index.RRFK / float64(lists)
}

func mustUpsert(t *testing.T, ix index.Index, cs ...index.Chunk) {
	t.Helper()
	if err := ix.Upsert(context.Background(), cs); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
}

func mustSearch(t *testing.T, ix index.Index, q index.Query) []index.Hit {
	t.Helper()
	hits, err := ix.Search(context.Background(), q)
	if err != nil {
		t.Fatalf("Search(%+v): %v", q, err)
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score+1e-9 {
			t.Fatalf("hits not sorted by score: %v", scores(hits))
		}
	}
	for _, h := range hits {
		if h.Chunk.Dense != nil || h.Chunk.Terms != nil {
			t.Fatalf("hit %s carries vectors", h.Chunk.ID)
		}
		if h.Chunk.Tenant != q.Tenant {
			t.Fatalf("query of tenant %q returned a chunk of tenant %q", q.Tenant, h.Chunk.Tenant)
		}
	}
	return hits
}

func ids(hits []index.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Chunk.ID
	}
	return out
}

func texts(hits []index.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Chunk.Text
	}
	return out
}

func scores(hits []index.Hit) []float64 {
	out := make([]float64, len(hits))
	for i, h := range hits {
		out[i] = h.Score
	}
	return out
}

func wantIDs(t *testing.T, what string, hits []index.Hit, want ...string) {
	t.Helper()
	if got := ids(hits); !slices.Equal(got, want) {
		t.Fatalf("%s: got %v (texts %q), want %v", what, got, texts(hits), want)
	}
}

func wantIDSet(t *testing.T, what string, hits []index.Hit, want ...string) {
	t.Helper()
	got := ids(hits)
	sort.Strings(got)
	w := slices.Clone(want)
	sort.Strings(w)
	if !slices.Equal(got, w) {
		t.Fatalf("%s: got %v (texts %q), want %v", what, got, texts(hits), w)
	}
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-4*math.Max(1, math.Abs(want)) {
		t.Fatalf("%s: score %.6f, want %.6f", what, got, want)
	}
}

func wantCount(t *testing.T, ix index.Index, tenant, store string, want int) {
	t.Helper()
	n, err := ix.Count(context.Background(), tenant, store)
	if err != nil {
		t.Fatalf("Count(%s, %s): %v", tenant, store, err)
	}
	if n != want {
		t.Fatalf("Count(%s, %q) = %d, want %d", tenant, store, n, want)
	}
}

func sameHits(t *testing.T, what string, a, b []index.Hit) {
	t.Helper()
	if !slices.Equal(ids(a), ids(b)) {
		t.Fatalf("%s: ids %v, want %v", what, ids(b), ids(a))
	}
	for i := range a {
		if math.Abs(a[i].Score-b[i].Score) > 1e-5 {
			t.Fatalf("%s: hit %d score %v, want %v", what, i, b[i].Score, a[i].Score)
		}
		if a[i].Chunk.Text != b[i].Chunk.Text {
			t.Fatalf("%s: hit %d text %q, want %q", what, i, b[i].Chunk.Text, a[i].Chunk.Text)
		}
	}
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("%s: error %v, want ErrInvalid", what, err)
	}
}

// ---- tests ----

func testDense(t *testing.T, ix index.Index) {
	c0 := chunk("acme", "s1", "f1", 0, "zero", vec(1), nil)
	c0.Pages = []int{3, 4}
	c0.HeadingPath = []string{"Intro", "Scope"}
	c0.Attributes = map[string]any{"lang": "en", "rev": 2.0, "final": true}
	c1 := chunk("acme", "s1", "f1", 1, "one", vec(0, 1), nil)
	c2 := chunk("acme", "s1", "f1", 2, "two", vec(0, 0, 1), nil)
	c3 := chunk("acme", "s1", "f2", 0, "mostly zero", vec(0.9, 0.1), nil)
	c4 := chunk("acme", "s1", "f2", 1, "no vector", nil, map[string]uint32{"word": 1})
	mustUpsert(t, ix, c0, c1, c2, c3, c4)

	hits := mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(2), Mode: index.ModeDense, Limit: 2})
	wantIDs(t, "dense top 2", hits, c0.ID, c3.ID)
	near(t, "exact match", hits[0].Score, 1)
	near(t, "second", hits[1].Score, cosine(vec(1), vec(0.9, 0.1)))
	got := hits[0].Chunk
	if got.Text != "zero" || got.Tenant != "acme" || got.StoreID != "s1" || got.FileID != "f1" || got.Index != 0 ||
		!slices.Equal(got.Pages, []int{3, 4}) || !slices.Equal(got.HeadingPath, []string{"Intro", "Scope"}) ||
		got.Attributes["lang"] != "en" || got.Attributes["rev"] != 2.0 || got.Attributes["final"] != true ||
		len(got.Attributes) != 3 {
		t.Fatalf("returned chunk fields: %+v", got)
	}
	all := mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1, 0.2), Mode: index.ModeDense})
	wantIDs(t, "default limit, chunk without vector absent", all, c3.ID, c0.ID, c1.ID, c2.ID)
	// The returned chunk is a copy: changing it changes nothing stored.
	hits[0].Chunk.Attributes["lang"] = "xx"
	hits[0].Chunk.Pages[0] = 99
	again := mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(2), Mode: index.ModeDense, Limit: 1})
	if again[0].Chunk.Attributes["lang"] != "en" || again[0].Chunk.Pages[0] != 3 {
		t.Fatal("a hit aliases the stored chunk")
	}
	// Caller-owned input slices are copied on upsert too.
	in := chunk("acme", "s1", "f3", 0, "alias", vec(0, 0, 0, 1), nil)
	mustUpsert(t, ix, in)
	in.Dense[3], in.Dense[0] = 0, 1
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(0, 0, 0, 1), Mode: index.ModeDense, Limit: 1})
	wantIDs(t, "upsert copies the vector", hits, in.ID)
	// Cosine similarity can be negative; ScoreThreshold 0 means no threshold.
	opp := chunk("acme", "s1", "f4", 0, "opposite", vec(-1), nil)
	mustUpsert(t, ix, opp)
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Mode: index.ModeDense, Limit: index.MaxLimit})
	if len(hits) != 6 || hits[5].Chunk.ID != opp.ID {
		t.Fatalf("opposite vector: %q", texts(hits))
	}
	near(t, "opposite vector", hits[5].Score, -1)
}

func testSparse(t *testing.T, ix index.Index) {
	d1 := chunk("acme", "s1", "f", 1, "apple pie", nil, map[string]uint32{"apple": 2, "pie": 2})
	d2 := chunk("acme", "s1", "f", 2, "apple tart", nil, map[string]uint32{"apple": 1, "tart": 3})
	d3 := chunk("acme", "s1", "f", 3, "banana", vec(1), map[string]uint32{"banana": 4})
	d4 := chunk("acme", "s1", "f", 4, "cherry", nil, map[string]uint32{"cherry": 4})
	mustUpsert(t, ix, d1, d2, d3, d4)

	hits := mustSearch(t, ix, index.Query{Tenant: "acme", Terms: map[string]uint32{"apple": 1}, Mode: index.ModeSparse})
	wantIDs(t, "apple", hits, d1.ID, d2.ID)
	near(t, "bm25 tf 2", hits[0].Score, bm25(2, 4, 4, 2, 4))
	near(t, "bm25 tf 1", hits[1].Score, bm25(1, 4, 4, 2, 4))

	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Terms: map[string]uint32{"apple": 1, "pie": 1, "unknown": 1},
		Mode: index.ModeSparse})
	wantIDs(t, "apple pie", hits, d1.ID, d2.ID)
	near(t, "two terms", hits[0].Score, bm25(2, 4, 4, 2, 4)+bm25(2, 4, 4, 1, 4))

	// A query term's frequency multiplies its weight.
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Terms: map[string]uint32{"tart": 2}, Mode: index.ModeSparse})
	wantIDs(t, "tart", hits, d2.ID)
	near(t, "query tf", hits[0].Score, 2*bm25(3, 4, 4, 1, 4))

	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Terms: map[string]uint32{"nothing": 1}, Mode: index.ModeSparse})
	wantIDs(t, "unknown term", hits)
}

// hybridCorpus: dense ranks for query e0 are A, C, D, B, E; sparse ranks for "kiwi" are B, C.
func hybridCorpus(t *testing.T, ix index.Index, tenant string) (a, b, c, d, e index.Chunk) {
	a = chunk(tenant, "s1", "f", 0, "A", vec(1), nil)
	c = chunk(tenant, "s1", "f", 2, "C", vec(1, 0.5), map[string]uint32{"kiwi": 1, "filler": 3})
	d = chunk(tenant, "s1", "f", 3, "D", vec(1, 1), nil)
	b = chunk(tenant, "s1", "f", 1, "B", vec(1, 2), map[string]uint32{"kiwi": 3, "filler": 1})
	e = chunk(tenant, "s1", "f", 4, "E", vec(0, 0, 1), map[string]uint32{"filler": 4})
	mustUpsert(t, ix, a, b, c, d, e)
	return
}

func testHybrid(t *testing.T, ix index.Index) {
	a, b, c, d, e := hybridCorpus(t, ix, "acme")
	rrf := index.Fusion{Method: index.FusionRRF}
	q := index.Query{Tenant: "acme", Dense: vec(1), Terms: map[string]uint32{"kiwi": 1}, Fusion: rrf}
	hits := mustSearch(t, ix, q)
	wantIDs(t, "hybrid RRF", hits, c.ID, b.ID, a.ID, d.ID, e.ID)
	near(t, "C: 2nd in both", hits[0].Score, rrfScore(2, 1, 1))
	near(t, "B: 4th dense, 1st sparse", hits[1].Score, rrfScore(2, 3, 0))
	near(t, "A: 1st dense only", hits[2].Score, rrfScore(2, 0))
	near(t, "D: 3rd dense only", hits[3].Score, rrfScore(2, 2))
	near(t, "E: 5th dense only", hits[4].Score, rrfScore(2, 4))

	q.Mode = index.ModeHybrid
	q.Limit = 2
	wantIDs(t, "explicit hybrid, limit 2", mustSearch(t, ix, q), c.ID, b.ID)

	// Hybrid with one modality ranks by it alone; the normalised score of the first hit is 1.
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Fusion: rrf})
	wantIDs(t, "hybrid, dense only", hits, a.ID, c.ID, d.ID, b.ID, e.ID)
	near(t, "first of one list", hits[0].Score, 1)
	near(t, "second of one list", hits[1].Score, rrfScore(1, 1))
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Terms: map[string]uint32{"kiwi": 1}, Fusion: rrf})
	wantIDs(t, "hybrid, terms only", hits, b.ID, c.ID)
	// Terms-only chunks take part in a hybrid query that carries both.
	f := chunk("acme", "s1", "f", 5, "F", nil, map[string]uint32{"kiwi": 4})
	mustUpsert(t, ix, f)
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(0, 0, 1), Terms: map[string]uint32{"kiwi": 1}})
	if !slices.Contains(ids(hits), f.ID) {
		t.Fatalf("terms-only chunk in hybrid: %q", texts(hits))
	}
}

// testHybridAgreement: the default fusion weighs the dense list by its agreement with the keyword list. 12
// chunks close to the query vector hold no query term, 2 far from it hold "kiwi": the dense top 10 shares
// nothing with the keyword hits, so the dense list counts for nothing: the keyword hits come first and the
// dense-only chunks score 0 (equal-weight RRF would rank them among the keyword hits); as z-scores are clipped
// at the list's mean, a threshold above 0 keeps only the better keyword hit. When the dense list does find the
// keyword chunks, it counts: the dense-only chunk it ranks third scores above 0.
func testHybridAgreement(t *testing.T, ix index.Index) {
	var near []index.Chunk
	for i := range 12 {
		near = append(near, chunk("acme", "s1", "near", i, fmt.Sprintf("n%d", i), vec(1, float32(i)/20), map[string]uint32{"filler": 2}))
	}
	k1 := chunk("acme", "s1", "kw", 0, "k1", vec(0, 0, 1), map[string]uint32{"kiwi": 3, "filler": 1})
	k2 := chunk("acme", "s1", "kw", 1, "k2", vec(0, 1, 1), map[string]uint32{"kiwi": 1, "filler": 1})
	mustUpsert(t, ix, append(near, k1, k2)...)
	q := index.Query{Tenant: "acme", Dense: vec(1), Terms: map[string]uint32{"kiwi": 1}, Limit: 20}
	hits := mustSearch(t, ix, q)
	if len(hits) < 2 || hits[0].Chunk.ID != k1.ID || hits[1].Chunk.ID != k2.ID {
		t.Fatalf("disagreeing dense list: got %q, want the keyword hits k1, k2 first", texts(hits))
	}
	for _, h := range hits {
		if h.Score < 0 || h.Score > 1 {
			t.Fatalf("fused score %v of %q outside [0, 1]", h.Score, h.Chunk.Text)
		}
		if h.Chunk.FileID == "near" && h.Score != 0 {
			t.Fatalf("dense-only chunk %q scored %v: the dense list should count for nothing", h.Chunk.Text, h.Score)
		}
	}
	// Only above-average candidates score: k1 is the better of the two keyword hits.
	q.ScoreThreshold = 1e-9
	wantIDs(t, "disagreeing dense list, threshold above 0", mustSearch(t, ix, q), k1.ID)

	// The query vector close to k2's: the dense list ranks k2, k1, then n11 (the near chunk with the largest
	// second component), agreeing fully with the keyword list's two hits.
	q = index.Query{Tenant: "acme", Dense: vec(0, 1, 0.9), Terms: map[string]uint32{"kiwi": 1}, Limit: 3}
	hits = mustSearch(t, ix, q)
	if len(hits) != 3 || !slices.Contains([]string{k1.ID, k2.ID}, hits[0].Chunk.ID) || !slices.Contains([]string{k1.ID, k2.ID}, hits[1].Chunk.ID) ||
		hits[2].Chunk.ID != near[11].ID || hits[2].Score <= 0 {
		t.Fatalf("agreeing dense list: got %q (%v), want k1 and k2, then n11 above 0", texts(hits), hits)
	}
}

func testFilterInsideCandidates(t *testing.T, ix index.Index) {
	// 30 chunks; the 5 that pass the filter are the worst by both rankers, far outside the top 4×Limit of the
	// unfiltered candidate lists. Filters apply inside each candidate search, so all 5 come back.
	var all []index.Chunk
	var keep []string
	for i := range 30 {
		c := chunk("acme", "s1", "f", i, fmt.Sprintf("c%d", i), vec(1, float32(i)/10),
			map[string]uint32{"common": uint32(31 - i), "pad": uint32(i + 1)})
		c.Attributes = map[string]any{"keep": i >= 25}
		if i >= 25 {
			keep = append(keep, c.ID)
		}
		all = append(all, c)
	}
	mustUpsert(t, ix, all...)
	f := &index.Filter{Type: "eq", Key: "keep", Value: true}
	for _, mode := range []string{index.ModeHybrid, index.ModeDense, index.ModeSparse} {
		hits := mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Terms: map[string]uint32{"common": 1},
			Mode: mode, Limit: 5, Filter: f})
		wantIDSet(t, mode, hits, keep...)
	}
}

func testFilters(t *testing.T, ix index.Index) {
	mk := func(i int, attrs map[string]any) index.Chunk {
		c := chunk("acme", "s1", "f", i, fmt.Sprintf("c%d", i), vec(1, float32(i)), map[string]uint32{"doc": 1})
		c.Attributes = attrs
		return c
	}
	c1 := mk(1, map[string]any{"author": "alice", "year": 2020, "draft": false, "score": 1.5})
	c2 := mk(2, map[string]any{"author": "bob", "year": 2021.0, "draft": true})
	c3 := mk(3, map[string]any{"author": "carol", "year": int64(2022), "draft": false})
	c4 := mk(4, nil)
	c5 := mk(5, map[string]any{"author": "alice", "year": "2020", "draft": true})
	mustUpsert(t, ix, c1, c2, c3, c4, c5)
	eq := func(k string, v any) index.Filter { return index.Filter{Type: "eq", Key: k, Value: v} }
	cases := []struct {
		name string
		f    index.Filter
		want []index.Chunk
	}{
		{"eq string", eq("author", "alice"), []index.Chunk{c1, c5}},
		{"ne string (missing matches)", index.Filter{Type: "ne", Key: "author", Value: "alice"}, []index.Chunk{c2, c3, c4}},
		{"eq number", eq("year", 2020.0), []index.Chunk{c1}},
		{"eq number given as int", eq("year", 2021), []index.Chunk{c2}},
		{"eq string that looks numeric", eq("year", "2020"), []index.Chunk{c5}},
		{"gt", index.Filter{Type: "gt", Key: "year", Value: 2020.0}, []index.Chunk{c2, c3}},
		{"gte", index.Filter{Type: "gte", Key: "year", Value: 2021}, []index.Chunk{c2, c3}},
		{"lt", index.Filter{Type: "lt", Key: "year", Value: 2021.0}, []index.Chunk{c1}},
		{"lte", index.Filter{Type: "lte", Key: "year", Value: 2021.0}, []index.Chunk{c1, c2}},
		{"gt fractional", index.Filter{Type: "gt", Key: "score", Value: 1.25}, []index.Chunk{c1}},
		{"lt on absent key", index.Filter{Type: "lt", Key: "score", Value: 1.0}, nil},
		{"eq bool true", eq("draft", true), []index.Chunk{c2, c5}},
		{"eq bool false", eq("draft", false), []index.Chunk{c1, c3}},
		{"ne bool", index.Filter{Type: "ne", Key: "draft", Value: true}, []index.Chunk{c1, c3, c4}},
		{"in strings", index.Filter{Type: "in", Key: "author", Value: []any{"alice", "carol"}}, []index.Chunk{c1, c3, c5}},
		{"in []string", index.Filter{Type: "in", Key: "author", Value: []string{"bob"}}, []index.Chunk{c2}},
		{"nin strings", index.Filter{Type: "nin", Key: "author", Value: []any{"alice", "carol"}}, []index.Chunk{c2, c4}},
		{"in numbers", index.Filter{Type: "in", Key: "year", Value: []any{2020.0, 2022}}, []index.Chunk{c1, c3}},
		{"in mixed", index.Filter{Type: "in", Key: "year", Value: []any{"2020", 2021.0}}, []index.Chunk{c2, c5}},
		{"nin numbers", index.Filter{Type: "nin", Key: "year", Value: []any{2020.0, 2021.0}}, []index.Chunk{c3, c4, c5}},
		{"in bools", index.Filter{Type: "in", Key: "draft", Value: []any{true}}, []index.Chunk{c2, c5}},
		{"and", index.Filter{Type: "and", Filters: []index.Filter{eq("draft", false),
			{Type: "gte", Key: "year", Value: 2021.0}}}, []index.Chunk{c3}},
		{"or with nested and", index.Filter{Type: "or", Filters: []index.Filter{eq("author", "bob"),
			{Type: "and", Filters: []index.Filter{eq("author", "alice"), eq("draft", true)}}}}, []index.Chunk{c2, c5}},
		{"and with nested or and ne", index.Filter{Type: "and", Filters: []index.Filter{
			{Type: "or", Filters: []index.Filter{eq("author", "alice"), eq("author", "bob")}},
			{Type: "ne", Key: "draft", Value: true}}}, []index.Chunk{c1}},
		{"or of nin and missing", index.Filter{Type: "or", Filters: []index.Filter{
			{Type: "nin", Key: "draft", Value: []any{true, false}}, eq("year", 2022.0)}}, []index.Chunk{c3, c4}},
		{"matches nothing", eq("author", "zed"), nil},
	}
	for _, tc := range cases {
		want := make([]string, len(tc.want))
		for i, c := range tc.want {
			want[i] = c.ID
		}
		f := tc.f
		if err := f.Validate(); err != nil {
			t.Fatalf("%s: Validate: %v", tc.name, err)
		}
		for _, mode := range []string{index.ModeDense, index.ModeSparse, index.ModeHybrid} {
			hits := mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Terms: map[string]uint32{"doc": 1},
				Mode: mode, Limit: 50, Filter: &f})
			wantIDSet(t, tc.name+" ("+mode+")", hits, want...)
		}
	}
}

func testInvalidFilters(t *testing.T, ix index.Index) {
	mustUpsert(t, ix, chunk("acme", "s1", "f", 0, "x", vec(1), nil))
	bad := []index.Filter{
		{},
		{Type: "like", Key: "a", Value: "b"},
		{Type: "eq", Value: "b"},
		{Type: "eq", Key: "a"},
		{Type: "eq", Key: "a", Value: []any{"b"}},
		{Type: "eq", Key: "a", Value: map[string]any{}},
		{Type: "gt", Key: "a", Value: "b"},
		{Type: "lte", Key: "a", Value: true},
		{Type: "in", Key: "a", Value: []any{}},
		{Type: "in", Key: "a", Value: "b"},
		{Type: "nin", Key: "a", Value: []any{"b", []any{"c"}}},
		{Type: "eq", Key: "a", Value: math.NaN()},
		{Type: "eq", Key: strings.Repeat("k", 65), Value: "b"},
		{Type: "eq", Key: "a", Value: "b", Filters: []index.Filter{{Type: "eq", Key: "c", Value: "d"}}},
		{Type: "and"},
		{Type: "or", Key: "a", Filters: []index.Filter{{Type: "eq", Key: "c", Value: "d"}}},
		{Type: "and", Filters: []index.Filter{{Type: "eq", Key: "c", Value: "d"}, {Type: "gt", Key: "c", Value: "x"}}},
	}
	for i, f := range bad {
		wantInvalid(t, fmt.Sprintf("Validate #%d %+v", i, f), f.Validate())
		_, err := ix.Search(context.Background(), index.Query{Tenant: "acme", Dense: vec(1), Filter: &f})
		wantInvalid(t, fmt.Sprintf("Search #%d", i), err)
	}
}

func testStoreScoping(t *testing.T, ix index.Index) {
	x1 := chunk("acme", "s1", "f1", 0, "x1", vec(1), map[string]uint32{"w": 1})
	x2 := chunk("acme", "s1", "f2", 0, "x2", vec(1, 1), map[string]uint32{"w": 2})
	y1 := chunk("acme", "s2", "f1", 0, "y1", vec(1, 0.5), map[string]uint32{"w": 3})
	mustUpsert(t, ix, x1, x2, y1)
	for _, mode := range []string{index.ModeDense, index.ModeSparse, index.ModeHybrid} {
		q := func(stores ...string) []index.Hit {
			return mustSearch(t, ix, index.Query{Tenant: "acme", StoreIDs: stores, Dense: vec(1),
				Terms: map[string]uint32{"w": 1}, Mode: mode})
		}
		wantIDSet(t, mode+" s1", q("s1"), x1.ID, x2.ID)
		wantIDSet(t, mode+" s2", q("s2"), y1.ID)
		wantIDSet(t, mode+" s1+s2", q("s1", "s2"), x1.ID, x2.ID, y1.ID)
		wantIDSet(t, mode+" all stores", q(), x1.ID, x2.ID, y1.ID)
		wantIDSet(t, mode+" unknown store", q("nope"))
	}
	wantCount(t, ix, "acme", "s1", 2)
	wantCount(t, ix, "acme", "s2", 1)
	wantCount(t, ix, "acme", "", 3)
	wantCount(t, ix, "acme", "nope", 0)
}

func testTenantIsolation(t *testing.T, ix index.Index) {
	ctx := context.Background()
	// Same store, file, chunk id, vector and terms in two tenants.
	mk := func(tenant string, i int) index.Chunk {
		c := chunk("shared", "store", "file", i, fmt.Sprintf("%s-%d", tenant, i), vec(1, float32(i)),
			map[string]uint32{"secret": uint32(i + 1)})
		c.Tenant = tenant
		c.Attributes = map[string]any{"owner": tenant}
		return c
	}
	mustUpsert(t, ix, mk("a", 0), mk("a", 1), mk("b", 0))
	for _, tenant := range []string{"a", "b"} {
		for _, mode := range []string{index.ModeDense, index.ModeSparse, index.ModeHybrid} {
			hits := mustSearch(t, ix, index.Query{Tenant: tenant, Dense: vec(1), Terms: map[string]uint32{"secret": 1},
				Mode: mode, StoreIDs: []string{"store"}})
			for _, h := range hits {
				if !strings.HasPrefix(h.Chunk.Text, tenant+"-") || h.Chunk.Attributes["owner"] != tenant {
					t.Fatalf("tenant %s saw %q", tenant, h.Chunk.Text)
				}
			}
			if want := map[string]int{"a": 2, "b": 1}[tenant]; len(hits) != want {
				t.Fatalf("tenant %s %s: %d hits, want %d", tenant, mode, len(hits), want)
			}
		}
	}
	// A filter naming the other tenant's attribute value finds nothing.
	hits := mustSearch(t, ix, index.Query{Tenant: "b", Dense: vec(1), Filter: &index.Filter{Type: "eq", Key: "owner", Value: "a"}})
	wantIDs(t, "filter cannot cross tenants", hits)
	wantCount(t, ix, "a", "store", 2)
	wantCount(t, ix, "b", "store", 1)
	wantCount(t, ix, "c", "", 0)
	wantIDs(t, "unknown tenant", mustSearch(t, ix, index.Query{Tenant: "c", Dense: vec(1)}))
	// Deleting in one tenant leaves the other alone.
	if err := ix.DeleteFile(ctx, "a", "store", "file"); err != nil {
		t.Fatal(err)
	}
	wantCount(t, ix, "a", "store", 0)
	wantCount(t, ix, "b", "store", 1)
	mustUpsert(t, ix, mk("a", 0))
	if err := ix.DeleteStore(ctx, "b", "store"); err != nil {
		t.Fatal(err)
	}
	wantCount(t, ix, "a", "store", 1)
	wantCount(t, ix, "b", "", 0)
	hits = mustSearch(t, ix, index.Query{Tenant: "a", Terms: map[string]uint32{"secret": 1}})
	if len(hits) != 1 || hits[0].Chunk.Text != "a-0" {
		t.Fatalf("tenant a after b's delete: %q", texts(hits))
	}
}

func testIDFIsolation(t *testing.T, ix index.Index) {
	// Tenant B: "alpha" is rarer than "beta", so the alpha chunk must rank first. Tenant A has 60 chunks with
	// alpha; pooled statistics would make alpha nearly worthless and put the beta chunks first.
	b1 := chunk("b", "s", "f", 1, "b-alpha", nil, map[string]uint32{"alpha": 1, "pad": 3})
	b2 := chunk("b", "s", "f", 2, "b-beta-1", nil, map[string]uint32{"beta": 1, "pad": 3})
	b3 := chunk("b", "s", "f", 3, "b-beta-2", nil, map[string]uint32{"beta": 1, "pad": 3})
	b4 := chunk("b", "s", "f", 4, "b-pad", nil, map[string]uint32{"pad": 4})
	mustUpsert(t, ix, b1, b2, b3, b4)
	q := index.Query{Tenant: "b", Terms: map[string]uint32{"alpha": 1, "beta": 1}, Mode: index.ModeSparse}
	before := mustSearch(t, ix, q)

	var a []index.Chunk
	for i := range 60 {
		a = append(a, chunk("a", "s", "f", i, "a-alpha", nil, map[string]uint32{"alpha": 1, "pad": 3}))
	}
	a = append(a, chunk("a", "s", "f", 99, "a-beta", nil, map[string]uint32{"beta": 1, "pad": 3}))
	mustUpsert(t, ix, a...)

	after := mustSearch(t, ix, q)
	if len(after) != 3 || after[0].Chunk.ID != b1.ID {
		t.Fatalf("tenant B ranking: %q, want b-alpha first", texts(after))
	}
	wantIDSet(t, "tenant B beta chunks", after[1:], b2.ID, b3.ID)
	near(t, "alpha weighted by B's statistics", after[0].Score, bm25(1, 4, 4, 1, 4))
	near(t, "beta weighted by B's statistics", after[1].Score, bm25(1, 4, 4, 2, 4))
	sameHits(t, "B's scores unchanged by A's corpus", before, after)

	// And the other way round: in A, beta is the rare term.
	hits := mustSearch(t, ix, index.Query{Tenant: "a", Terms: map[string]uint32{"alpha": 1, "beta": 1},
		Mode: index.ModeSparse, Limit: 1})
	if len(hits) != 1 || hits[0].Chunk.Text != "a-beta" {
		t.Fatalf("tenant A top hit %q, want a-beta", texts(hits))
	}
	near(t, "A's beta", hits[0].Score, bm25(1, 4, 4, 1, 61))
}

func testDeletes(t *testing.T, ix index.Index) {
	ctx := context.Background()
	var cs []index.Chunk
	for i := range 3 {
		cs = append(cs, chunk("acme", "s1", "f1", i, fmt.Sprintf("f1-%d", i), vec(1, float32(i)), map[string]uint32{"w": 1, "x": 3}))
	}
	for i := range 2 {
		cs = append(cs, chunk("acme", "s1", "f2", i, fmt.Sprintf("f2-%d", i), vec(1, float32(i)+0.5), map[string]uint32{"w": 2, "y": 2}))
	}
	other := chunk("acme", "s2", "f1", 0, "s2-f1", vec(1), map[string]uint32{"w": 1, "z": 3})
	mustUpsert(t, ix, append(cs, other)...)
	wantCount(t, ix, "acme", "s1", 5)

	if err := ix.DeleteFile(ctx, "acme", "s1", "f1"); err != nil {
		t.Fatal(err)
	}
	wantCount(t, ix, "acme", "s1", 2)
	wantCount(t, ix, "acme", "s2", 1)
	for _, mode := range []string{index.ModeDense, index.ModeSparse, index.ModeHybrid} {
		hits := mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Terms: map[string]uint32{"w": 1, "x": 1}, Mode: mode})
		wantIDSet(t, "after DeleteFile "+mode, hits, cs[3].ID, cs[4].ID, other.ID)
	}
	// Statistics follow the delete: 3 chunks left, "w" in all of them.
	hits := mustSearch(t, ix, index.Query{Tenant: "acme", Terms: map[string]uint32{"z": 1}, Mode: index.ModeSparse})
	wantIDs(t, "z", hits, other.ID)
	near(t, "idf after delete", hits[0].Score, bm25(3, 4, 4, 1, 3))

	if err := ix.DeleteFile(ctx, "acme", "s1", "never-existed"); err != nil {
		t.Fatalf("deleting a missing file: %v", err)
	}
	if err := ix.DeleteStore(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	wantCount(t, ix, "acme", "s1", 0)
	wantCount(t, ix, "acme", "", 1)
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Terms: map[string]uint32{"w": 1}})
	wantIDs(t, "after DeleteStore", hits, other.ID)
	if err := ix.DeleteStore(ctx, "acme", "s1"); err != nil {
		t.Fatalf("deleting an empty store: %v", err)
	}
	// Re-adding a deleted file works.
	mustUpsert(t, ix, cs[0])
	wantCount(t, ix, "acme", "s1", 1)
	wantInvalid(t, "DeleteFile without file", ix.DeleteFile(ctx, "acme", "s1", ""))
	wantInvalid(t, "DeleteStore without tenant", ix.DeleteStore(ctx, "", "s1"))
}

func testIdempotent(t *testing.T, ix index.Index) {
	var cs []index.Chunk
	for i := range 5 {
		c := chunk("acme", "s1", "f", i, fmt.Sprintf("v1-%d", i), vec(1, float32(i)/4), map[string]uint32{"w": uint32(i + 1), "pad": uint32(5 - i)})
		c.Attributes = map[string]any{"v": 1.0}
		cs = append(cs, c)
	}
	mustUpsert(t, ix, cs...)
	q := index.Query{Tenant: "acme", Dense: vec(1), Terms: map[string]uint32{"w": 1}}
	qs := index.Query{Tenant: "acme", Terms: map[string]uint32{"w": 1}, Mode: index.ModeSparse}
	first, firstSparse := mustSearch(t, ix, q), mustSearch(t, ix, qs)
	mustUpsert(t, ix, cs...)
	mustUpsert(t, ix, cs[2], cs[2])
	wantCount(t, ix, "acme", "s1", 5)
	sameHits(t, "hybrid after re-upsert", first, mustSearch(t, ix, q))
	sameHits(t, "BM25 statistics after re-upsert", firstSparse, mustSearch(t, ix, qs))

	// Replacing a chunk replaces text, terms, vector and attributes.
	repl := cs[4]
	repl.Text = "v2"
	repl.Terms = map[string]uint32{"new": 5}
	repl.Length = 5
	repl.Dense = vec(0, 0, 0, 1)
	repl.Attributes = map[string]any{"v": 2.0}
	mustUpsert(t, ix, repl)
	wantCount(t, ix, "acme", "s1", 5)
	hits := mustSearch(t, ix, index.Query{Tenant: "acme", Terms: map[string]uint32{"new": 1}})
	if len(hits) != 1 || hits[0].Chunk.Text != "v2" || hits[0].Chunk.Attributes["v"] != 2.0 {
		t.Fatalf("replaced chunk: %+v", hits)
	}
	for _, h := range mustSearch(t, ix, qs) {
		if h.Chunk.ID == repl.ID {
			t.Fatal("old terms of a replaced chunk still match")
		}
	}
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(0, 0, 0, 1), Mode: index.ModeDense, Limit: 1})
	wantIDs(t, "replaced vector", hits, repl.ID)
	near(t, "replaced vector score", hits[0].Score, 1)
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Filter: &index.Filter{Type: "eq", Key: "v", Value: 1.0}})
	if len(hits) != 4 {
		t.Fatalf("old attributes of the replaced chunk still match: %q", texts(hits))
	}
	// In one batch, the last of two equal ids wins.
	x1 := chunk("acme", "s1", "g", 0, "first", vec(1), nil)
	x2 := x1
	x2.Text = "second"
	mustUpsert(t, ix, x1, x2)
	wantCount(t, ix, "acme", "s1", 6)
	hits = mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Mode: index.ModeDense,
		Filter: &index.Filter{Type: "ne", Key: "v", Value: 1.0}})
	if !slices.Contains(texts(hits), "second") || slices.Contains(texts(hits), "first") {
		t.Fatalf("duplicate id in a batch: %q", texts(hits))
	}
}

func testLimitThreshold(t *testing.T, ix index.Index) {
	var cs []index.Chunk
	for i := range 20 {
		// cosine with e0 decreasing in i
		cs = append(cs, chunk("acme", "s1", "f", i, fmt.Sprintf("c%d", i), vec(1, float32(i)/5), map[string]uint32{"w": 1}))
	}
	mustUpsert(t, ix, cs...)
	ctx := context.Background()
	if n := len(mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Limit: 3})); n != 3 {
		t.Fatalf("limit 3: %d hits", n)
	}
	if n := len(mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1)})); n != index.DefaultLimit {
		t.Fatalf("default limit: %d hits", n)
	}
	if n := len(mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Limit: index.MaxLimit})); n != 20 {
		t.Fatalf("max limit: %d hits", n)
	}
	for _, l := range []int{-1, index.MaxLimit + 1} {
		_, err := ix.Search(ctx, index.Query{Tenant: "acme", Dense: vec(1), Limit: l})
		wantInvalid(t, fmt.Sprintf("limit %d", l), err)
	}
	// Dense: cosine threshold. cos(e0, e0+0.2·i·e1) ≥ 0.9 ⟺ i ≤ 2.
	hits := mustSearch(t, ix, index.Query{Tenant: "acme", Dense: vec(1), Mode: index.ModeDense, Limit: 50, ScoreThreshold: 0.9})
	wantIDs(t, "dense threshold", hits, cs[0].ID, cs[1].ID, cs[2].ID)
	for _, h := range hits {
		if h.Score < 0.9 {
			t.Fatalf("hit below threshold: %v", h.Score)
		}
	}
	// Hybrid: normalised RRF (C 0.984, B 0.976, then 0.5 and below).
	_, b, c, _, _ := hybridCorpus(t, ix, "hy")
	hq := index.Query{Tenant: "hy", Dense: vec(1), Terms: map[string]uint32{"kiwi": 1}, ScoreThreshold: 0.97,
		Fusion: index.Fusion{Method: index.FusionRRF}}
	wantIDs(t, "hybrid threshold 0.97", mustSearch(t, ix, hq), c.ID, b.ID)
	hq.ScoreThreshold = 0.98
	wantIDs(t, "hybrid threshold 0.98", mustSearch(t, ix, hq), c.ID)
	hq.ScoreThreshold = 0.99
	wantIDs(t, "hybrid threshold 0.99", mustSearch(t, ix, hq))
	// Sparse: BM25 threshold between the two kiwi chunks.
	sp := mustSearch(t, ix, index.Query{Tenant: "hy", Terms: map[string]uint32{"kiwi": 1}, Mode: index.ModeSparse})
	wantIDs(t, "kiwi", sp, b.ID, c.ID)
	mid := (sp[0].Score + sp[1].Score) / 2
	sp = mustSearch(t, ix, index.Query{Tenant: "hy", Terms: map[string]uint32{"kiwi": 1}, Mode: index.ModeSparse, ScoreThreshold: mid})
	wantIDs(t, "sparse threshold", sp, b.ID)
}

func testInvalidInput(t *testing.T, ix index.Index) {
	ctx := context.Background()
	good := chunk("acme", "s1", "f", 0, "good", vec(1), map[string]uint32{"w": 1})
	mustUpsert(t, ix, good)
	tooMany := map[string]any{}
	for i := range index.MaxAttributes + 1 {
		tooMany[fmt.Sprintf("k%d", i)] = "v"
	}
	bad := map[string]func(c *index.Chunk){
		"no tenant":           func(c *index.Chunk) { c.Tenant = "" },
		"no id":               func(c *index.Chunk) { c.ID = "" },
		"no store":            func(c *index.Chunk) { c.StoreID = "" },
		"no file":             func(c *index.Chunk) { c.FileID = "" },
		"negative index":      func(c *index.Chunk) { c.Index = -1 },
		"negative length":     func(c *index.Chunk) { c.Length = -1 },
		"too many attributes": func(c *index.Chunk) { c.Attributes = tooMany },
		"attribute type":      func(c *index.Chunk) { c.Attributes = map[string]any{"k": []int{1}} },
		"attribute nil":       func(c *index.Chunk) { c.Attributes = map[string]any{"k": nil} },
		"attribute key":       func(c *index.Chunk) { c.Attributes = map[string]any{"": "v"} },
		"long string value":   func(c *index.Chunk) { c.Attributes = map[string]any{"k": strings.Repeat("v", 513)} },
		"NaN vector":          func(c *index.Chunk) { c.Dense = vec(float32(math.NaN())) },
		"zero vector":         func(c *index.Chunk) { c.Dense = vec() },
		"wrong dimension":     func(c *index.Chunk) { c.Dense = []float32{1, 2, 3} },
		"empty term":          func(c *index.Chunk) { c.Terms = map[string]uint32{"": 1} },
	}
	for name, mutate := range bad {
		c := chunk("acme", "s1", "bad", 1, "bad", vec(0, 1), map[string]uint32{"w": 1})
		mutate(&c)
		ok := chunk("acme", "s1", "bad", 2, "ok", vec(0, 1), nil)
		wantInvalid(t, name, ix.Upsert(ctx, []index.Chunk{ok, c}))
	}
	wantCount(t, ix, "acme", "", 1) // no partial batch
	badQueries := map[string]index.Query{
		"no tenant":              {Dense: vec(1)},
		"unknown mode":           {Tenant: "acme", Dense: vec(1), Mode: "semantic"},
		"dense without vector":   {Tenant: "acme", Terms: map[string]uint32{"w": 1}, Mode: index.ModeDense},
		"sparse without terms":   {Tenant: "acme", Dense: vec(1), Mode: index.ModeSparse},
		"hybrid without either":  {Tenant: "acme"},
		"query dimension":        {Tenant: "acme", Dense: []float32{1, 0}},
		"zero query vector":      {Tenant: "acme", Dense: vec()},
		"NaN threshold":          {Tenant: "acme", Dense: vec(1), ScoreThreshold: math.NaN()},
		"empty store id in list": {Tenant: "acme", Dense: vec(1), StoreIDs: []string{""}},
	}
	for name, q := range badQueries {
		_, err := ix.Search(ctx, q)
		wantInvalid(t, name, err)
	}
	_, err := ix.Count(ctx, "", "")
	wantInvalid(t, "Count without tenant", err)
	if err := ix.Upsert(ctx, nil); err != nil {
		t.Fatalf("empty upsert: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := ix.Upsert(cctx, []index.Chunk{good}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Upsert with a cancelled context: %v", err)
	}
	if _, err := ix.Search(cctx, index.Query{Tenant: "acme", Dense: vec(1)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Search with a cancelled context: %v", err)
	}
}

func testConcurrent(t *testing.T, ix index.Index) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 4 {
		wg.Go(func() {
			for i := range 10 {
				file := fmt.Sprintf("w%d", w)
				c := chunk("acme", "s1", file, i, file, basis(w+i, 0.3), map[string]uint32{file: 1, "all": 1})
				if err := ix.Upsert(ctx, []index.Chunk{c}); err != nil {
					errs <- err
					return
				}
				if _, err := ix.Search(ctx, index.Query{Tenant: "acme", Dense: basis(i, 0.1), Terms: map[string]uint32{"all": 1}}); err != nil {
					errs <- err
					return
				}
				if i == 5 {
					if err := ix.DeleteFile(ctx, "acme", "s1", file); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wantCount(t, ix, "acme", "s1", 16)
}
