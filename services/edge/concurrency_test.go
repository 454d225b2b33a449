package edge_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
)

// max_concurrent_requests on a key and on its tenant: a request beyond the
// bound gets 429 concurrency_limit_exceeded at once; once one ends, the
// next is served.
func TestConcurrencyLimits(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("chat")
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	h.worker("chat", "w1", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		if strings.Contains(string(req.Body), "hold") {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return
			}
		}
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte(`{"ok":true}`))
	})
	if r := h.admin("POST", "/admin/v1/tenants", map[string]string{"id": "acme"}); r.status != http.StatusCreated {
		t.Fatalf("create tenant: %d %s", r.status, r.body)
	}
	r := h.admin("POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "max_concurrent_requests": 1})
	if r.status != http.StatusCreated {
		t.Fatalf("create key: %d %s", r.status, r.body)
	}
	m := r.json(t)
	one := m["key"].(string)
	if m["max_concurrent_requests"] != float64(1) {
		t.Fatalf("key view lacks the limit: %s", r.body)
	}
	other, _ := h.tenantKey("acme")
	hold := `{"model":"chat","messages":[{"role":"user","content":"hold"}]}`

	held := make(chan response, 1)
	go func() { held <- h.do("POST", "/v1/chat/completions", one, hold, nil) }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request did not reach the worker")
	}
	e := apiError(t, h.do("POST", "/v1/chat/completions", one, chatBody("chat", false), nil), http.StatusTooManyRequests, "concurrency_limit_exceeded")
	if !strings.Contains(e["message"].(string), "API key") {
		t.Fatalf("message %q does not say the key is at its limit", e["message"])
	}
	if r := h.do("POST", "/v1/chat/completions", other, chatBody("chat", false), nil); r.status != http.StatusOK {
		t.Fatalf("another key of the tenant: %d %s", r.status, r.body)
	}

	// A tenant bound of 1: the other key is refused too while one is held.
	if r := h.admin("PATCH", "/admin/v1/tenants/acme", map[string]any{"max_concurrent_requests": 1}); r.status != http.StatusOK {
		t.Fatalf("patch tenant: %d %s", r.status, r.body)
	}
	eventually(t, 10*time.Second, func() bool {
		r := h.do("POST", "/v1/chat/completions", other, chatBody("chat", false), nil)
		return r.status == http.StatusTooManyRequests && strings.Contains(string(r.body), "tenant")
	}, "the tenant bound to refuse the other key")

	close(release)
	if r := <-held; r.status != http.StatusOK {
		t.Fatalf("held request: %d %s", r.status, r.body)
	}
	for _, k := range []string{one, other} {
		if r := h.do("POST", "/v1/chat/completions", k, chatBody("chat", false), nil); r.status != http.StatusOK {
			t.Fatalf("after the held request ended: %d %s", r.status, r.body)
		}
	}
}

// A model binding carries its TTFT and request timeouts.
func TestModelTimeoutsRegistered(t *testing.T) {
	h := startEdge(t, nil)
	r := h.admin("POST", "/admin/v1/models", map[string]any{"name": "chat", "engine": map[string]any{
		"base_url": "http://127.0.0.1:1/v1", "model": "up", "ttft_timeout": "5s", "request_timeout": "2m"}})
	if r.status != http.StatusCreated {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	eng := r.json(t)["engine"].(map[string]any)
	if eng["ttft_timeout"] != "5s" || eng["request_timeout"] != "2m0s" {
		t.Fatalf("engine %v", eng)
	}
	apiError(t, h.admin("POST", "/admin/v1/models", map[string]any{"name": "chat", "engine": map[string]any{
		"base_url": "http://127.0.0.1:1/v1", "model": "up", "ttft_timeout": "-1s"}}), http.StatusBadRequest, "invalid_request")
	apiError(t, h.admin("POST", "/admin/v1/models", map[string]any{"name": "chat", "engine": map[string]any{
		"base_url": "http://127.0.0.1:1/v1", "model": "up", "ttft_timeout": "soon"}}), http.StatusBadRequest, "invalid_json")
}
