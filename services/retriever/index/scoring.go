package index

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
)

// bm25IDF is ln(1 + (N − n + 0.5)/(n + 0.5)) with N documents and n containing the term, both per tenant.
func bm25IDF(n, total int64) float64 {
	if n <= 0 || total <= 0 {
		return 0
	}
	if n > total {
		n = total
	}
	return math.Log(1 + (float64(total)-float64(n)+0.5)/(float64(n)+0.5))
}

// bm25TF is the term-frequency component tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl)).
func bm25TF(tf uint32, docLen int, avgDocLen float64) float64 {
	if tf == 0 {
		return 0
	}
	norm := 1.0
	if avgDocLen > 0 {
		norm = 1 - BM25B + BM25B*float64(docLen)/avgDocLen
	}
	f := float64(tf)
	return f * (BM25K1 + 1) / (f + BM25K1*norm)
}

// termID hashes a term into the 32-bit sparse-vector index space (FNV-1a). The Qdrant backend keys sparse vectors
// and its per-tenant document frequencies by it; the embedded index keeps the terms themselves.
func termID(term string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(term))
	return h.Sum32()
}

// ranked is one candidate of a ranked list.
type ranked[K comparable] struct {
	key   K
	score float64
}

// sortRanked orders best first; ties by the tie function (ascending) for determinism.
func sortRanked[K comparable](r []ranked[K], tie func(a, b K) int) {
	slices.SortFunc(r, func(a, b ranked[K]) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return tie(a.key, b.key)
	})
}

// rrfFuse fuses ranked lists (each best first) by Reciprocal Rank Fusion and normalises the result so that a
// candidate ranked first by every list scores 1: score = Σ 1/(RRFK+p) · RRFK/len(lists).
func rrfFuse[K comparable](lists [][]ranked[K], limit int, tie func(a, b K) int) []ranked[K] {
	type acc struct {
		score float64
		best  int
	}
	m := make(map[K]*acc)
	var order []K
	for _, l := range lists {
		for p, c := range l {
			a := m[c.key]
			if a == nil {
				a = &acc{best: p}
				m[c.key] = a
				order = append(order, c.key)
			}
			a.score += 1 / float64(RRFK+p)
			a.best = min(a.best, p)
		}
	}
	norm := float64(RRFK) / float64(max(1, len(lists)))
	out := make([]ranked[K], 0, len(order))
	for _, k := range order {
		out = append(out, ranked[K]{key: k, score: m[k].score * norm})
	}
	slices.SortFunc(out, func(a, b ranked[K]) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := cmp.Compare(m[a.key].best, m[b.key].best); c != 0 {
			return c
		}
		return tie(a.key, b.key)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// normalizeRRF converts a raw RRF score over n lists to the normalised scale of rrfFuse.
func normalizeRRF(raw float64, n int) float64 {
	return raw * float64(RRFK) / float64(max(1, n))
}
