package worker

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/rerank"
	"github.com/aiforge/aiforge/pkg/tokens"
)

const rerankBody = `{"model":"rr","query":"pairing the wireless headset","documents":["billing and invoices","pair the wireless headset in settings","the headset battery"],"top_n":2}`

func rerankOf(t *testing.T, frames [][]byte) rerank.Response {
	t.Helper()
	r, err := rerank.Parse(slices.Concat(frames...), 3)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The /v1 protocol (vLLM, Jina, Cohere style) against the simulator: the
// engine gets its model name, the documents and top_n; the answer is by
// descending score with the engine's token count, which the usage event
// carries (not estimated).
func TestRerankV1Protocol(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up-rr"}})
	cfg := modelFor("rr", "up-rr", base)
	cfg.Kind = registry.ModelKindRerank
	h.startWorker(cfg)

	req := newReq("rr", events.EndpointRerank, false, false, rerankBody)
	frames, res, err := h.do(testCtx(t), req)
	if err != nil || res.Status != http.StatusOK {
		t.Fatalf("rerank: %+v %v", res, err)
	}
	got := rerankOf(t, frames)
	if got.Model != "rr" || len(got.Results) != 2 || got.Results[0].Index != 1 || got.Results[1].Index != 2 {
		t.Fatalf("answer %+v", got)
	}
	docs := []string{"billing and invoices", "pair the wireless headset in settings", "the headset battery"}
	if want := enginesim.RerankScore("pairing the wireless headset", docs[1]); got.Results[0].RelevanceScore != want {
		t.Errorf("score %v, want %v", got.Results[0].RelevanceScore, want)
	}
	var sent map[string]any
	if err := json.Unmarshal(sim.LastBody(), &sent); err != nil || sent["model"] != "up-rr" || sent["top_n"] != float64(2) || len(sent["documents"].([]any)) != 3 {
		t.Fatalf("engine got %s", sim.LastBody())
	}
	// The simulator counts words: the query (4) once per document, and the documents (3+6+3).
	const engineTokens = 3*4 + 3 + 6 + 3
	if got.Usage.PromptTokens != engineTokens || got.Usage.Estimated {
		t.Errorf("usage %+v, want %d from the engine", got.Usage, engineTokens)
	}
	ev, _ := h.usageEvent(req.Tenant)
	if ev.Endpoint != events.EndpointRerank || ev.PromptTokens != engineTokens || ev.CompletionTokens != 0 || ev.Estimated || ev.Status != events.UsageStatusOK {
		t.Errorf("usage event %+v", ev)
	}
}

// The TEI protocol against a TEI-shaped engine: POST /rerank at the root
// with query and texts, the identity from GET /info; its unsorted answer
// is sorted and cut to top_n, and its missing token count estimated.
func TestRerankTEIProtocol(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	var got []byte
	tei := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/info":
			_, _ = w.Write([]byte(`{"model_id":"BAAI/bge-reranker-base","max_input_length":512}`))
		case r.Method == http.MethodPost && r.URL.Path == "/rerank":
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got = b
			mu.Unlock()
			_, _ = w.Write([]byte(`[{"index":0,"score":0.1},{"index":2,"score":0.9},{"index":1,"score":0.5}]`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(tei.Close)
	cfg := modelFor("rr", "BAAI/bge-reranker-base", tei.URL+"/v1")
	cfg.Kind = registry.ModelKindRerank
	cfg.Engine.RerankAPI = registry.RerankAPITEI
	h.startWorker(cfg)

	// On the rerank family, as the edge's search stage sends it.
	rc, err := rerank.NewClient(h.edge, bridge.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	call := rerank.Call{Request: rerank.Request{Model: "rr", Query: "pairing the wireless headset",
		Documents: []string{"billing and invoices", "pair the wireless headset in settings", "the headset battery"}, TopN: 2}, Tenant: "teitenant", KeyID: "key_t"}
	resp, err := rerank.Rerank(testCtx(t), rc, call)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != 2 || resp.Results[0].Index != 2 || resp.Results[0].RelevanceScore != 0.9 || resp.Results[1].Index != 1 {
		t.Fatalf("answer %+v", resp)
	}
	mu.Lock()
	var sent map[string]any
	_ = json.Unmarshal(got, &sent)
	mu.Unlock()
	if sent["query"] != "pairing the wireless headset" || len(sent["texts"].([]any)) != 3 || sent["model"] != nil {
		t.Fatalf("engine got %v", sent)
	}
	body, _ := json.Marshal(call.Request)
	want := tokens.EstimatePrompt(events.EndpointRerank, body)
	if want <= 0 || resp.Usage.PromptTokens != want || !resp.Usage.Estimated {
		t.Errorf("usage %+v, want %d estimated", resp.Usage, want)
	}
	ev, _ := h.usageEvent("teitenant")
	if ev.Endpoint != events.EndpointRerank || ev.PromptTokens != want || !ev.Estimated {
		t.Errorf("usage event %+v", ev)
	}

	// The rerank family serves rerank only.
	_, err = rc.Do(testCtx(t), newReq("rr", events.EndpointChatCompletions, false, false, `{"messages":[]}`), func([]byte) error { return nil })
	if be, ok := err.(*bridge.Error); !ok || be.Code != contracts.CodeEndpointNotAllowed {
		t.Errorf("chat on the rerank family: %v", err)
	}
}

// A reranker serves nothing but rerank; rerank is served by rerankers only.
func TestRerankKindRefusals(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up-rr", "up-chat"}})
	cfg := modelFor("rr", "up-rr", base)
	cfg.Kind = registry.ModelKindRerank
	h.startWorker(cfg)
	h.startWorker(modelFor("chat", "up-chat", base))

	_, _, err := h.do(testCtx(t), newReq("rr", events.EndpointChatCompletions, false, false, longPrompt))
	if _, e := apiError(t, err); e.Status != http.StatusBadRequest || !strings.Contains(e.Message, "rerank model") {
		t.Errorf("chat to a reranker: %+v", e)
	}
	_, _, err = h.do(testCtx(t), newReq("chat", events.EndpointRerank, false, false, rerankBody))
	if _, e := apiError(t, err); e.Status != http.StatusBadRequest || !strings.Contains(e.Message, "not a rerank model") {
		t.Errorf("rerank to a chat model: %+v", e)
	}
	// Out-of-bounds input is refused by the worker before the engine.
	_, _, err = h.do(testCtx(t), newReq("rr", events.EndpointRerank, false, false, `{"query":"q","documents":[]}`))
	if _, e := apiError(t, err); e.Status != http.StatusBadRequest {
		t.Errorf("no documents: %+v", e)
	}
}
