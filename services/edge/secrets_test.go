package edge_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/services/edge"
)

const sealedEngineKey = "sk-engine-edge-sealing-test"

// rawModel is the model binding as the bucket holds it.
func (h *harness) rawModel(name string) string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := h.js.KeyValue(ctx, events.BucketModels)
	if err != nil {
		h.t.Fatal(err)
	}
	e, err := b.Get(ctx, registry.ModelKey(name))
	if err != nil {
		h.t.Fatal(err)
	}
	return string(e.Value())
}

func TestEngineKeyStoredSealed(t *testing.T) {
	h := startEdge(t, nil)
	r := h.admin("POST", "/admin/v1/models", map[string]any{
		"name": "chat", "engine": map[string]any{"base_url": "http://127.0.0.1:8000/v1", "model": "up", "api_key": sealedEngineKey},
	})
	if r.status != http.StatusCreated || strings.Contains(string(r.body), sealedEngineKey) || strings.Contains(string(r.body), "api_key_sealed") {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	raw := h.rawModel("chat")
	if strings.Contains(raw, sealedEngineKey) {
		t.Fatalf("the bucket holds the engine key in clear: %s", raw)
	}
	var m registry.Model
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	opened, err := m.OpenEngineKey(h.secrets)
	if err != nil || opened.Engine.APIKey != sealedEngineKey {
		t.Fatalf("the workers' key opens %q, %v", opened.Engine.APIKey, err)
	}
	if strings.Contains(h.logs.String(), sealedEngineKey) {
		t.Fatal("the edge logged the engine key")
	}
}

func TestEngineKeyRefusedWithoutSecretsKey(t *testing.T) {
	h := startEdge(t, func(c *edge.Config) { c.SecretsKey = nil })
	r := h.admin("POST", "/admin/v1/models", map[string]any{
		"name": "chat", "engine": map[string]any{"base_url": "http://127.0.0.1:8000/v1", "model": "up", "api_key": sealedEngineKey},
	})
	apiError(t, r, http.StatusBadRequest, "invalid_request")
	if strings.Contains(string(r.body), sealedEngineKey) || !strings.Contains(string(r.body), "AIFORGE_SECRETS_PUBLIC_KEY_FILE") {
		t.Fatalf("refusal: %s", r.body)
	}
	if r := h.admin("GET", "/admin/v1/models/chat", nil); r.status != http.StatusNotFound {
		t.Fatalf("a refused binding was stored: %d %s", r.status, r.body)
	}
	// A binding without a key needs no secrets key.
	if r := h.admin("POST", "/admin/v1/models", map[string]any{
		"name": "open", "engine": map[string]any{"base_url": "http://127.0.0.1:8000/v1", "model": "up"},
	}); r.status != http.StatusCreated {
		t.Fatalf("register without a key: %d %s", r.status, r.body)
	}
}

// TestLegacyEngineKeySealedAtStart stores a binding the way older versions
// did (api_key in clear) and starts another edge replica: it seals the key.
func TestLegacyEngineKeySealedAtStart(t *testing.T) {
	h := startEdge(t, func(c *edge.Config) { c.SecretsKey = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := h.js.KeyValue(ctx, events.BucketModels)
	if err != nil {
		t.Fatal(err)
	}
	legacy, _ := json.Marshal(registry.Model{Name: "old", Engine: registry.Engine{BaseURL: "http://127.0.0.1:8000/v1", Model: "up", APIKey: sealedEngineKey}})
	if _, err := b.Put(ctx, registry.ModelKey("old"), legacy); err != nil {
		t.Fatal(err)
	}

	// A replica without the public key leaves it alone and warns.
	h2 := startReplica(t, h, nil)
	eventually(t, 5*time.Second, func() bool { return strings.Contains(h2.String(), "stored in clear") }, "a warning about the key in clear")
	if raw := h.rawModel("old"); !strings.Contains(raw, sealedEngineKey) {
		t.Fatalf("a replica without the secrets key rewrote the binding: %s", raw)
	}

	pub := h.secrets.Public()
	logs := startReplica(t, h, &pub)
	eventually(t, 5*time.Second, func() bool { return !strings.Contains(h.rawModel("old"), sealedEngineKey) }, "the legacy key sealed")
	var m registry.Model
	if err := json.Unmarshal([]byte(h.rawModel("old")), &m); err != nil {
		t.Fatal(err)
	}
	if o, err := m.OpenEngineKey(h.secrets); err != nil || o.Engine.APIKey != sealedEngineKey {
		t.Fatalf("migrated binding opens to %q, %v", o.Engine.APIKey, err)
	}
	for _, l := range []string{h.logs.String(), h2.String(), logs.String()} {
		if strings.Contains(l, sealedEngineKey) {
			t.Fatal("an edge logged the engine key")
		}
	}
}

// startReplica runs another edge on h's bus and returns its logs once it
// is ready.
func startReplica(t *testing.T, h *harness, pub *sealed.PublicKey) *syncBuffer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	svc, err := edge.New(edge.Config{AdminKey: adminKey, SecretsKey: pub}, edge.Deps{
		NC: h.nc, JS: h.js, Registerer: reg, Gatherer: reg, Listener: ln,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica Run = %v", err)
		}
	})
	eventually(t, 10*time.Second, svc.Ready, "replica ready")
	return logs
}
