package query

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// SearchRequest is a query on events.RetrieverQuery.
type SearchRequest struct {
	Tenant   string   `json:"tenant"`
	StoreIDs []string `json:"vector_store_ids"`
	Queries  []string `json:"queries"`
	// Filter is OpenAI's file attribute filter (a comparison or compound
	// filter object), passed through as the client sent it; the retriever
	// validates it.
	Filter         json.RawMessage `json:"filter,omitempty"`
	Limit          int             `json:"limit"`
	ScoreThreshold float64         `json:"score_threshold"`
	Mode           string          `json:"mode,omitempty"`
	// EmbeddingModel embeds the queries for dense search; empty: keyword only.
	EmbeddingModel string `json:"embedding_model"`
	// HybridSearch is ranking_options.hybrid_search: how a query with both
	// an embedding and keywords fuses the two lists. nil: the default
	// fusion (agreement), equal weights.
	HybridSearch *HybridSearch `json:"hybrid_search,omitempty"`
}

// HybridSearch is OpenAI's ranking_options.hybrid_search (embedding_weight,
// text_weight) with aiforge's extensions: the fusion method and RRF's k.
type HybridSearch struct {
	EmbeddingWeight float64 `json:"embedding_weight"`
	TextWeight      float64 `json:"text_weight"`
	// Fusion is "agreement" (the default: each list's scores as z-scores,
	// the embedding list weighted by its agreement with the keyword list's
	// best 10), "rrf" (weighted Reciprocal Rank Fusion) or "weighted"
	// (weighted sum of normalised scores: cosine as is, BM25 divided by the
	// query's best).
	Fusion string `json:"fusion,omitempty"`
	// RRFK is RRF's k (1-10000); 0 means 60.
	RRFK int `json:"rrf_k,omitempty"`
}

// Fusion methods of HybridSearch.
const (
	FusionAgreement = "agreement"
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
	if h.Fusion != "" && h.Fusion != FusionAgreement && h.Fusion != FusionRRF && h.Fusion != FusionWeighted {
		return "fusion", fmt.Errorf("fusion must be %q, %q or %q", FusionAgreement, FusionRRF, FusionWeighted)
	}
	if h.RRFK < 0 || h.RRFK > 10000 {
		return "rrf_k", errors.New("rrf_k must be from 1 to 10000")
	}
	return "", nil
}

// SearchHit is one result.
type SearchHit struct {
	StoreID     string         `json:"vector_store_id"`
	FileID      string         `json:"file_id"`
	ChunkIndex  int            `json:"chunk_index"`
	Score       float64        `json:"score"`
	Text        string         `json:"text"`
	Pages       []int          `json:"pages,omitempty"`
	HeadingPath []string       `json:"heading_path,omitempty"`
	Attributes  map[string]any `json:"attributes,omitempty"`
}

// SearchReply answers a SearchRequest: hits, or an error.
type SearchReply struct {
	Hits  []SearchHit  `json:"hits"`
	Error *SearchError `json:"error,omitempty"`
}

// SearchError is a failed search: Status 400 for a bad request (Param
// names the field), anything else for a failure of the retriever.
type SearchError struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}
