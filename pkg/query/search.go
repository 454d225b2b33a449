package query

import (
	"encoding/json"

	"github.com/aiforge/aiforge/pkg/registry"
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
	// fusion (agreement, the embedding list at index.AgreementDenseWeight).
	HybridSearch *HybridSearch `json:"hybrid_search,omitempty"`
}

// HybridSearch is OpenAI's ranking_options.hybrid_search with aiforge's
// extensions. It is defined in package registry, where an embedding model's
// binding carries its default (registry.Model.HybridSearch).
type HybridSearch = registry.HybridSearch

// Fusion methods of HybridSearch.
const (
	FusionAgreement = registry.FusionAgreement
	FusionZScore    = registry.FusionZScore
	FusionRRF       = registry.FusionRRF
	FusionWeighted  = registry.FusionWeighted
)

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
