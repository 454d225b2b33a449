package edge_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/query"
)

// An embedding model's binding may carry hybrid_search: the fusion a
// search of the stores it embeds uses when the request gives none. The
// request's own ranking_options.hybrid_search still wins.
func TestEmbeddingModelHybridDefault(t *testing.T) {
	h := startModelEdge(t)
	strong := map[string]any{"fusion": "zscore", "embedding_weight": 1.5, "text_weight": 1}
	h.registerBinding("embed-strong", map[string]any{"hybrid_search": strong})
	h.registerModel("embed-plain")
	got := h.admin("GET", "/admin/v1/models/embed-strong", nil)
	if got.status != http.StatusOK {
		t.Fatalf("get binding: %d %s", got.status, got.body)
	}
	if hs, _ := got.json(t)["hybrid_search"].(map[string]any); hs["fusion"] != "zscore" || hs["embedding_weight"] != 1.5 {
		t.Fatalf("binding's hybrid_search: %s", got.body)
	}
	apiError(t, h.admin("POST", "/admin/v1/models", map[string]any{"name": "bad", "engine": map[string]any{"base_url": "http://127.0.0.1:1/v1", "model": "u"},
		"hybrid_search": map[string]any{"fusion": "max", "embedding_weight": 1, "text_weight": 1}}), http.StatusBadRequest, "invalid_request")

	// A retriever that records what it is asked and finds nothing.
	asked := make(chan query.SearchRequest, 8)
	sub, err := h.nc.Subscribe(events.RetrieverQuery, func(m *nats.Msg) {
		var req query.SearchRequest
		_ = json.Unmarshal(m.Data, &req)
		asked <- req
		b, _ := json.Marshal(query.SearchReply{Hits: []query.SearchHit{}})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	secret, _ := h.tenantKey("acme")
	store := func(model string) string {
		r := h.do("POST", "/v1/vector_stores", secret, map[string]any{"name": "docs", "embedding_model": model}, nil)
		if r.status != http.StatusOK {
			t.Fatalf("create store: %d %s", r.status, r.body)
		}
		return r.json(t)["id"].(string)
	}
	search := func(id string, body map[string]any) *query.HybridSearch {
		t.Helper()
		if r := h.do("POST", "/v1/vector_stores/"+id+"/search", secret, body, nil); r.status != http.StatusOK {
			t.Fatalf("search: %d %s", r.status, r.body)
		}
		return (<-asked).HybridSearch
	}
	want := &query.HybridSearch{Fusion: query.FusionZScore, EmbeddingWeight: 1.5, TextWeight: 1}
	strongStore, plainStore := store("embed-strong"), store("embed-plain")
	if hs := search(strongStore, map[string]any{"query": "q"}); !reflect.DeepEqual(hs, want) {
		t.Fatalf("the model's default: %+v, want %+v", hs, want)
	}
	own := map[string]any{"fusion": "rrf", "embedding_weight": 1, "text_weight": 2}
	if hs := search(strongStore, map[string]any{"query": "q", "ranking_options": map[string]any{"hybrid_search": own}}); hs == nil || hs.Fusion != query.FusionRRF || hs.TextWeight != 2 {
		t.Fatalf("the request's own: %+v", hs)
	}
	if hs := search(plainStore, map[string]any{"query": "q"}); hs != nil {
		t.Fatalf("a model without a default: %+v, want none (the retriever's default fusion)", hs)
	}
}
