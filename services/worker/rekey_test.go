package worker

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// An engine whose key changes after the worker verified it: the first
// request it refuses makes the worker check the key at once (not at the
// next health tick, an hour away here), so the replica shows unauthorized
// and stops taking requests instead of failing every one.
func TestRefusedKeyIsRecheckedAtOnce(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	want := "sk-engine-first"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ok := r.Header.Get("Authorization") == "Bearer "+want
		mu.Unlock()
		switch {
		case r.URL.Path == "/v1/models": // open, as llama-server leaves it
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"up","object":"model"}]}`))
		case !ok:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}`))
		case r.URL.Path == "/v1/chat/completions":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest) // the key check's empty body, or a real request
			_, _ = w.Write([]byte(`{"error":{"message":"messages is required","type":"invalid_request_error","code":400}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	cfg := Config{Model: "rekey", Engine: registry.Engine{BaseURL: srv.URL + "/v1", Model: "up", APIKey: "sk-engine-first"},
		HealthInterval: time.Hour}
	svc := h.startWorker(cfg)
	if st := svc.State(); st.State != registry.WorkerServing || !st.KeyVerified {
		t.Fatalf("state before the key changed: %+v", st)
	}
	mu.Lock()
	want = "sk-engine-second" // the engine restarted with another key
	mu.Unlock()
	_, _, err := h.do(testCtx(t), newReq("rekey", events.EndpointChatCompletions, false, false, `{"model":"rekey","messages":[{"role":"user","content":"hi"}]}`))
	if err == nil {
		t.Fatal("a request with a refused key succeeded")
	}
	eventually(t, 10*time.Second, "the replica unauthorized", func() bool {
		return svc.State().State == registry.WorkerUnauthorized && !svc.Ready()
	})
}
