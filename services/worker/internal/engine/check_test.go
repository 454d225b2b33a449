package engine

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/registry"
)

// TestVerifyKeyProbe covers how the key probe reads engines' answers.
func TestVerifyKeyProbe(t *testing.T) {
	const key = "sk-probe-key"
	models := `{"object":"list","data":[{"id":"up","object":"model"}]}`
	cases := []struct {
		name       string
		chat, emb  int // status of POST /v1/chat/completions, /v1/embeddings
		embedding  bool
		wantKind   error
		wantVerify bool
		wantPosts  string
	}{
		{name: "accepted (400 on the empty body)", chat: 400, emb: 400, wantVerify: true, wantPosts: "chat"},
		{name: "accepted (422)", chat: 422, emb: 422, wantVerify: true, wantPosts: "chat"},
		{name: "refused 401", chat: 401, emb: 401, wantKind: ErrUnauthorized, wantPosts: "chat"},
		{name: "refused 403", chat: 403, emb: 403, wantKind: ErrUnauthorized, wantPosts: "chat"},
		{name: "embeddings-only engine", chat: 404, emb: 422, wantVerify: true, wantPosts: "chat emb"},
		{name: "embedding model probes embeddings first", chat: 401, emb: 422, embedding: true, wantVerify: true, wantPosts: "emb"},
		{name: "loading", chat: 503, emb: 503, wantKind: ErrUnreachable, wantPosts: "chat"},
		{name: "nothing to probe", chat: 404, emb: 405, wantVerify: false, wantPosts: "chat emb"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var posts []string
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/v1/models":
					_, _ = w.Write([]byte(models)) // open, as llama-server leaves it
					return
				case "/v1/chat/completions":
					posts = append(posts, "chat")
					w.WriteHeader(tc.chat)
				case "/v1/embeddings":
					posts = append(posts, "emb")
					w.WriteHeader(tc.emb)
				default:
					w.WriteHeader(http.StatusNotFound)
				}
				if r.Header.Get("Authorization") != "Bearer "+key {
					t.Errorf("%s without the key", r.URL.Path)
				}
			}))
			defer ts.Close()
			eng := registry.Engine{BaseURL: ts.URL + "/v1", Model: "up", APIKey: key}
			if tc.embedding {
				eng.MaxInputTokens = 512
			}
			c := New(Config{Served: "served", Engine: eng, RequestTimeout: time.Minute, HTTPClient: ts.Client()})
			rep, err := c.Verify(context.Background())
			if tc.wantKind == nil && err != nil || tc.wantKind != nil && !errors.Is(err, tc.wantKind) {
				t.Fatalf("err %v, want %v", err, tc.wantKind)
			}
			if err != nil && strings.Contains(err.Error(), key) {
				t.Fatalf("the error holds the key: %v", err)
			}
			if rep.KeyVerified != tc.wantVerify || !rep.UpstreamVerified {
				t.Fatalf("report %+v", rep)
			}
			if got := strings.Join(posts, " "); got != tc.wantPosts {
				t.Fatalf("probed %q, want %q", got, tc.wantPosts)
			}
		})
	}
}

func TestVerifyWithoutKeyProbesNothing(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = w.Write([]byte(`{"data":[{"id":"up","max_model_len":16384}]}`))
		case "/props":
			_, _ = w.Write([]byte(`{"total_slots":4,"default_generation_settings":{"n_ctx":8192}}`))
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		}
	}))
	defer ts.Close()
	c := New(Config{Served: "served", Engine: registry.Engine{BaseURL: ts.URL + "/v1", Model: "up"}, RequestTimeout: time.Minute, HTTPClient: ts.Client()})
	rep, err := c.Verify(context.Background())
	// /props (llama-server) says the per-slot context; it wins over the
	// model list's.
	if err != nil || rep.KeyVerified || rep.TotalSlots != 4 || rep.ContextWindow != 8192 {
		t.Fatalf("%+v %v", rep, err)
	}
}
