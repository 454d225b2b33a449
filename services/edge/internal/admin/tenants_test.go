package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/registry"
)

const testAdminKey = "admin-secret"

// adminAPI is the admin API over a fresh registry, with its directory.
func adminAPI(t *testing.T) (http.Handler, *registry.Store, *directory.View) {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	store, err := registry.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	dir := directory.New(store, nil, directory.Options{})
	mux := http.NewServeMux()
	New(Deps{Store: store, Directory: dir, AdminKey: testAdminKey, Logger: slog.New(slog.DiscardHandler)}).Routes(mux)
	return mux, store, dir
}

func call(t *testing.T, h http.Handler, bearer, method, path, body string) (int, map[string]any) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+bearer)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var out map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	return w.Code, out
}

// TestTenantTraceContentAPI: trace_content is off by default, set at
// creation or by PATCH, shown by GET and list, refused when not a
// boolean, and only the admin key may set it.
func TestTenantTraceContentAPI(t *testing.T) {
	h, store, dir := adminAPI(t)

	code, out := call(t, h, testAdminKey, "POST", "/admin/v1/tenants", `{"id":"plain"}`)
	if code != http.StatusCreated || out["trace_content"] != false {
		t.Fatalf("create plain: %d %v; want 201 with trace_content false", code, out)
	}
	code, out = call(t, h, testAdminKey, "POST", "/admin/v1/tenants", `{"id":"traced","trace_content":true}`)
	if code != http.StatusCreated || out["trace_content"] != true {
		t.Fatalf("create traced: %d %v", code, out)
	}
	if tn, ok := dir.Tenant("traced"); !ok || !tn.TraceContent {
		t.Fatalf("directory not told of the new tenant: %+v %v", tn, ok)
	}
	if code, out = call(t, h, testAdminKey, "GET", "/admin/v1/tenants/traced", ""); code != http.StatusOK || out["trace_content"] != true {
		t.Fatalf("get traced: %d %v", code, out)
	}

	// Not a boolean: 400 invalid_type, nothing created or changed.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/admin/v1/tenants", `{"id":"bad","trace_content":"yes"}`},
		{"PATCH", "/admin/v1/tenants/plain", `{"trace_content":1}`},
	} {
		code, out = call(t, h, testAdminKey, c.method, c.path, c.body)
		e, _ := out["error"].(map[string]any)
		if code != http.StatusBadRequest || e["param"] != "trace_content" {
			t.Errorf("%s %s %s: %d %v; want 400 on param trace_content", c.method, c.path, c.body, code, out)
		}
	}
	if _, err := store.GetTenant(context.Background(), "bad"); err == nil {
		t.Error("a tenant was created from a refused request")
	}

	// PATCH on, a limits-only PATCH keeps it, PATCH off.
	if code, out = call(t, h, testAdminKey, "PATCH", "/admin/v1/tenants/plain", `{"trace_content":true}`); code != http.StatusOK || out["trace_content"] != true {
		t.Fatalf("patch on: %d %v", code, out)
	}
	if tn, _ := dir.Tenant("plain"); !tn.TraceContent {
		t.Fatal("directory not told of the change")
	}
	if code, out = call(t, h, testAdminKey, "PATCH", "/admin/v1/tenants/plain", `{"max_budget_usd":3}`); code != http.StatusOK || out["trace_content"] != true {
		t.Fatalf("limits patch: %d %v; want trace_content kept", code, out)
	}
	if code, out = call(t, h, testAdminKey, "PATCH", "/admin/v1/tenants/plain", `{"trace_content":false}`); code != http.StatusOK || out["trace_content"] != false {
		t.Fatalf("patch off: %d %v", code, out)
	}
	code, out = call(t, h, testAdminKey, "GET", "/admin/v1/tenants", "")
	data, _ := out["data"].([]any)
	got := map[string]any{}
	for _, d := range data {
		m, _ := d.(map[string]any)
		got[m["id"].(string)] = m["trace_content"]
	}
	if code != http.StatusOK || got["plain"] != false || got["traced"] != true {
		t.Fatalf("list: %d %v", code, got)
	}

	// A tenant's own key cannot set it.
	_, secret, err := store.CreateKey(context.Background(), "plain", "k", []string{"*"}, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ = call(t, h, secret, "PATCH", "/admin/v1/tenants/plain", `{"trace_content":true}`); code != http.StatusUnauthorized {
		t.Fatalf("tenant key PATCH: %d, want 401", code)
	}
	if tn, _ := store.GetTenant(context.Background(), "plain"); tn.TraceContent {
		t.Fatal("a tenant key turned trace_content on")
	}
}
