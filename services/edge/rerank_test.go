package edge_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/rerank"
)

// rerankEdge is an edge with a rerank model "rr" whose fake worker scores
// document i as i (so the last document ranks first) and reports 7 tokens
// per document, and a chat model "chat".
type rerankEdge struct {
	*harness
	mu  sync.Mutex
	got []*bridge.Request
}

func startRerankEdge(t *testing.T) *rerankEdge {
	h := startEdge(t, nil)
	e := &rerankEdge{harness: h}
	r := h.admin("POST", "/admin/v1/models", map[string]any{"name": "rr", "kind": "rerank",
		"engine": map[string]any{"base_url": "http://127.0.0.1:1/v1", "model": "up-rr", "rerank_api": "tei"}})
	if r.status != http.StatusCreated {
		t.Fatalf("register rr: %d %s", r.status, r.body)
	}
	if m := h.admin("GET", "/admin/v1/models/rr", nil).json(t); m["kind"] != "rerank" {
		t.Fatalf("binding %v", m)
	}
	h.registerModel("chat")
	h.worker("rr", "w1", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		e.mu.Lock()
		e.got = append(e.got, req)
		e.mu.Unlock()
		var in rerank.Request
		_ = json.Unmarshal(req.Body, &in)
		out := rerank.Response{Object: rerank.ObjectRerank, Model: "rr"}
		for i := len(in.Documents) - 1; i >= 0; i-- {
			out.Results = append(out.Results, rerank.Result{Index: i, RelevanceScore: float64(i)})
		}
		if in.TopN > 0 {
			out.Results = out.Results[:in.TopN]
		}
		n := int64(7 * len(in.Documents))
		out.Usage = rerank.Usage{PromptTokens: n, TotalTokens: n}
		b, _ := json.Marshal(out)
		_ = w.Body(ctx, http.StatusOK, "application/json", b)
	})
	return e
}

func TestRerankEndpoint(t *testing.T) {
	e := startRerankEdge(t)
	key, keyID := e.tenantKey("acme")
	r := e.do("POST", "/v1/rerank", key, map[string]any{"model": "rr", "query": "headset",
		"documents": []any{"a plain string", map[string]string{"text": "an object"}, "third"}, "top_n": 2, "return_documents": true}, nil)
	if r.status != http.StatusOK {
		t.Fatalf("rerank: %d %s", r.status, r.body)
	}
	var got struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Results []struct {
			Index          int               `json:"index"`
			RelevanceScore float64           `json:"relevance_score"`
			Document       map[string]string `json:"document"`
		} `json:"results"`
		Usage struct {
			PromptTokens int64 `json:"prompt_tokens"`
			TotalTokens  int64 `json:"total_tokens"`
		} `json:"usage"`
		Meta struct {
			BilledUnits struct {
				SearchUnits int `json:"search_units"`
			} `json:"billed_units"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.ID, "req_") || got.ID != r.header.Get("X-Request-Id") || got.Object != "rerank" || got.Model != "rr" {
		t.Fatalf("answer %s", r.body)
	}
	if len(got.Results) != 2 || got.Results[0].Index != 2 || got.Results[0].Document["text"] != "third" ||
		got.Results[1].Index != 1 || got.Results[1].Document["text"] != "an object" || got.Results[1].RelevanceScore != 1 {
		t.Fatalf("results %s", r.body)
	}
	if got.Usage.TotalTokens != 21 || got.Usage.PromptTokens != 21 || got.Meta.BilledUnits.SearchUnits != 1 {
		t.Fatalf("usage %s", r.body)
	}
	// The worker got the canonical request, for the caller's key, on the
	// rerank endpoint.
	e.mu.Lock()
	req := e.got[len(e.got)-1]
	e.mu.Unlock()
	var in rerank.Request
	if err := json.Unmarshal(req.Body, &in); err != nil || req.Endpoint != events.EndpointRerank || req.Tenant != "acme" || req.KeyID != keyID ||
		in.Model != "rr" || in.TopN != 2 || len(in.Documents) != 3 || in.Documents[1] != "an object" {
		t.Fatalf("worker got %s %s %+v", req.Endpoint, req.Body, in)
	}
	// Without return_documents, no documents come back.
	r = e.do("POST", "/v1/rerank", key, map[string]any{"model": "rr", "query": "q", "documents": []string{"x", "y"}}, nil)
	if r.status != http.StatusOK || strings.Contains(string(r.body), `"document"`) || !strings.Contains(string(r.body), `"index":1`) {
		t.Fatalf("plain rerank: %d %s", r.status, r.body)
	}
}

func TestRerankValidation(t *testing.T) {
	e := startRerankEdge(t)
	key, _ := e.tenantKey("acme")
	many := make([]string, rerank.MaxDocuments+1)
	for i := range many {
		many[i] = "d"
	}
	big := strings.Repeat("x", rerank.MaxBytes/2+1)
	for _, c := range []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"no model", map[string]any{"query": "q", "documents": []string{"a"}}, 400, "missing_required_parameter"},
		{"no query", map[string]any{"model": "rr", "documents": []string{"a"}}, 400, "missing_required_parameter"},
		{"empty query", map[string]any{"model": "rr", "query": "", "documents": []string{"a"}}, 400, "invalid_type"},
		{"no documents", map[string]any{"model": "rr", "query": "q"}, 400, "missing_required_parameter"},
		{"empty documents", map[string]any{"model": "rr", "query": "q", "documents": []string{}}, 400, "invalid_request"},
		{"bad document", map[string]any{"model": "rr", "query": "q", "documents": []any{1}}, 400, "invalid_type"},
		{"too many", map[string]any{"model": "rr", "query": "q", "documents": many}, 400, "too_many_documents"},
		{"too large", map[string]any{"model": "rr", "query": "q", "documents": []string{big, big}}, 400, "too_many_documents"},
		{"top_n 0", map[string]any{"model": "rr", "query": "q", "documents": []string{"a"}, "top_n": 0}, 400, "invalid_value"},
		{"not json", "{", 400, "invalid_json"},
		{"unknown model", map[string]any{"model": "nope", "query": "q", "documents": []string{"a"}}, 404, "model_not_found"},
		{"chat model", map[string]any{"model": "chat", "query": "q", "documents": []string{"a"}}, 400, "model_kind_mismatch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			apiError(t, e.do("POST", "/v1/rerank", key, c.body, nil), c.status, c.code)
		})
	}
	// A rerank model serves nothing else.
	apiError(t, e.do("POST", "/v1/chat/completions", key, chatBody("rr", false), nil), 400, "model_kind_mismatch")
	apiError(t, e.do("POST", "/v1/rerank", "sk-nope", map[string]any{"model": "rr", "query": "q", "documents": []string{"a"}}, nil), 401, "invalid_api_key")
	// A key not allowed the model is refused.
	other, _ := e.tenantKey("acme", "chat")
	apiError(t, e.do("POST", "/v1/rerank", other, map[string]any{"model": "rr", "query": "q", "documents": []string{"a"}}, nil), 403, "model_not_allowed")
	// A bad registration is refused.
	r := e.admin("POST", "/admin/v1/models", map[string]any{"name": "x", "kind": "reranker", "engine": map[string]any{"base_url": "http://h/v1", "model": "m"}})
	if r.status != 400 {
		t.Errorf("kind reranker: %d %s", r.status, r.body)
	}
	r = e.admin("POST", "/admin/v1/models", map[string]any{"name": "x", "engine": map[string]any{"base_url": "http://h/v1", "model": "m", "rerank_api": "tei"}})
	if r.status != 400 {
		t.Errorf("rerank_api on a chat model: %d %s", r.status, r.body)
	}
}
