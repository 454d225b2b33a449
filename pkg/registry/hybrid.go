package registry

import (
	"errors"
	"fmt"
	"math"
)

// HybridSearch is OpenAI's ranking_options.hybrid_search (embedding_weight,
// text_weight) with aiforge's extensions: the fusion method and RRF's k.
type HybridSearch struct {
	EmbeddingWeight float64 `json:"embedding_weight"`
	TextWeight      float64 `json:"text_weight"`
	// Fusion is "agreement" (the default: each list's scores as z-scores,
	// the embedding list weighted by its agreement with the keyword list's
	// best 10), "zscore" (the same z-scores weighted as given, for an
	// embedding model known to be strong), "rrf" (weighted Reciprocal Rank
	// Fusion) or "weighted" (weighted sum of normalised scores: cosine as
	// is, BM25 divided by the query's best).
	Fusion string `json:"fusion,omitempty"`
	// RRFK is RRF's k (1-10000); 0 means 60.
	RRFK int `json:"rrf_k,omitempty"`
}

// Fusion methods of HybridSearch.
const (
	FusionAgreement = "agreement"
	FusionZScore    = "zscore"
	FusionRRF       = "rrf"
	FusionWeighted  = "weighted"
)

// Validate checks h's values; the error names the offending field.
func (h *HybridSearch) Validate() (field string, err error) {
	if h == nil {
		return "", nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"embedding_weight", h.EmbeddingWeight}, {"text_weight", h.TextWeight}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || f.v > 1e6 {
			return f.name, fmt.Errorf("%s must be a number from 0 to 1000000", f.name)
		}
	}
	switch h.Fusion {
	case "", FusionAgreement, FusionZScore, FusionRRF, FusionWeighted:
	default:
		return "fusion", fmt.Errorf("fusion must be %q, %q, %q or %q", FusionAgreement, FusionZScore, FusionRRF, FusionWeighted)
	}
	if h.RRFK < 0 || h.RRFK > 10000 {
		return "rrf_k", errors.New("rrf_k must be from 1 to 10000")
	}
	return "", nil
}
