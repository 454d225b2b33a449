package edge_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
)

// simWorker is a worker of model backed by the engine simulator: it
// counts the requests it saw and keeps the last one's bridge headers.
type simWorker struct {
	requests atomic.Int64
	last     atomic.Pointer[bridge.Request]
}

func (h *harness) simWorker(model string) *simWorker {
	h.t.Helper()
	sim := enginesim.New(enginesim.Config{Models: []string{model}, AnswerTokens: 6})
	sw := &simWorker{}
	h.worker(model, "w-"+model, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		sw.requests.Add(1)
		sw.last.Store(req)
		// The worker rewrites the model to the upstream name: here, model.
		var m map[string]any
		_ = json.Unmarshal(req.Body, &m)
		m["model"] = model
		body, _ := json.Marshal(m)
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "POST", "/v1/chat/completions", bytes.NewReader(body)))
		if !req.Stream {
			_ = w.Body(ctx, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes())
			return
		}
		sc := bufio.NewScanner(rec.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			if err := w.Data(ctx, []byte(data)); err != nil {
				return
			}
		}
		_ = w.End(http.StatusOK, "text/event-stream")
	})
	return sw
}

// usageEvents collects the v4 usage events published on the bus.
func (h *harness) usageEvents() func() []events.UsageRecordedV4 {
	h.t.Helper()
	var got []events.UsageRecordedV4
	ch := make(chan *nats.Msg, 64)
	sub, err := h.nc.ChanSubscribe("aiforge.usage.recorded.v4.>", ch)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []events.UsageRecordedV4 {
		for {
			select {
			case m := <-ch:
				var ev events.UsageRecordedV4
				if err := json.Unmarshal(m.Data, &ev); err != nil {
					h.t.Fatalf("usage event %s: %v", m.Data, err)
				}
				got = append(got, ev)
			default:
				return got
			}
		}
	}
}

func chatPrompt(model, prompt string, extra map[string]any) map[string]any {
	b := map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": prompt}}}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func (h *harness) putRouter(name string, body map[string]any) {
	h.t.Helper()
	if r := h.admin("PUT", "/admin/v1/routers/"+name, body); r.status != http.StatusCreated && r.status != http.StatusOK {
		h.t.Fatalf("put router: %d %s", r.status, r.body)
	}
}

// readSSE parses a whole SSE body into its data payloads (without [DONE])
// and reports whether it ended with [DONE].
func readSSE(t *testing.T, body []byte) ([]map[string]any, bool) {
	t.Helper()
	var out []map[string]any
	done := false
	for _, line := range strings.Split(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		out = append(out, m)
	}
	return out, done
}

func sseContent(t *testing.T, chunks []map[string]any) string {
	t.Helper()
	var b strings.Builder
	for _, c := range chunks {
		if c["object"] != "chat.completion.chunk" {
			t.Fatalf("chunk object %v", c["object"])
		}
		for _, ch := range c["choices"].([]any) {
			if s, ok := ch.(map[string]any)["delta"].(map[string]any)["content"].(string); ok {
				b.WriteString(s)
			}
		}
	}
	return b.String()
}

func TestRouterPicksClassByExamplesHeaderAndTool(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("coder")
	h.registerModel("thinker")
	coder, thinker := h.simWorker("coder"), h.simWorker("thinker")
	var toolCalls atomic.Int64
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		toolCalls.Add(1)
		var req map[string]any
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req["messages"] == nil {
			http.Error(w, "bad", 400)
			return
		}
		_, _ = w.Write([]byte(`{"content":"3 servers: web-1, web-2, db-1"}`))
	}))
	t.Cleanup(tool.Close)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`not json`)) }))
	t.Cleanup(broken.Close)

	// A router's name may not be a model's; classes are validated.
	apiError(t, h.admin("PUT", "/admin/v1/routers/coder", map[string]any{"classes": []map[string]any{{"name": "a", "model": "x", "examples": []string{"e"}}}, "default": "a"}), 400, "invalid_request")
	apiError(t, h.admin("PUT", "/admin/v1/routers/auto", map[string]any{"classes": []map[string]any{{"name": "a", "model": "x", "tool": map[string]string{"url": tool.URL}, "examples": []string{"e"}}}, "default": "a"}), 400, "invalid_request")
	apiError(t, h.admin("PUT", "/admin/v1/routers/auto", map[string]any{"classes": []map[string]any{{"name": "a", "model": "x", "examples": []string{}}}, "default": "a"}), 400, "invalid_request")
	apiError(t, h.admin("PUT", "/admin/v1/routers/auto", map[string]any{"classes": []map[string]any{{"name": "a", "model": "x", "examples": []string{"e"}}}, "default": "b"}), 400, "invalid_request")

	h.putRouter("auto", map[string]any{
		"default": "deep_reasoning", "threshold": 0.1,
		"classes": []map[string]any{
			{"name": "iac_devops", "model": "coder", "examples": []string{"write a terraform module for an s3 bucket", "helm chart for a kubernetes deployment", "ansible playbook to install nginx"}},
			{"name": "deep_reasoning", "model": "thinker", "examples": []string{"prove that the square root of two is irrational", "explain step by step why the sky is blue"}},
			{"name": "openstack_api", "tool": map[string]string{"url": tool.URL}, "examples": []string{"list my openstack servers", "show the nova flavors of my project"}},
			{"name": "broken", "tool": map[string]string{"url": broken.URL}, "examples": []string{"zzz"}},
		},
	})
	secret, _ := h.tenantKey("acme", "auto")
	usage := h.usageEvents()

	// /v1/models lists the router.
	if r := h.do("GET", "/v1/models", secret, nil, nil); !strings.Contains(r.String(), `"id":"auto"`) {
		t.Fatalf("/v1/models: %s", r.body)
	}

	// By examples: a terraform prompt goes to coder.
	r := h.do("POST", "/v1/chat/completions", secret, chatPrompt("auto", "Write a Terraform module for a VPC", nil), nil)
	if r.status != 200 || r.header.Get("X-Aiforge-Route-Class") != "iac_devops" || r.header.Get("X-Aiforge-Model-Served") != "coder" {
		t.Fatalf("by examples: %d %v %s", r.status, r.header, r.body)
	}
	if coder.requests.Load() != 1 || thinker.requests.Load() != 0 {
		t.Fatalf("coder %d, thinker %d", coder.requests.Load(), thinker.requests.Load())
	}
	if req := coder.last.Load(); req.Header.Get(bridge.HdrRouter) != "auto" || req.Header.Get(bridge.HdrRouteClass) != "iac_devops" {
		t.Fatalf("bridge headers %v", req.Header)
	}
	// Nothing like any class: the default.
	r = h.do("POST", "/v1/chat/completions", secret, chatPrompt("auto", "bonjour", nil), nil)
	if r.status != 200 || r.header.Get("X-Aiforge-Route-Class") != "deep_reasoning" || thinker.requests.Load() != 1 {
		t.Fatalf("default: %d %v %s", r.status, r.header, r.body)
	}
	// The header overrides the classifier.
	r = h.do("POST", "/v1/chat/completions", secret, chatPrompt("auto", "Write a Terraform module for a VPC", nil), map[string]string{"X-AI-Route": "deep_reasoning"})
	if r.status != 200 || r.header.Get("X-Aiforge-Route-Class") != "deep_reasoning" || thinker.requests.Load() != 2 {
		t.Fatalf("header: %d %v %s", r.status, r.header, r.body)
	}
	e := apiError(t, h.do("POST", "/v1/chat/completions", secret, chatPrompt("auto", "hi", nil), map[string]string{"X-AI-Route": "nope"}), 400, "unknown_route_class")
	if msg := e["message"].(string); !strings.Contains(msg, "iac_devops") || !strings.Contains(msg, "openstack_api") {
		t.Fatalf("unknown class message %q", msg)
	}
	// The key must be allowed the router.
	other, _ := h.tenantKey("acme", "coder")
	apiError(t, h.do("POST", "/v1/chat/completions", other, chatPrompt("auto", "hi", nil), nil), 403, "model_not_allowed")

	// A tool class, plain and streamed.
	r = h.do("POST", "/v1/chat/completions", secret, chatPrompt("auto", "list my OpenStack servers please", nil), nil)
	if r.status != 200 || r.header.Get("X-Aiforge-Route-Class") != "openstack_api" {
		t.Fatalf("tool: %d %v %s", r.status, r.header, r.body)
	}
	m := r.json(t)
	if m["object"] != "chat.completion" || m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] != "3 servers: web-1, web-2, db-1" {
		t.Fatalf("tool answer %s", r.body)
	}
	r = h.do("POST", "/v1/chat/completions", secret, chatPrompt("auto", "list my openstack servers", map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}), nil)
	chunks, done := readSSE(t, r.body)
	if r.status != 200 || !done || sseContent(t, chunks) != "3 servers: web-1, web-2, db-1" || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("streamed tool: %d %s", r.status, r.body)
	}
	if last := chunks[len(chunks)-1]; last["usage"] == nil {
		t.Fatalf("no usage chunk: %s", r.body)
	}
	if toolCalls.Load() != 2 {
		t.Fatalf("tool called %d times", toolCalls.Load())
	}
	apiError(t, h.do("POST", "/v1/chat/completions", secret, chatPrompt("auto", "x", nil), map[string]string{"X-AI-Route": "broken"}), 502, "tool_failed")

	// The edge records the tool's usage (v4, router and class).
	eventually(t, 5*time.Second, func() bool {
		n := 0
		for _, ev := range usage() {
			if ev.Router == "auto" && ev.RouteClass == "openstack_api" && ev.Tenant == "acme" && ev.Model == "auto" {
				n++
			}
		}
		return n == 2
	}, "two tool usage events")

	// Deleting the router: the name is unknown again.
	if r := h.admin("DELETE", "/admin/v1/routers/auto", nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	apiError(t, h.do("POST", "/v1/chat/completions", secret, chatPrompt("auto", "hi", nil), nil), 404, "model_not_found")
}

func (h *harness) registerCachedModel(name string, cache map[string]any) {
	h.t.Helper()
	r := h.admin("POST", "/admin/v1/models", map[string]any{
		"name": name, "engine": map[string]any{"base_url": "http://127.0.0.1:1/v1", "model": "upstream"}, "cache": cache,
	})
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		h.t.Fatalf("register model %q: %d %s", name, r.status, r.body)
	}
}

func TestSemanticCacheExactSimilarTenantsAndStreams(t *testing.T) {
	h := startEdge(t, nil)
	h.registerCachedModel("chat", map[string]any{"enabled": true, "similarity": 0.8})
	sim := h.simWorker("chat")
	acme, _ := h.tenantKey("acme")
	globex, _ := h.tenantKey("globex")
	usage := h.usageEvents()
	zero := map[string]any{"temperature": 0}

	first := h.do("POST", "/v1/chat/completions", acme, chatPrompt("chat", "What is the capital city of France?", zero), nil)
	if first.status != 200 || first.header.Get("X-Aiforge-Cache") != "" {
		t.Fatalf("miss: %d %v %s", first.status, first.header, first.body)
	}
	wantContent := first.json(t)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]
	// The answer is stored after it was sent: poll for the hit.
	var hit response
	eventually(t, 5*time.Second, func() bool {
		hit = h.do("POST", "/v1/chat/completions", acme, chatPrompt("chat", "What is the capital city of France?", zero), nil)
		return hit.header.Get("X-Aiforge-Cache") == "exact"
	}, "an exact hit")
	if sim.requests.Load() != 1 {
		t.Fatalf("the simulator saw %d requests for two identical prompts", sim.requests.Load())
	}
	hm := hit.json(t)
	if hm["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] != wantContent {
		t.Fatalf("hit %s, original %s", hit.body, first.body)
	}
	if u := hm["usage"].(map[string]any); u["completion_tokens"].(float64) != 0 || u["prompt_tokens_details"].(map[string]any)["cached_tokens"] != u["prompt_tokens"] {
		t.Fatalf("hit usage %v", u)
	}

	// Another tenant's identical prompt is a miss.
	r := h.do("POST", "/v1/chat/completions", globex, chatPrompt("chat", "What is the capital city of France?", zero), nil)
	if r.status != 200 || r.header.Get("X-Aiforge-Cache") != "" || sim.requests.Load() != 2 {
		t.Fatalf("second tenant: %d %v, simulator %d", r.status, r.header, sim.requests.Load())
	}
	// A similar prompt of the same tenant: a similarity hit.
	r = h.do("POST", "/v1/chat/completions", acme, chatPrompt("chat", "what's the capital city of france", zero), nil)
	if r.header.Get("X-Aiforge-Cache") != "similar" || sim.requests.Load() != 2 {
		t.Fatalf("similar: %d %v, simulator %d", r.status, r.header, sim.requests.Load())
	}
	// Temperature above the policy's: never cached.
	for i := 0; i < 2; i++ {
		r = h.do("POST", "/v1/chat/completions", acme, chatPrompt("chat", "What is the capital city of France?", map[string]any{"temperature": 0.7}), nil)
		if r.header.Get("X-Aiforge-Cache") != "" {
			t.Fatalf("temperature 0.7 answered from the cache")
		}
	}
	if sim.requests.Load() != 4 {
		t.Fatalf("simulator %d, want 4", sim.requests.Load())
	}
	// A streamed hit, in the normal SSE shape, with the usage chunk.
	r = h.do("POST", "/v1/chat/completions", acme, chatPrompt("chat", "What is the capital city of France?", map[string]any{"temperature": 0, "stream": true, "stream_options": map[string]any{"include_usage": true}}), nil)
	chunks, done := readSSE(t, r.body)
	if r.header.Get("X-Aiforge-Cache") != "exact" || !done || sseContent(t, chunks) != wantContent || chunks[len(chunks)-1]["usage"] == nil {
		t.Fatalf("streamed hit: %v %s", r.header, r.body)
	}
	if sim.requests.Load() != 4 {
		t.Fatalf("simulator %d after a streamed hit", sim.requests.Load())
	}
	// A streamed miss is kept too, then hit without streaming.
	streamed := chatPrompt("chat", "Name three prime numbers", map[string]any{"temperature": 0, "stream": true})
	r = h.do("POST", "/v1/chat/completions", acme, streamed, nil)
	chunks, _ = readSSE(t, r.body)
	streamedContent := sseContent(t, chunks)
	// Until the streamed answer is kept, asking again is a miss, or a
	// similarity hit of an earlier entry: counted, as each has its usage.
	similar := 1
	eventually(t, 5*time.Second, func() bool {
		r = h.do("POST", "/v1/chat/completions", acme, chatPrompt("chat", "Name three prime numbers", zero), nil)
		if r.header.Get("X-Aiforge-Cache") == "similar" {
			similar++
		}
		return r.header.Get("X-Aiforge-Cache") == "exact"
	}, "a hit of a streamed answer")
	if got := r.json(t)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]; got != streamedContent {
		t.Fatalf("rebuilt %q, streamed %q", got, streamedContent)
	}

	// Usage of hits: cached prompt tokens, no completion, Cache set (the
	// edge publishes them in the background: a loaded machine may take a
	// while).
	eventually(t, 30*time.Second, func() bool {
		kinds := map[string]int{}
		for _, ev := range usage() {
			if ev.Cache != "" {
				if ev.Tenant != "acme" || ev.CompletionTokens != 0 || ev.CachedPromptTokens != ev.PromptTokens || ev.PromptTokens == 0 || ev.Reporter == "" {
					t.Fatalf("hit usage %+v", ev)
				}
				kinds[ev.Cache]++
			}
		}
		if kinds["similar"] > similar {
			t.Fatalf("%d usage events of similarity hits, %d hits answered", kinds["similar"], similar)
		}
		return kinds["exact"] >= 3 && kinds["similar"] == similar
	}, "usage events of the hits")

	// Invalidation: the tenant's entries of the model go.
	if r := h.admin("DELETE", "/admin/v1/cache?model=chat&tenant=acme", nil); r.status != 200 {
		t.Fatalf("purge: %d %s", r.status, r.body)
	}
	before := sim.requests.Load()
	r = h.do("POST", "/v1/chat/completions", acme, chatPrompt("chat", "What is the capital city of France?", zero), nil)
	if r.header.Get("X-Aiforge-Cache") != "" || sim.requests.Load() != before+1 {
		t.Fatalf("after purge: %v, simulator %d", r.header, sim.requests.Load())
	}
	apiError(t, h.admin("DELETE", "/admin/v1/cache", nil), 400, "missing_required_parameter")
}

func TestSemanticCacheTTL(t *testing.T) {
	h := startEdge(t, nil)
	h.registerCachedModel("chat", map[string]any{"enabled": true, "ttl": "1s"})
	sim := h.simWorker("chat")
	acme, _ := h.tenantKey("acme")
	body := chatPrompt("chat", "Tell me about TTLs", map[string]any{"temperature": 0})
	h.do("POST", "/v1/chat/completions", acme, body, nil)
	eventually(t, 5*time.Second, func() bool {
		return h.do("POST", "/v1/chat/completions", acme, body, nil).header.Get("X-Aiforge-Cache") == "exact"
	}, "a hit")
	eventually(t, 10*time.Second, func() bool {
		return h.do("POST", "/v1/chat/completions", acme, body, nil).header.Get("X-Aiforge-Cache") == ""
	}, "the entry to expire")
	if n := sim.requests.Load(); n < 2 {
		t.Fatalf("simulator %d", n)
	}
}
