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
	return FuseWeights(lists, nil, nil, Fusion{Method: FusionRRF}, limit, tie)
}

// AgreementDepth is how many of the best candidates of two lists FusionAgreement compares.
const AgreementDepth = 10

// FuseWeights fuses ranked lists (each best first) as f says, with weights[i] the weight of lists[i]:
//
//   - FusionAgreement: score = Σ_i w_i·z_i / Σ w_i, where z_i is the candidate's z-score within list i
//     ((score − mean) / standard deviation over the list's candidates), negatives clipped to 0 so that only
//     above-average candidates count, and divided by √(n−1), the largest z-score a list of n can hold, to stay
//     on [0, 1]. A list marked absolute (the dense list) has its weight multiplied by its agreement with the
//     first unmarked (sparse) list: the share of their best AgreementDepth candidates they have in common.
//     The z-score puts both lists on one scale whatever their units (Montague & Aslam, "Relevance score
//     normalization for metasearch", 2001); the agreement is a per-query estimate of the dense list's
//     reliability: a model whose best candidates share nothing with the chunks that hold the query's words is
//     not trusted for that query (its list then counts for nothing), while one that finds the same passages
//     and more reorders and extends them. When either list is empty, the other counts alone.
//   - FusionZScore: the same z-scores, weighted as given, without the agreement factor (CombSUM over z-scores):
//     for an embedding model known to be stronger than keyword search, whose best candidates should count
//     most where the keyword list finds nothing like them;
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
	ws := make([]float64, len(lists))
	for i := range lists {
		ws[i] = 1
		if i < len(weights) {
			ws[i] = max(weights[i], 0)
		}
	}
	method := f.Method
	if method == "" {
		method = FusionAgreement
	}
	if method == FusionAgreement {
		ref := -1
		for i, l := range lists {
			if ws[i] > 0 && len(l) > 0 && !(i < len(absolute) && absolute[i]) {
				ref = i
				break
			}
		}
		for i, l := range lists {
			if ref >= 0 && i != ref && ws[i] > 0 && len(l) > 0 && i < len(absolute) && absolute[i] {
				ws[i] *= Agreement(l, lists[ref], AgreementDepth)
			}
		}
	}
	m := make(map[K]*acc)
	var order []K
	var wsum float64
	for i, l := range lists {
		w := ws[i]
		if w <= 0 {
			continue
		}
		zscore := method == FusionAgreement || method == FusionZScore
		if !zscore || len(l) > 0 {
			// An empty list still counts for RRF and weighted: "first in every list" is what scores 1.
			wsum += w
		}
		if len(l) == 0 {
			continue
		}
		abs := i < len(absolute) && absolute[i]
		hi := l[0].Score
		for _, c := range l {
			hi = max(hi, c.Score)
		}
		var mean, sd float64
		if zscore {
			mean, sd = meanSD(l)
		}
		for p, c := range l {
			a := m[c.Key]
			if a == nil {
				a = &acc{best: p}
				m[c.Key] = a
				order = append(order, c.Key)
			}
			switch method {
			case FusionAgreement, FusionZScore:
				if sd > 0 {
					a.score += w * max(c.Score-mean, 0) / sd / math.Sqrt(float64(len(l)-1))
				}
			case FusionWeighted:
				var norm float64
				switch {
				case abs:
					norm = min(max(c.Score, 0), 1)
				case hi > 0:
					norm = max(c.Score, 0) / hi
				}
				a.score += w * norm
			default:
				a.score += w / (k + float64(p))
			}
			a.best = min(a.best, p)
		}
	}
	norm := 0.0
	if wsum > 0 {
		norm = 1 / wsum
		if method == FusionRRF {
			norm = k / wsum
		}
	}
	out := make([]Ranked[K], 0, len(order))
	for _, key := range order {
		sc := m[key].score * norm
		if method == FusionAgreement || method == FusionZScore {
			sc = min(sc, 1) // rounding
		}
		out = append(out, Ranked[K]{Key: key, Score: sc})
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

// Agreement is the share of the best depth candidates of a and b that they have in common, over the shorter
// of the two cuts (in [0, 1]; 0 when either is empty).
func Agreement[K comparable](a, b []Ranked[K], depth int) float64 {
	n := min(depth, len(a), len(b))
	if n <= 0 {
		return 0
	}
	in := make(map[K]bool, n)
	for _, c := range b[:min(depth, len(b))] {
		in[c.Key] = true
	}
	common := 0
	for _, c := range a[:min(depth, len(a))] {
		if in[c.Key] {
			common++
		}
	}
	return min(float64(common)/float64(n), 1)
}

// meanSD is the mean and the (population) standard deviation of a list's scores.
func meanSD[K comparable](l []Ranked[K]) (mean, sd float64) {
	for _, c := range l {
		mean += c.Score
	}
	mean /= float64(len(l))
	for _, c := range l {
		d := c.Score - mean
		sd += d * d
	}
	return mean, math.Sqrt(sd / float64(len(l)))
}

// NormalizeRRF converts a raw RRF score over n lists (as a server computes it) to the normalised scale of
// RRFFuse.
func NormalizeRRF(raw float64, n int) float64 {
	return raw * float64(RRFK) / float64(max(1, n))
}
