package index

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
)

// BM25IDF is ln(1 + (N − n + 0.5)/(n + 0.5)) with N documents and n containing the term, both per tenant.
func BM25IDF(n, total int64) float64 {
	if n <= 0 || total <= 0 {
		return 0
	}
	if n > total {
		n = total
	}
	return math.Log(1 + (float64(total)-float64(n)+0.5)/(float64(n)+0.5))
}

// BM25TF is the term-frequency component tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl)).
func BM25TF(tf uint32, docLen int, avgDocLen float64) float64 {
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

// TermID hashes a term into the 32-bit sparse-vector index space (FNV-1a). The Qdrant backend keys sparse vectors
// and its per-tenant document frequencies by it; the embedded index keeps the terms themselves.
func TermID(term string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(term))
	return h.Sum32()
}

// Ranked is one candidate of a ranked list.
type Ranked[K comparable] struct {
	Key   K
	Score float64
}

// RRFFuse fuses ranked lists (each best first) by Reciprocal Rank Fusion and normalises the result so that a
// candidate ranked first by every list scores 1: score = Σ 1/(RRFK+p) · RRFK/len(lists). Ties are broken by the
// best position in any list, then by tie (ascending) for determinism.
func RRFFuse[K comparable](lists [][]Ranked[K], limit int, tie func(a, b K) int) []Ranked[K] {
	return FuseWeights(lists, nil, nil, Fusion{}, limit, tie)
}

// FuseWeights fuses ranked lists (each best first) as f says, with weights[i] the weight of lists[i]:
//
//   - FusionRRF: score = Σ_i w_i/(k+p_i) over the lists a candidate is in, normalised by k/Σ w_i so that first
//     in every list scores 1 (with equal weights this is RRFFuse);
//   - FusionWeighted: score = Σ_i w_i·norm_i / Σ w_i, a candidate missing from a list taking 0 there, where
//     norm_i puts list i's scores on [0, 1]: a list marked absolute (cosine similarities, already on a fixed
//     scale) keeps its scores, clipped to [0, 1]; any other list (BM25, whose scale depends on the query and
//     the corpus) is divided by its best score. Keeping cosine on its own scale matters: stretching a flat,
//     uninformative dense list to [0, 1] (min-max) would let it outvote a confident keyword match.
//
// Lists with weight 0 take no part. Ties are broken by the best position in any list, then by tie.
func FuseWeights[K comparable](lists [][]Ranked[K], weights []float64, absolute []bool, f Fusion, limit int, tie func(a, b K) int) []Ranked[K] {
	type acc struct {
		score float64
		best  int
	}
	k := float64(f.RRFK)
	if k <= 0 {
		k = RRFK
	}
	m := make(map[K]*acc)
	var order []K
	var wsum float64
	for i, l := range lists {
		w := 1.0
		if i < len(weights) {
			w = weights[i]
		}
		if w <= 0 {
			continue
		}
		wsum += w // an empty list still counts: "first in every list" is what scores 1
		if len(l) == 0 {
			continue
		}
		abs := i < len(absolute) && absolute[i]
		hi := l[0].Score
		for _, c := range l {
			hi = max(hi, c.Score)
		}
		for p, c := range l {
			a := m[c.Key]
			if a == nil {
				a = &acc{best: p}
				m[c.Key] = a
				order = append(order, c.Key)
			}
			if f.Method == FusionWeighted {
				var norm float64
				switch {
				case abs:
					norm = min(max(c.Score, 0), 1)
				case hi > 0:
					norm = max(c.Score, 0) / hi
				}
				a.score += w * norm
			} else {
				a.score += w / (k + float64(p))
			}
			a.best = min(a.best, p)
		}
	}
	norm := 0.0
	if wsum > 0 {
		norm = 1 / wsum
		if f.Method != FusionWeighted {
			norm = k / wsum
		}
	}
	out := make([]Ranked[K], 0, len(order))
	for _, key := range order {
		out = append(out, Ranked[K]{Key: key, Score: m[key].score * norm})
	}
	slices.SortFunc(out, func(a, b Ranked[K]) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := cmp.Compare(m[a.Key].best, m[b.Key].best); c != 0 {
			return c
		}
		return tie(a.Key, b.Key)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// NormalizeRRF converts a raw RRF score over n lists (as a server computes it) to the normalised scale of
// RRFFuse.
func NormalizeRRF(raw float64, n int) float64 {
	return raw * float64(RRFK) / float64(max(1, n))
}
