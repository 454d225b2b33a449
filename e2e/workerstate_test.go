package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/registry"
)

// A model whose engine refuses the engine key (with /v1/models open, as
// llama-server leaves it) is shown unauthorized by the admin API and is not
// listed as servable; a model whose engine is down is unreachable; a
// llama-server's slot count becomes the worker's concurrency.
func TestWorkerStateThroughTheStack(t *testing.T) {
	const engineKey, wrongKey = "sk-engine-e2e-4b1f", "sk-engine-e2e-WRONG"
	_, locked, closeLocked, err := enginesim.StartFlavor(enginesim.Config{Models: []string{"up"}, APIKey: engineKey},
		enginesim.Flavor{OpenModels: true, TotalSlots: 2, NCtx: 2048})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLocked)
	_, plainBase := sim(t, enginesim.Config{Models: []string{"up"}})
	s := startStack(t, stackOpts{})
	_, deadBase, closeDead, err := enginesim.Start(enginesim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	closeDead() // an engine that is down
	ctx := context.Background()
	reg := func(name, base, key string) {
		t.Helper()
		eng := map[string]any{"base_url": base, "model": "up"}
		if key != "" {
			eng["api_key"] = key
		}
		if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": name, "engine": eng}, nil); err != nil {
			t.Fatal(err)
		}
	}
	reg("good", locked, engineKey)
	reg("locked", locked, wrongKey)
	reg("offline", deadBase, "")
	reg("plain", plainBase, "")
	key, _ := s.tenantKey("acme")
	s.waitServed(key, "good")

	type view struct {
		Status struct {
			State    string                 `json:"state"`
			Replicas []registry.WorkerState `json:"replicas"`
		} `json:"status"`
	}
	status := func(name string) view {
		t.Helper()
		var v view
		if err := s.admin.Do(ctx, "GET", "/admin/v1/models/"+name, nil, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	eventually(t, 20*time.Second, func() bool {
		return status("locked").Status.State == registry.WorkerUnauthorized && status("offline").Status.State == registry.WorkerUnreachable
	}, "locked unauthorized and offline unreachable")
	lk := status("locked").Status.Replicas[0]
	if !lk.UpstreamVerified || lk.KeyVerified || !strings.Contains(lk.LastError, "401") || strings.Contains(lk.LastError, wrongKey) {
		t.Fatalf("locked replica %+v", lk)
	}
	g := status("good").Status.Replicas[0]
	if g.State != registry.WorkerServing || !g.KeyVerified || g.MaxConcurrency != 2 || g.MaxConcurrencyFrom != "engine" || g.ContextWindow != 2048 {
		t.Fatalf("good replica %+v", g)
	}
	if p := status("plain").Status.Replicas[0]; p.KeyVerified || p.MaxConcurrency != 64 || p.MaxConcurrencyFrom != "default" {
		t.Fatalf("plain replica %+v", p)
	}

	req, _ := http.NewRequest("GET", s.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range l.Data {
		ids = append(ids, d.ID)
	}
	if !slices.Equal(ids, []string{"good", "plain"}) {
		t.Fatalf("/v1/models lists %v, want the servable good and plain", ids)
	}
	// The tenant is told why, in words that name no internal host or key.
	st, raw := s.post(key, "/v1/chat/completions", `{"model":"locked","messages":[{"role":"user","content":"hi"}]}`)
	body := string(raw)
	if st != http.StatusServiceUnavailable || !strings.Contains(body, "model_unavailable") ||
		!strings.Contains(body, "its engine refuses the key aiforge holds for it") || strings.Contains(body, wrongKey) || strings.Contains(body, "127.0.0.1") {
		t.Fatalf("locked answered %d %s", st, body)
	}
	st, raw = s.post(key, "/v1/chat/completions", `{"model":"offline","messages":[{"role":"user","content":"hi"}]}`)
	body = string(raw)
	if st != http.StatusServiceUnavailable || !strings.Contains(body, "its engine cannot be reached") || strings.Contains(body, "127.0.0.1") {
		t.Fatalf("offline answered %d %s", st, body)
	}
}
