package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge"
)

const okAnswer = `{"id":"chatcmpl-1","object":"chat.completion","model":"%s","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`

// registerBinding registers a model through the admin API with extra
// fields (engines, fallbacks, context_window, routing).
func (h *harness) registerBinding(name string, extra map[string]any) {
	h.t.Helper()
	body := map[string]any{"name": name, "engine": map[string]any{"base_url": "http://127.0.0.1:1/v1", "model": "upstream"}}
	for k, v := range extra {
		body[k] = v
	}
	r := h.admin("POST", "/admin/v1/models", body)
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		h.t.Fatalf("register model %q: %d %s", name, r.status, r.body)
	}
}

// putState writes a serving worker replica's state, as a worker does.
func (h *harness) putState(st registry.WorkerState) {
	h.t.Helper()
	ws, err := registry.OpenWorkers(context.Background(), h.js)
	if err != nil {
		h.t.Fatal(err)
	}
	if st.State == "" {
		st.State = registry.WorkerServing
	}
	st.UpdatedAt = time.Now().UTC()
	if err := ws.Put(context.Background(), st); err != nil {
		h.t.Fatal(err)
	}
}

// countingWorker answers every request after work, counting them.
func (h *harness) countingWorker(model, id string, work time.Duration, n *atomic.Int64) {
	h.worker(model, id, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		n.Add(1)
		if work > 0 {
			time.Sleep(work) // the engine's work, not synchronisation
		}
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte(fmt.Sprintf(okAnswer, model)))
	})
}

// Two engines of one name, equally fast: least-outstanding routing gives
// each within 10% of half of 200 requests sent 8 at a time.
func TestLeastOutstandingSpreadsLoad(t *testing.T) {
	h := startEdge(t, nil)
	h.registerBinding("chat", map[string]any{"engines": []map[string]any{{"id": "b", "base_url": "http://127.0.0.1:2/v1", "model": "upstream"}}})
	var a, b atomic.Int64
	h.countingWorker("chat", "w-a", 3*time.Millisecond, &a)
	h.countingWorker("chat", "w-b", 3*time.Millisecond, &b)
	h.putState(registry.WorkerState{Model: "chat", WorkerID: "w-a"})
	h.putState(registry.WorkerState{Model: "chat", WorkerID: "w-b", EngineID: "b"})
	secret, _ := h.tenantKey("acme")
	// Warm up until the edge knows both replicas (both were sent one).
	eventually(t, 10*time.Second, func() bool {
		r := h.do("POST", "/v1/chat/completions", secret, chatBody("chat", false), nil)
		return r.status == http.StatusOK && a.Load() > 0 && b.Load() > 0
	}, "both replicas routed to")
	a.Store(0)
	b.Store(0)

	const total, conc = 200, 8
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, total)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= total {
				r := h.do("POST", "/v1/chat/completions", secret, chatBody("chat", false), nil)
				if r.status != http.StatusOK || r.header.Get(edgeHdrServed) != "chat" {
					errs <- fmt.Sprintf("%d %s %v", r.status, r.body, r.header)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	t.Logf("engine a %d, engine b %d of %d", a.Load(), b.Load(), total)
	for _, n := range []int64{a.Load(), b.Load()} {
		if n < total/2*9/10 || n > total/2*11/10 {
			t.Fatalf("split %d/%d is not within 10%% of even", a.Load(), b.Load())
		}
	}
}

const (
	edgeHdrServed   = "X-Aiforge-Model-Served"
	edgeHdrAttempts = "X-Aiforge-Attempts"
)

// An engine failing CooldownFailures times in a row is skipped for the
// cooldown, then tried again; one more failure right after starts the
// next cooldown. The clock is the test's.
func TestEngineCooldown(t *testing.T) {
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	h := startEdgeDeps(t, func(c *edge.Config) { c.CooldownFailures = 2; c.Cooldown = time.Minute },
		func(d *edge.Deps) { d.RoutingClock = clock })
	h.registerBinding("chat", map[string]any{"engines": []map[string]any{{"id": "b", "base_url": "http://127.0.0.1:2/v1", "model": "upstream"}}})
	var bad, good atomic.Int64
	h.worker("chat", "w-bad", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		bad.Add(1)
		_ = w.Fail(&bridge.Error{Status: http.StatusBadGateway, Code: contracts.CodeEngineError, Retryable: true,
			Body: contracts.ErrEngine("boom").Body()})
	})
	h.countingWorker("chat", "w-good", 0, &good)
	h.putState(registry.WorkerState{Model: "chat", WorkerID: "w-bad"})
	h.putState(registry.WorkerState{Model: "chat", WorkerID: "w-good", EngineID: "b"})
	secret, _ := h.tenantKey("acme")
	call := func() response {
		t.Helper()
		r := h.do("POST", "/v1/chat/completions", secret, chatBody("chat", false), nil)
		if r.status != http.StatusOK {
			t.Fatalf("request failed: %d %s", r.status, r.body)
		}
		return r
	}
	// Every request succeeds (the failing engine's are retried on the
	// other), until the failing one has failed twice.
	eventually(t, 10*time.Second, func() bool { call(); return bad.Load() >= 2 }, "the failing engine to fail twice")
	if n := bad.Load(); n != 2 {
		t.Fatalf("failing engine tried %d times before its cooldown, want 2", n)
	}
	r := call()
	for range 20 {
		r = call()
	}
	if n := bad.Load(); n != 2 {
		t.Fatalf("engine in cooldown was sent %d requests", n-2)
	}
	if got := r.header.Get(edgeHdrAttempts); got != "chat;engine=b;status=200" {
		t.Fatalf("attempts during cooldown = %q", got)
	}
	// The period passes: it is tried again, and at once cools down again.
	offset.Store(int64(time.Minute + time.Second))
	eventually(t, 10*time.Second, func() bool { call(); return bad.Load() == 3 }, "the engine tried again after its cooldown")
	for range 10 {
		call()
	}
	if n := bad.Load(); n != 3 {
		t.Fatalf("engine failing after its cooldown was sent %d more requests", n-3)
	}
}

// a has no worker, b fails retryably, c serves: the client gets c's
// answer, and the headers show all three attempts; streamed too.
func TestFallbackChainBeforeFirstByte(t *testing.T) {
	h := startEdge(t, nil)
	h.registerBinding("chat-c", nil)
	h.registerBinding("chat-b", nil)
	h.registerBinding("chat-a", map[string]any{"fallbacks": []string{"chat-b", "chat-c"}})
	var bTries atomic.Int64
	h.worker("chat-b", "w-b", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		bTries.Add(1)
		_ = w.Fail(&bridge.Error{Status: http.StatusBadGateway, Code: contracts.CodeEngineError, Retryable: true, Body: contracts.ErrEngine("down").Body()})
	})
	h.putState(registry.WorkerState{Model: "chat-b", WorkerID: "w-b"})
	got := make(chan *bridge.Request, 4)
	h.worker("chat-c", "w-c", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		got <- req
		if req.Stream {
			_ = w.Data(ctx, []byte(`{"id":"x","object":"chat.completion.chunk","model":"chat-c","choices":[{"index":0,"delta":{"content":"hi"}}]}`))
			_ = w.End(http.StatusOK, "text/event-stream")
			return
		}
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte(fmt.Sprintf(okAnswer, "chat-c")))
	})
	h.putState(registry.WorkerState{Model: "chat-c", WorkerID: "w-c"})
	secret, _ := h.tenantKey("acme")

	var r response
	eventually(t, 10*time.Second, func() bool {
		r = h.do("POST", "/v1/chat/completions", secret, chatBody("chat-a", false), nil)
		return r.status == http.StatusOK && strings.Contains(r.header.Get(edgeHdrAttempts), "chat-b;status=502")
	}, "the edge to know every replica")
	if r.header.Get(edgeHdrServed) != "chat-c" || r.json(t)["model"] != "chat-c" {
		t.Fatalf("served %q, body %s", r.header.Get(edgeHdrServed), r.body)
	}
	want := "chat-a;status=503;code=model_unavailable, chat-b;status=502;code=engine_error, chat-c;status=200"
	if a := r.header.Get(edgeHdrAttempts); a != want {
		t.Fatalf("attempts %q, want %q", a, want)
	}
	// c's attempt has its own usage id, derived from the request id.
	var req *bridge.Request
	for len(got) > 0 {
		req = <-got
	}
	if id := r.header.Get("X-Request-Id"); req.ID != id+"-f2" {
		t.Fatalf("served attempt's usage id %q, request id %q", req.ID, id)
	}

	// Streamed: the headers are there before the first byte.
	s := h.openStream(context.Background(), secret, chatBody("chat-a", true), nil)
	if s.resp.StatusCode != http.StatusOK || s.resp.Header.Get(edgeHdrServed) != "chat-c" || s.resp.Header.Get(edgeHdrAttempts) != want {
		t.Fatalf("stream: %d served %q attempts %q", s.resp.StatusCode, s.resp.Header.Get(edgeHdrServed), s.resp.Header.Get(edgeHdrAttempts))
	}
	if data, ok := s.next(t); !ok || !strings.Contains(data, `"chat-c"`) {
		t.Fatalf("first event %q", data)
	}
}

// A prompt longer than a's context window goes to b without reaching a;
// an engine's own context_length_exceeded goes to b too. Without a
// fallback the client gets the error.
func TestContextWindowFallback(t *testing.T) {
	h := startEdge(t, nil)
	h.registerBinding("big", nil)
	h.registerBinding("small", map[string]any{"context_window": 64, "fallbacks": []string{"big"}})
	h.registerBinding("tight", map[string]any{"fallbacks": []string{"big"}})
	var small, big atomic.Int64
	h.countingWorker("small", "w-small", 0, &small)
	h.countingWorker("big", "w-big", 0, &big)
	h.worker("tight", "w-tight", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		e := &contracts.Error{Status: http.StatusBadRequest, Type: contracts.TypeInvalidRequest, Code: contracts.CodeContextLengthExceeded, Message: "too long"}
		_ = w.Fail(&bridge.Error{Status: e.Status, Code: e.Code, Body: e.Body()})
	})
	secret, _ := h.tenantKey("acme")
	long := func(model string) string {
		b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 16,
			"messages": []map[string]string{{"role": "user", "content": strings.Repeat("word ", 100)}}})
		return string(b)
	}
	waitServed := func(model string) {
		eventually(t, 10*time.Second, func() bool {
			return h.do("POST", "/v1/chat/completions", secret, chatBody(model, false), nil).status == http.StatusOK
		}, model+" served")
	}
	waitServed("small")
	before := small.Load()
	r := h.do("POST", "/v1/chat/completions", secret, long("small"), nil)
	if r.status != http.StatusOK || r.header.Get(edgeHdrServed) != "big" {
		t.Fatalf("long prompt on small: %d served %q %s", r.status, r.header.Get(edgeHdrServed), r.body)
	}
	if a := r.header.Get(edgeHdrAttempts); a != "small;status=400;code=context_length_exceeded, big;status=200" {
		t.Fatalf("attempts %q", a)
	}
	if small.Load() != before {
		t.Fatal("the prompt too long for small's context window was sent to it")
	}
	// A short prompt stays on small.
	if r := h.do("POST", "/v1/chat/completions", secret, chatBody("small", false), nil); r.header.Get(edgeHdrServed) != "small" {
		t.Fatalf("short prompt served by %q", r.header.Get(edgeHdrServed))
	}

	r = h.do("POST", "/v1/chat/completions", secret, chatBody("tight", false), nil)
	if r.status != http.StatusOK || r.header.Get(edgeHdrServed) != "big" ||
		r.header.Get(edgeHdrAttempts) != "tight;status=400;code=context_length_exceeded, big;status=200" {
		t.Fatalf("engine context overflow: %d %v %s", r.status, r.header, r.body)
	}

	// The last model of the chain answers its error.
	h.registerBinding("alone", map[string]any{"context_window": 64})
	h.countingWorker("alone", "w-alone", 0, new(atomic.Int64))
	waitServed("alone")
	r = h.do("POST", "/v1/chat/completions", secret, long("alone"), nil)
	apiError(t, r, http.StatusBadRequest, contracts.CodeContextLengthExceeded)
}

// An overloaded model (429 from its only worker) falls back; a client's
// 4xx does not.
func TestOverloadFallsBackClientErrorDoesNot(t *testing.T) {
	h := startEdge(t, nil)
	h.registerBinding("spare", nil)
	h.registerBinding("busy", map[string]any{"fallbacks": []string{"spare"}})
	h.registerBinding("picky", map[string]any{"fallbacks": []string{"spare"}})
	var spare atomic.Int64
	h.countingWorker("spare", "w-spare", 0, &spare)
	h.worker("busy", "w-busy", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		e := contracts.ErrOverloaded("busy")
		_ = w.Fail(&bridge.Error{Status: e.Status, Code: e.Code, Body: e.Body(), Retryable: true})
	})
	h.worker("picky", "w-picky", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Fail(&bridge.Error{Status: http.StatusBadRequest, Code: "invalid_value",
			Body: []byte(`{"error":{"message":"temperature must be <= 2","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`)})
	})
	h.putState(registry.WorkerState{Model: "busy", WorkerID: "w-busy"})
	secret, _ := h.tenantKey("acme")
	var r response
	eventually(t, 10*time.Second, func() bool {
		r = h.do("POST", "/v1/chat/completions", secret, chatBody("busy", false), nil)
		return r.status == http.StatusOK
	}, "busy to fall back")
	if r.header.Get(edgeHdrServed) != "spare" || r.header.Get(edgeHdrAttempts) != "busy;status=429;code=overloaded, spare;status=200" {
		t.Fatalf("overloaded: %v", r.header)
	}
	before := spare.Load()
	r = h.do("POST", "/v1/chat/completions", secret, chatBody("picky", false), nil)
	apiError(t, r, http.StatusBadRequest, "invalid_value")
	if spare.Load() != before || r.header.Get(edgeHdrServed) != "picky" {
		t.Fatalf("a client error fell back (served %q)", r.header.Get(edgeHdrServed))
	}

	// Nothing serves: the last failure is the answer, every attempt is
	// listed, and no model is named as served.
	h.registerBinding("void-b", nil)
	h.registerBinding("void-a", map[string]any{"fallbacks": []string{"void-b"}})
	r = h.do("POST", "/v1/chat/completions", secret, chatBody("void-a", false), nil)
	apiError(t, r, http.StatusServiceUnavailable, contracts.CodeNoWorker)
	if a := r.header.Get(edgeHdrAttempts); a != "void-a;status=503;code=model_unavailable, void-b;status=503;code=model_unavailable" || r.header.Get(edgeHdrServed) != "" {
		t.Fatalf("attempts %q served %q", a, r.header.Get(edgeHdrServed))
	}
}

// Every engine's key, the first and the further ones (a provider's), is
// sealed in the bucket, redacted in answers and opens for the workers.
func TestEveryEngineKeyStoredSealed(t *testing.T) {
	h := startEdge(t, nil)
	const keyB = "sk-provider-key-of-engine-b"
	r := h.admin("POST", "/admin/v1/models", map[string]any{
		"name": "chat", "engine": map[string]any{"base_url": "http://127.0.0.1:8000/v1", "model": "up", "api_key": sealedEngineKey},
		"engines": []map[string]any{{"id": "b", "base_url": "https://api.example.com/v1", "model": "gpt", "api_key": keyB,
			"kind": "provider", "rpm": 60, "weight": 2}},
		"fallbacks": []string{"other"}, "context_window": 4096, "routing": "latency",
	})
	if r.status != http.StatusCreated || strings.Contains(string(r.body), keyB) || strings.Contains(string(r.body), sealedEngineKey) {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	var view struct {
		Engine        registry.Engine   `json:"engine"`
		Engines       []registry.Engine `json:"engines"`
		Fallbacks     []string          `json:"fallbacks"`
		ContextWindow int               `json:"context_window"`
		Routing       string            `json:"routing"`
	}
	if err := json.Unmarshal(h.admin("GET", "/admin/v1/models/chat", nil).body, &view); err != nil {
		t.Fatal(err)
	}
	if view.Engine.APIKey != "redacted" || len(view.Engines) != 1 || view.Engines[0].APIKey != "redacted" || view.Engines[0].APIKeySealed != "" ||
		view.Engines[0].Kind != "provider" || view.Engines[0].RPM != 60 || view.Fallbacks[0] != "other" || view.ContextWindow != 4096 || view.Routing != "latency" {
		t.Fatalf("view %+v", view)
	}
	raw := h.rawModel("chat")
	if strings.Contains(raw, keyB) || strings.Contains(raw, sealedEngineKey) {
		t.Fatalf("the bucket holds an engine key in clear: %s", raw)
	}
	var m registry.Model
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	opened, err := m.OpenEngineKey(h.secrets)
	if err != nil || opened.Engine.APIKey != sealedEngineKey || opened.Engines[0].APIKey != keyB {
		t.Fatalf("the workers' key opens %+v, %v", opened.AllEngines(), err)
	}
	// A fallback to itself or a duplicate engine id is refused.
	r = h.admin("POST", "/admin/v1/models", map[string]any{"name": "loop", "engine": map[string]any{"base_url": "http://x/v1", "model": "up"},
		"fallbacks": []string{"loop"}})
	apiError(t, r, http.StatusBadRequest, "invalid_request")
}
