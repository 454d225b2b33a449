package edge_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/registry"
)

// modelIDs lists the ids GET path answers for key.
func (h *harness) modelIDs(key, path string) (ids, states []string) {
	h.t.Helper()
	r := h.do("GET", path, key, nil, nil)
	var l struct {
		Data []struct {
			ID    string `json:"id"`
			State string `json:"aiforge_state"`
		} `json:"data"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil {
		h.t.Fatalf("%s: %d %s", path, r.status, r.body)
	}
	for _, d := range l.Data {
		ids = append(ids, d.ID)
		states = append(states, d.State)
	}
	return ids, states
}

type statusView struct {
	Name   string `json:"name"`
	Engine struct {
		APIKey string `json:"api_key"`
	} `json:"engine"`
	Status struct {
		State    string                 `json:"state"`
		Servable int                    `json:"servable_replicas"`
		Replicas []registry.WorkerState `json:"replicas"`
	} `json:"status"`
}

func TestModelStatusFromWorkerReplicas(t *testing.T) {
	h := startEdge(t, nil)
	ctx := context.Background()
	workers, err := registry.OpenWorkers(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	const engineKey = "sk-engine-7c1e"
	for _, name := range []string{"keyless", "locked", "mixed", "silent"} {
		engine := map[string]any{"base_url": "http://127.0.0.1:1/v1", "model": "up"}
		if name == "locked" {
			engine["api_key"] = engineKey
		}
		if r := h.admin("POST", "/admin/v1/models", map[string]any{"name": name, "engine": engine}); r.status != http.StatusCreated {
			t.Fatalf("register %s: %d %s", name, r.status, r.body)
		}
	}
	now := time.Now().UTC()
	put := func(st registry.WorkerState) {
		t.Helper()
		st.BaseURL, st.UpstreamModel, st.StartedAt, st.UpdatedAt = "http://127.0.0.1:1/v1", "up", now, now
		if err := workers.Put(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	// What the workers report: the engine of "locked" refuses the engine
	// key; "mixed" has one replica serving and one whose engine is down;
	// "silent" has no worker reporting; "keyless" serves.
	put(registry.WorkerState{WorkerID: "w-1", Model: "keyless", State: registry.WorkerServing, UpstreamVerified: true,
		MaxConcurrency: 3, MaxConcurrencyFrom: "engine", ContextWindow: 4096, InFlight: 2, Queued: 1})
	put(registry.WorkerState{WorkerID: "w-2", Model: "locked", State: registry.WorkerUnauthorized, UpstreamVerified: true,
		LastError:   "worker locked: engine refused the engine API key: an authenticated POST http://127.0.0.1:1/v1/chat/completions answered 401",
		LastErrorAt: now})
	put(registry.WorkerState{WorkerID: "w-3", Model: "mixed", EngineID: "a", State: registry.WorkerServing, UpstreamVerified: true})
	put(registry.WorkerState{WorkerID: "w-4", Model: "mixed", EngineID: "b", State: registry.WorkerUnreachable, LastError: "connection refused"})

	key, _ := h.tenantKey("acme")
	eventually(t, 10*time.Second, func() bool {
		ids, _ := h.modelIDs(key, "/v1/models")
		return slices.Equal(ids, []string{"keyless", "mixed", "silent"})
	}, "/v1/models to list the servable models (and the one nobody reports on)")
	ids, states := h.modelIDs(key, "/v1/models?include_unavailable=true")
	if !slices.Equal(ids, []string{"keyless", "locked", "mixed", "silent"}) ||
		!slices.Equal(states, []string{"serving", "unauthorized", "serving", "unknown"}) {
		t.Fatalf("include_unavailable: %v %v", ids, states)
	}
	if r := h.do("GET", "/v1/models/locked", key, nil, nil); r.status != http.StatusOK || r.json(t)["aiforge_state"] != "unauthorized" {
		t.Fatalf("/v1/models/locked: %d %s", r.status, r.body)
	}

	get := func(name string) statusView {
		t.Helper()
		r := h.admin("GET", "/admin/v1/models/"+name, nil)
		var v statusView
		if r.status != http.StatusOK || json.Unmarshal(r.body, &v) != nil {
			t.Fatalf("admin model %s: %d %s", name, r.status, r.body)
		}
		if strings.Contains(string(r.body), engineKey) {
			t.Fatalf("the engine key shows: %s", r.body)
		}
		return v
	}
	locked := get("locked")
	if locked.Engine.APIKey != "redacted" || locked.Status.State != registry.WorkerUnauthorized || locked.Status.Servable != 0 ||
		len(locked.Status.Replicas) != 1 || !strings.Contains(locked.Status.Replicas[0].LastError, "401") ||
		!locked.Status.Replicas[0].UpstreamVerified || locked.Status.Replicas[0].KeyVerified {
		t.Fatalf("locked: %+v", locked)
	}
	kl := get("keyless").Status
	if r := kl.Replicas[0]; kl.State != "serving" || kl.Servable != 1 || r.WorkerID != "w-1" || r.InFlight != 2 || r.Queued != 1 ||
		r.MaxConcurrency != 3 || r.MaxConcurrencyFrom != "engine" || r.ContextWindow != 4096 || r.UpdatedAt.IsZero() {
		t.Fatalf("keyless: %+v", kl)
	}
	if m := get("mixed").Status; m.State != "serving" || m.Servable != 1 || len(m.Replicas) != 2 ||
		m.Replicas[1].EngineID != "b" || m.Replicas[1].State != registry.WorkerUnreachable {
		t.Fatalf("mixed: %+v", m)
	}
	if s := get("silent").Status; s.State != "unknown" || s.Replicas == nil || len(s.Replicas) != 0 {
		t.Fatalf("silent: %+v", s)
	}

	// The key is fixed: the replica serves and the model is listed again;
	// a replica that stops reporting leaves (deleted or expired).
	put(registry.WorkerState{WorkerID: "w-2", Model: "locked", State: registry.WorkerServing, UpstreamVerified: true, KeyVerified: true})
	if err := workers.Delete(ctx, "mixed", "w-3"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool {
		ids, _ := h.modelIDs(key, "/v1/models")
		return slices.Equal(ids, []string{"keyless", "locked", "silent"})
	}, "locked listed, mixed gone with its serving replica")
	if m := get("mixed").Status; m.State != registry.WorkerUnreachable {
		t.Fatalf("mixed after its serving replica left: %+v", m)
	}

	// The admin list shows each model's status too.
	r := h.admin("GET", "/admin/v1/models", nil)
	var l struct {
		Data []statusView `json:"data"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil || len(l.Data) != 4 || l.Data[1].Status.State != "serving" {
		t.Fatalf("admin list: %d %s", r.status, r.body)
	}
}
