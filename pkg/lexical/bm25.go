package lexical

import (
	"math"
	"slices"
)

// TermID maps a term to the uint32 index of its dimension in a sparse vector
// (Qdrant sparse vectors take uint32 indices): FNV-1a 32 of the term's UTF-8
// bytes. It is stable across processes, versions and machines — indexed
// vectors depend on it, so it must never change.
//
// Collisions: with V distinct terms hashed into 2^32 ids, about V²/2^33 pairs
// collide (≈116 pairs for a 1M-term vocabulary, ≈1.2 for 100k), and a given
// term shares its id with another with probability ≈ V/2^32 (0.02% at 1M).
// A collision merges two terms' postings: a query for one also scores
// documents holding the other, with the IDF of the pair. That is accepted as
// noise well below what stemming itself conflates; vocabularies of tens of
// millions of terms would need a wider id.
func TermID(term string) uint32 {
	h := uint32(offset32)
	for i := 0; i < len(term); i++ {
		h ^= uint32(term[i])
		h *= prime32
	}
	return h
}

// BM25 holds the Okapi BM25 parameters, so that every index computes the
// score the same way:
//
//	score(q, d) = Σ_{t ∈ q} IDF(t) · TF(tf(t,d), |d|, avgdl)
//
// K1 controls term-frequency saturation, B the document-length
// normalisation (0: none, 1: full). The zero value BM25{} means the defaults,
// DefaultBM25 (K1 = 1.2, B = 0.75); otherwise both fields are used as given
// (K1 < 0 is taken as 0, B is clamped to [0, 1]).
type BM25 struct{ K1, B float64 }

// DefaultBM25 is K1 = 1.2, B = 0.75 (Lucene's and Qdrant's defaults).
var DefaultBM25 = BM25{K1: 1.2, B: 0.75}

func (p BM25) params() (k1, b float64) {
	if p.K1 == 0 && p.B == 0 {
		return DefaultBM25.K1, DefaultBM25.B
	}
	return max(p.K1, 0), min(max(p.B, 0), 1)
}

// TF is BM25's saturated term-frequency component for a term occurring tf
// times in a document of docLen terms (TermFreqs' length) when documents
// average avgDocLen terms:
//
//	tf·(k1+1) / (tf + k1·(1 − b + b·docLen/avgDocLen))
//
// It is 0 when tf is 0 and tends to k1+1 as tf grows. With avgDocLen ≤ 0
// (unknown) no length normalisation is applied (docLen/avgDocLen taken as 1).
// Document sparse vectors store this value per term; Qdrant's IDF modifier
// (or IDF here) supplies the other factor.
func (p BM25) TF(tf uint32, docLen int, avgDocLen float64) float32 {
	if tf == 0 {
		return 0
	}
	k1, b := p.params()
	ratio := 1.0
	if avgDocLen > 0 {
		ratio = float64(max(docLen, 0)) / avgDocLen
	}
	f := float64(tf)
	return float32(f * (k1 + 1) / (f + k1*(1-b+b*ratio)))
}

// IDF is BM25's inverse document frequency of a term found in docsWithTerm
// of totalDocs documents:
//
//	ln(1 + (N − n + 0.5) / (n + 0.5))
//
// the form Lucene and Qdrant's IDF modifier use, which is never negative
// (unlike the classic ln((N − n + 0.5)/(n + 0.5))). n is clamped to [0, N] and
// negative N is taken as 0.
func IDF(docsWithTerm, totalDocs int64) float32 {
	N := max(totalDocs, 0)
	n := min(max(docsWithTerm, 0), N)
	return float32(math.Log1p((float64(N-n) + 0.5) / (float64(n) + 0.5)))
}

// DocVector turns a document's term frequencies (from TermFreqs) into a
// sparse vector: indices are TermIDs in increasing order, values the TF
// component for each. Terms whose ids collide are merged (their counts
// added) before saturation, so indices are unique, as Qdrant requires.
func (p BM25) DocVector(tf map[string]uint32, docLen int, avgDocLen float64) (indices []uint32, values []float32) {
	counts := make(map[uint32]uint32, len(tf))
	for term, c := range tf {
		counts[TermID(term)] += c
	}
	indices = make([]uint32, 0, len(counts))
	for id := range counts {
		indices = append(indices, id)
	}
	slices.Sort(indices)
	values = make([]float32, len(indices))
	for i, id := range indices {
		values[i] = p.TF(counts[id], docLen, avgDocLen)
	}
	return indices, values
}
