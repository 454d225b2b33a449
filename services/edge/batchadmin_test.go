package edge_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge"
)

// The scheduler's configuration is written through the admin API into the
// bucket the batch service watches, validated on the way.
func TestBatchQueueConfigAdmin(t *testing.T) {
	h := startBatchEdge(t, nil)
	h.tenantKey("acme")
	queues := h.kv(events.BucketBatchQueues)
	ctx := context.Background()

	if r := h.admin("PUT", "/admin/v1/batch/flavors/cpu-moe", map[string]any{"description": "CPU, experts streamed from NVMe"}); r.status != http.StatusCreated {
		t.Fatalf("put flavor: %d %s", r.status, r.body)
	}
	if r := h.admin("PUT", "/admin/v1/batch/flavors/cpu-moe", map[string]any{"name": "cpu-moe", "description": "CPU"}); r.status != http.StatusOK {
		t.Fatalf("replace flavor: %d %s", r.status, r.body)
	}
	f, _, err := kv.Get[batch.Flavor](ctx, queues, batch.FlavorKey("cpu-moe"))
	if err != nil || f.Name != "cpu-moe" || f.Description != "CPU" {
		t.Fatalf("stored flavor %+v %v", f, err)
	}
	if r := h.admin("PUT", "/admin/v1/batch/cohorts/frontier", map[string]any{}); r.status != http.StatusCreated {
		t.Fatalf("put cohort: %d %s", r.status, r.body)
	}
	pool := map[string]any{"models": []string{"deepseek-v3", "kimi-k2"}, "cohort": "frontier", "group_size": 32,
		"quotas": []map[string]any{{"flavor": "cpu-moe", "lines": 64, "tokens_per_second": 500, "borrowing_limit": 16}}}
	if r := h.admin("PUT", "/admin/v1/batch/pools/moe", pool); r.status != http.StatusCreated {
		t.Fatalf("put pool: %d %s", r.status, r.body)
	}
	p, _, err := kv.Get[batch.Pool](ctx, queues, batch.PoolKey("moe"))
	if err != nil || p.Name != "moe" || len(p.Quotas) != 1 || p.Quotas[0].Lines != 64 || *p.Quotas[0].BorrowingLimit != 16 || p.GroupSize != 32 {
		t.Fatalf("stored pool %+v %v", p, err)
	}
	// A model's implicit pool may be configured by the model's name.
	if r := h.admin("PUT", "/admin/v1/batch/pools/Qwen/Qwen2.5-7B", map[string]any{"models": []string{"Qwen/Qwen2.5-7B"}}); r.status != http.StatusCreated {
		t.Fatalf("put pool with a slash: %d %s", r.status, r.body)
	}
	if r := h.admin("GET", "/admin/v1/batch/pools/Qwen/Qwen2.5-7B", nil); r.status != 200 || r.json(t)["name"] != "Qwen/Qwen2.5-7B" {
		t.Fatalf("get pool: %d %s", r.status, r.body)
	}
	if r := h.admin("PUT", "/admin/v1/batch/queues/moe/acme", map[string]any{"weight": 2, "max_enqueued_lines": 1000}); r.status != http.StatusCreated {
		t.Fatalf("put queue: %d %s", r.status, r.body)
	}
	q, _, err := kv.Get[batch.Queue](ctx, queues, batch.QueueKey("moe", "acme"))
	if err != nil || q.Pool != "moe" || q.Tenant != "acme" || q.Weight != 2 || q.MaxEnqueuedLines != 1000 {
		t.Fatalf("stored queue %+v %v", q, err)
	}
	if r := h.admin("PUT", "/admin/v1/batch/queues/Qwen/Qwen2.5-7B/acme", map[string]any{"weight": 3}); r.status != http.StatusCreated {
		t.Fatalf("put queue in a pool with a slash: %d %s", r.status, r.body)
	}
	r := h.admin("GET", "/admin/v1/batch/queues?tenant=acme", nil)
	var ql struct{ Data []batch.Queue }
	if err := json.Unmarshal(r.body, &ql); err != nil || len(ql.Data) != 2 {
		t.Fatalf("list queues: %s", r.body)
	}
	if r := h.admin("GET", "/admin/v1/batch/queues?pool=moe", nil); !strings.Contains(r.String(), `"weight":2`) || strings.Contains(r.String(), "Qwen") {
		t.Fatalf("list queues of a pool: %s", r.body)
	}
	if r := h.admin("GET", "/admin/v1/batch/queues/moe/acme", nil); r.status != 200 || r.json(t)["weight"] != 2.0 {
		t.Fatalf("get queue: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/admin/v1/batch/flavors", "/admin/v1/batch/cohorts", "/admin/v1/batch/pools"} {
		if r := h.admin("GET", path, nil); r.status != 200 || len(r.json(t)["data"].([]any)) == 0 {
			t.Fatalf("list %s: %d %s", path, r.status, r.body)
		}
	}

	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"PUT", "/admin/v1/batch/pools/bad", map[string]any{"models": []string{"m"}, "quotas": []map[string]any{{"flavor": "a", "lines": -1}}}, 400, "invalid_request"},
		{"PUT", "/admin/v1/batch/pools/bad", map[string]any{"models": []string{"m"}, "quotas": []map[string]any{{"flavor": "a"}, {"flavor": "a"}}}, 400, "invalid_request"},
		{"PUT", "/admin/v1/batch/pools/bad", map[string]any{"quotas": []map[string]any{}}, 400, "invalid_request"},
		{"PUT", "/admin/v1/batch/pools/bad", map[string]any{"models": []string{"m"}, "weight": -1}, 400, "invalid_request"},
		{"PUT", "/admin/v1/batch/pools/bad", map[string]any{"models": []string{"m"}, "quota": 1}, 400, "invalid_json"},
		{"PUT", "/admin/v1/batch/pools/bad", map[string]any{"name": "other", "models": []string{"m"}}, 400, "invalid_request"},
		{"PUT", "/admin/v1/batch/flavors/no.dots", map[string]any{}, 400, "invalid_request"},
		{"PUT", "/admin/v1/batch/queues/moe/acme", map[string]any{"weight": -2}, 400, "invalid_request"},
		{"PUT", "/admin/v1/batch/queues/moe/nobody", map[string]any{"weight": 1}, 404, "not_found"},
		{"PUT", "/admin/v1/batch/queues/acme", map[string]any{"weight": 1}, 400, "invalid_request"},
		{"GET", "/admin/v1/batch/pools/none", nil, 404, "not_found"},
		{"GET", "/admin/v1/batch/queues/moe/globex", nil, 404, "not_found"},
		{"DELETE", "/admin/v1/batch/cohorts/none", nil, 404, "not_found"},
	} {
		apiError(t, h.admin(tc.method, tc.path, tc.body), tc.status, tc.code)
	}
	apiError(t, h.do("GET", "/admin/v1/batch/pools", "sk-nope", nil, nil), 401, "invalid_api_key")

	if r := h.admin("DELETE", "/admin/v1/batch/queues/moe/acme", nil); r.status != 200 {
		t.Fatalf("delete queue: %d %s", r.status, r.body)
	}
	if r := h.admin("DELETE", "/admin/v1/batch/pools/Qwen/Qwen2.5-7B", nil); r.status != 200 {
		t.Fatalf("delete pool: %d %s", r.status, r.body)
	}
	if _, _, err := kv.Get[batch.Queue](ctx, queues, batch.QueueKey("moe", "acme")); err == nil {
		t.Fatal("queue still there")
	}
}

// The scheduler's state comes from the batch service; without it the
// answer says so.
func TestBatchQueuesStatus(t *testing.T) {
	h := startBatchEdge(t, nil)
	e := apiError(t, h.admin("GET", "/admin/v1/batch/queues/status", nil), http.StatusServiceUnavailable, "service_unavailable")
	if !strings.Contains(e["message"].(string), "batch service is not running") {
		t.Fatalf("message %v", e["message"])
	}
	want := batch.QueuesReply{At: 1700000000,
		Pools:  []batch.PoolStatus{{Name: "moe", Models: []string{"m"}, Flavors: []batch.FlavorStatus{{Flavor: "cpu-moe", Nominal: 8, InUse: 6, Borrowed: 2}}}},
		Queues: []batch.QueueStatus{{Pool: "moe", Tenant: "acme", Weight: 2, Share: 0.4, Admitted: 6, Borrowed: 2, Waiting: 100, Held: true}}}
	asked := make(chan batch.QueryRequest, 4)
	sub, err := h.nc.Subscribe(events.BatchQuery, func(m *nats.Msg) {
		var q batch.QueryRequest
		_ = json.Unmarshal(m.Data, &q)
		asked <- q
		b, _ := json.Marshal(want)
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r := h.admin("GET", "/admin/v1/batch/queues/status", nil)
	var got batch.QueuesReply
	if err := json.Unmarshal(r.body, &got); r.status != 200 || err != nil {
		t.Fatalf("status: %d %s", r.status, r.body)
	}
	if len(got.Queues) != 1 || got.Queues[0] != want.Queues[0] || got.Pools[0].Flavors[0] != want.Pools[0].Flavors[0] || got.At != want.At {
		t.Fatalf("status %+v, want %+v", got, want)
	}
	if q := <-asked; q.Kind != batch.QueryQueues || len(asked) != 0 {
		t.Fatalf("asked %+v, %d more", q, len(asked))
	}
}

// A tenant webhook's secret is made by the edge, shown once, kept only
// sealed, and never shown again; URLs that cannot be a receiver, or that
// reach a metadata service, are refused.
func TestTenantWebhookAdmin(t *testing.T) {
	h := startBatchEdge(t, nil)
	h.tenantKey("acme")
	url := "https://hooks.example.com/aiforge?x=1"
	r := h.admin("PUT", "/admin/v1/tenants/acme/webhook", map[string]any{"url": url, "events": []string{"batch.completed", "batch.failed", "batch.completed"}})
	if r.status != 200 {
		t.Fatalf("put webhook: %d %s", r.status, r.body)
	}
	m := r.json(t)
	secret, _ := m["secret"].(string)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if !strings.HasPrefix(secret, "whsec_") || err != nil || len(raw) != 32 {
		t.Fatalf("secret %q", secret)
	}
	if evs := m["events"].([]any); len(evs) != 2 || m["url"] != url {
		t.Fatalf("webhook %v", m)
	}
	store := h.kv(events.BucketTenants)
	e, err := store.Get(context.Background(), "t.acme")
	if err != nil || strings.Contains(string(e.Value()), secret) || strings.Contains(string(e.Value()), strings.TrimPrefix(secret, "whsec_")) {
		t.Fatalf("the tenant record holds the secret in clear (%v)", err)
	}
	var tenant registry.Tenant
	if err := json.Unmarshal(e.Value(), &tenant); err != nil || tenant.Webhook == nil {
		t.Fatalf("tenant %s", e.Value())
	}
	opened, err := h.secrets.Open(tenant.Webhook.SecretSealed, registry.WebhookSecretContext("acme", url))
	if err != nil || string(opened) != secret {
		t.Fatalf("the sealed secret does not open to the one shown: %v", err)
	}
	for _, path := range []string{"/admin/v1/tenants/acme/webhook", "/admin/v1/tenants/acme", "/admin/v1/tenants"} {
		r := h.admin("GET", path, nil)
		if r.status != 200 || strings.Contains(r.String(), secret) || strings.Contains(r.String(), "secret") || !strings.Contains(r.String(), "hooks.example.com") {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	if strings.Contains(h.logs.String(), strings.TrimPrefix(secret, "whsec_")) {
		t.Fatal("the secret is in the logs")
	}
	// Setting it again makes a new secret.
	r2 := h.admin("PUT", "/admin/v1/tenants/acme/webhook", map[string]any{"url": "http://127.0.0.1:9999/hook"})
	if r2.status != 200 || r2.json(t)["secret"] == secret || len(r2.json(t)["events"].([]any)) != 4 {
		t.Fatalf("second put: %d %s", r2.status, r2.body)
	}
	for _, bad := range []string{"ftp://example.com/x", "example.com/hook", "http://169.254.169.254/latest/meta-data", "http://[fe80::1]/x",
		"http://metadata.google.internal/computeMetadata", "https://user:pass@example.com/x", "http://[fd00:ec2::254]/", "http://0.0.0.0/", "http:///x"} {
		apiError(t, h.admin("PUT", "/admin/v1/tenants/acme/webhook", map[string]any{"url": bad}), 400, "invalid_value")
	}
	apiError(t, h.admin("PUT", "/admin/v1/tenants/acme/webhook", map[string]any{"url": url, "events": []string{"batch.started"}}), 400, "invalid_value")
	apiError(t, h.admin("PUT", "/admin/v1/tenants/acme/webhook", map[string]any{}), 400, "missing_required_parameter")
	apiError(t, h.admin("PUT", "/admin/v1/tenants/nobody/webhook", map[string]any{"url": url}), 404, "not_found")
	if r := h.admin("DELETE", "/admin/v1/tenants/acme/webhook", nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	apiError(t, h.admin("GET", "/admin/v1/tenants/acme/webhook", nil), 404, "not_found")
	apiError(t, h.admin("DELETE", "/admin/v1/tenants/acme/webhook", nil), 404, "not_found")
}

// An edge without the secrets key cannot keep a webhook secret.
func TestTenantWebhookNeedsSecretsKey(t *testing.T) {
	h := startEdge(t, func(c *edge.Config) { c.SecretsKey = nil })
	h.tenantKey("acme")
	apiError(t, h.admin("PUT", "/admin/v1/tenants/acme/webhook", map[string]any{"url": "https://example.com/h"}), 400, "invalid_request")
}

// Prices take a batch discount; model bindings take a worker class and a
// supervised engine process, checked.
func TestBatchDiscountAndEngineProcess(t *testing.T) {
	h := startEdge(t, nil)
	if r := h.admin("POST", "/admin/v1/prices", map[string]any{"model": "m", "input_per_mtok_usd": 1, "output_per_mtok_usd": 2, "batch_discount": 0.3}); r.status != 201 {
		t.Fatalf("price: %d %s", r.status, r.body)
	}
	r := h.admin("GET", "/admin/v1/prices", nil)
	if !strings.Contains(r.String(), `"batch_discount":0.3`) {
		t.Fatalf("prices %s", r.body)
	}
	apiError(t, h.admin("POST", "/admin/v1/prices", map[string]any{"model": "m", "batch_discount": 1.5}), 400, "invalid_request")

	r = h.admin("POST", "/admin/v1/models", map[string]any{"name": "deepseek", "engine": map[string]any{"model": "deepseek-v3", "class": "cpu-moe",
		"process": map[string]any{"kind": "llama-server", "model_path": "/models/ds.gguf", "port": 8091, "moe_placement": "auto", "slots": 8,
			"args": []string{"--mlock"}, "env": map[string]string{"LLAMA_ARG_THREADS": "32"}}}})
	if r.status != 201 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	eng := r.json(t)["engine"].(map[string]any)
	proc := eng["process"].(map[string]any)
	if eng["class"] != "cpu-moe" || eng["base_url"] != "http://127.0.0.1:8091/v1" || proc["kind"] != "llama-server" || proc["moe_placement"] != "auto" || proc["slots"] != 8.0 {
		t.Fatalf("engine %v", eng)
	}
	for _, tc := range []map[string]any{
		{"kind": "vllm", "model_path": "/m.gguf", "port": 1},
		{"kind": "llama-server", "port": 1},
		{"kind": "coli", "model_path": "/m.gguf", "port": 70000},
		{"kind": "llama-server", "model_path": "/m.gguf", "port": 1, "moe_placement": "gpu"},
		{"kind": "llama-server", "model_path": "/m.gguf", "port": 1, "env": map[string]string{"A=B": "x"}},
	} {
		apiError(t, h.admin("POST", "/admin/v1/models", map[string]any{"name": "bad", "engine": map[string]any{"model": "x", "process": tc}}), 400, "invalid_request")
	}
	apiError(t, h.admin("POST", "/admin/v1/models", map[string]any{"name": "bad", "engine": map[string]any{"model": "x", "base_url": "http://a/v1", "class": "no spaces"}}), 400, "invalid_request")
	// Ollama may serve a model it already has: no model_path needed.
	if r := h.admin("POST", "/admin/v1/models", map[string]any{"name": "qwen", "engine": map[string]any{"model": "qwen2.5:7b", "process": map[string]any{"kind": "ollama", "port": 11435, "moe_placement": "12"}}}); r.status != 201 {
		t.Fatalf("ollama: %d %s", r.status, r.body)
	}
}
