package vectorstores

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/telemetry"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/query"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

type searchRequest struct {
	Query          json.RawMessage `json:"query"`
	Filters        json.RawMessage `json:"filters"`
	MaxNumResults  *int            `json:"max_num_results"`
	RankingOptions *RankingOptions `json:"ranking_options"`
	RewriteQuery   bool            `json:"rewrite_query"`
}

// RankingOptions is OpenAI's ranking_options of vector store search and the
// file_search tool: ranker, score_threshold and hybrid_search (embedding and
// text weights; aiforge adds the fusion method and RRF's k).
type RankingOptions struct {
	Ranker         string              `json:"ranker"`
	ScoreThreshold *float64            `json:"score_threshold"`
	HybridSearch   *query.HybridSearch `json:"hybrid_search"`
}

// Ranking is what a search takes from ranking_options.
type Ranking struct {
	ScoreThreshold float64
	HybridSearch   *query.HybridSearch
}

// Ranking validates o (param is where it sits in the request, for errors)
// and returns what the search takes; nil options are the defaults.
func (o *RankingOptions) Ranking(param string) (Ranking, *contracts.Error) {
	if o == nil {
		return Ranking{}, nil
	}
	var r Ranking
	if o.ScoreThreshold != nil {
		r.ScoreThreshold = *o.ScoreThreshold
	}
	if field, err := o.HybridSearch.Validate(); err != nil {
		return r, contracts.ErrBadRequest(param+".hybrid_search."+field, contracts.CodeInvalidRequest, "Invalid '"+param+".hybrid_search."+field+"': "+err.Error()+".")
	}
	r.HybridSearch = o.HybridSearch
	return r, nil
}

// Result is one search result in OpenAI's shape.
type Result struct {
	FileID     string           `json:"file_id"`
	Filename   string           `json:"filename"`
	Score      float64          `json:"score"`
	Attributes map[string]any   `json:"attributes"`
	Content    []map[string]any `json:"content"`
	// Pages are the chunk's pages; PageSpans, when known, where each
	// page's text lies in Text (vectorstore.SplitPages), for citations
	// narrowed to the sentences they cite.
	Pages     []int                  `json:"-"`
	PageSpans []vectorstore.PageSpan `json:"-"`
}

// Text is the result's text.
func (r Result) Text() any { return r.Content[0]["text"] }

// Search searches the stores storeIDs of tenant; a store that does not
// exist answers 404.
func (s *Service) Search(ctx context.Context, tenant string, storeIDs, queries []string, filters json.RawMessage, limit int, ranking Ranking) ([]Result, *contracts.Error) {
	stores := make([]VectorStore, 0, len(storeIDs))
	for _, id := range storeIDs {
		notFound := &contracts.Error{Status: http.StatusNotFound, Type: contracts.TypeInvalidRequest, Code: contracts.CodeNotFound,
			Message: fmt.Sprintf("No such vector store: %s", id)}
		if !vectorstore.ValidID("vs_", id) {
			return nil, notFound
		}
		vs, _, err := kv.Get[VectorStore](ctx, s.d.StoresKV, vectorstore.StoreKey(tenant, id))
		if errors.Is(err, kv.ErrNotFound) {
			return nil, notFound
		}
		if err != nil {
			s.log.Error("load vector store", "vector_store_id", id, "err", err)
			return nil, httpapi.StoreError(ctx, err, "vector store", "The vector store could not be read.")
		}
		stores = append(stores, vs)
	}
	return s.searchStores(ctx, tenant, stores, queries, filters, limit, ranking)
}

// searchStores asks the retriever and returns OpenAI-shaped results; pages
// and heading paths (aiforge's additions) ride in the attributes.
func (s *Service) searchStores(ctx context.Context, tenant string, stores []VectorStore, queries []string, filters json.RawMessage, limit int, ranking Ranking) ([]Result, *contracts.Error) {
	ids := make([]string, len(stores))
	model := ""
	for i, vs := range stores {
		ids[i] = vs.ID
		if vs.EmbeddingModel != "" {
			model = vs.EmbeddingModel
		}
	}
	hybrid := ranking.HybridSearch
	if hybrid == nil && model != "" {
		// The embedding model's binding may say how far to trust it (an
		// operator's knowledge of the model; registry.Model.HybridSearch).
		if m, ok := s.d.Directory.Served(model); ok {
			hybrid = m.HybridSearch
		}
	}
	req := query.SearchRequest{Tenant: tenant, StoreIDs: ids, Queries: queries, Limit: limit, ScoreThreshold: ranking.ScoreThreshold,
		EmbeddingModel: model, HybridSearch: hybrid}
	if len(filters) > 0 && string(filters) != "null" {
		req.Filter = filters
	}
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m := nats.NewMsg(events.RetrieverQuery)
	m.Data = body
	telemetry.Propagator.Inject(ctx, telemetry.NATSCarrier(m.Header))
	msg, err := s.d.NC.RequestMsgWithContext(ctx, m)
	if err != nil {
		why := "did not answer in time"
		if errors.Is(err, nats.ErrNoResponders) {
			why = "is not running"
		}
		return nil, contracts.ErrServiceUnavailable("retriever", why)
	}
	var reply query.SearchReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return nil, contracts.ErrInternal("The retriever answered badly.")
	}
	if reply.Error != nil {
		if reply.Error.Status == http.StatusBadRequest {
			return nil, contracts.ErrBadRequest(reply.Error.Param, contracts.CodeInvalidRequest, reply.Error.Message)
		}
		return nil, contracts.ErrEngine(reply.Error.Message)
	}
	names := map[string]string{}
	out := make([]Result, 0, len(reply.Hits))
	for _, h := range reply.Hits {
		name, ok := names[h.FileID]
		if !ok {
			// A file deleted since it was indexed has no name.
			if f, err := s.d.FileAPI.Load(ctx, tenant, h.FileID); err == nil {
				name = f.Filename
			} else if !errors.Is(err, kv.ErrNotFound) {
				s.log.Warn("load file of a search result", "file_id", h.FileID, "err", err)
			}
			names[h.FileID] = name
		}
		attrs := map[string]any{}
		for k, v := range h.Attributes {
			attrs[k] = v
		}
		if len(h.Pages) > 0 {
			// Attribute values are strings, numbers or booleans: the first
			// page as a number, every page as a comma-separated string.
			attrs["page"] = h.Pages[0]
			if len(h.Pages) > 1 {
				ps := make([]string, len(h.Pages))
				for i, p := range h.Pages {
					ps[i] = strconv.Itoa(p)
				}
				attrs["pages"] = strings.Join(ps, ",")
			}
		}
		if len(h.HeadingPath) > 0 {
			attrs["heading_path"] = strings.Join(h.HeadingPath, " > ")
		}
		text, spans := vectorstore.SplitPages(h.Text, h.Pages)
		out = append(out, Result{FileID: h.FileID, Filename: name, Score: h.Score, Attributes: attrs,
			Content: []map[string]any{{"type": "text", "text": text}}, Pages: h.Pages, PageSpans: spans})
	}
	return out, nil
}

func (s *Service) searchVectorStore(w http.ResponseWriter, r *http.Request, k *registry.Key) {
	vs, ok := s.loadStore(w, r, k)
	if !ok {
		return
	}
	var req searchRequest
	if !httpapi.Decode(w, r, &req) {
		return
	}
	var queries []string
	var one string
	if json.Unmarshal(req.Query, &one) == nil && one != "" {
		queries = []string{one}
	} else if json.Unmarshal(req.Query, &queries) != nil || len(queries) == 0 {
		contracts.Write(w, contracts.ErrBadRequest("query", contracts.CodeMissingParam, "Missing required parameter: 'query' (a string or an array of strings)."))
		return
	}
	limit := 10
	if req.MaxNumResults != nil {
		if *req.MaxNumResults < 1 || *req.MaxNumResults > 50 {
			contracts.Write(w, contracts.ErrBadRequest("max_num_results", contracts.CodeInvalidRequest, "Invalid 'max_num_results': expected 1 to 50."))
			return
		}
		limit = *req.MaxNumResults
	}
	ranking, e := req.RankingOptions.Ranking("ranking_options")
	if e != nil {
		contracts.Write(w, e)
		return
	}
	ranker := ""
	if ro := req.RankingOptions; ro != nil {
		if ranker, e = s.Ranker(k, ro.Ranker, "ranking_options.ranker"); e != nil {
			contracts.Write(w, e)
			return
		}
	}
	var results []Result
	if ranker == "" {
		results, e = s.searchStores(r.Context(), k.Tenant, []VectorStore{vs}, queries, req.Filters, limit, ranking)
	} else {
		// The threshold applies to the rerank scores, not to the
		// candidates'.
		first := ranking
		first.ScoreThreshold = 0
		if results, e = s.searchStores(r.Context(), k.Tenant, []VectorStore{vs}, queries, req.Filters, RerankCandidates(limit), first); e == nil {
			results, e = s.Rerank(r.Context(), k, ranker, queries, results, limit, ranking.ScoreThreshold)
		}
	}
	if e != nil {
		contracts.Write(w, e)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "vector_store.search_results.page", "search_query": queries,
		"data": results, "has_more": false, "next_page": nil})
}

// FilesBatch is OpenAI's vector store file batch object.
