package edge_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
)

// A published adapter of a registered model is a model of its own; the
// listing names its parent, and a deployed model its catalog version.
func TestAdaptersAndDeploymentsListed(t *testing.T) {
	h := startEdge(t, nil)
	ctx := context.Background()
	cat, err := catalog.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	add := func(name, kind, base string, publish bool) {
		t.Helper()
		v, err := cat.AddVersion(ctx, name, kind, base, catalog.Version{Status: catalog.StatusScanning})
		if err != nil {
			t.Fatal(err)
		}
		if publish {
			if _, err := cat.ApplyVerdict(ctx, events.ModelVerdictV1{Name: name, Version: v.Version, Status: events.VerdictPublished, ScannedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.registerModel("base")
	key, _ := h.tenantKey("acme")
	add("sql", events.ModelKindAdapter, "base", true)
	add("draft", events.ModelKindAdapter, "base", false)
	add("orphan", events.ModelKindAdapter, "ghost", true)
	add("weights", events.ModelKindModel, "", true)
	if _, err := cat.Deploy(ctx, "base", "weights", 1); err != nil {
		t.Fatal(err)
	}

	list := func() map[string]map[string]any {
		r := h.do("GET", "/v1/models", key, nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		out := map[string]map[string]any{}
		for _, m := range r.json(t)["data"].([]any) {
			o := m.(map[string]any)
			out[o["id"].(string)] = o
		}
		return out
	}
	eventually(t, 10*time.Second, func() bool {
		l := list()
		return len(l) == 2 && l["sql"] != nil && l["base"]["aiforge_catalog"] == "weights"
	}, "the adapter and the deployment listed")
	l := list()
	if b := l["base"]; b["aiforge_version"] != 1.0 || b["parent"] != nil {
		t.Fatalf("base listed as %v", b)
	}
	if a := l["sql"]; a["parent"] != "base" || a["aiforge_catalog"] != "sql" || a["aiforge_version"] != 1.0 {
		t.Fatalf("adapter listed as %v", a)
	}
	if r := h.do("GET", "/v1/models/sql", key, nil, nil); r.status != http.StatusOK || r.json(t)["parent"] != "base" {
		t.Fatalf("get adapter: %d %s", r.status, r.body)
	}
	for _, name := range []string{"draft", "orphan"} {
		apiError(t, h.do("GET", "/v1/models/"+name, key, nil, nil), http.StatusNotFound, "model_not_found")
		apiError(t, h.do("POST", "/v1/chat/completions", key, chatBody(name, false), nil), http.StatusNotFound, "model_not_found")
	}
	// The adapter is admitted like any model: with no worker up, 503.
	apiError(t, h.do("POST", "/v1/chat/completions", key, chatBody("sql", false), nil), http.StatusServiceUnavailable, "model_unavailable")

	// A deleted adapter and an undeployed model are listed no more.
	if err := cat.Delete(ctx, "sql"); err != nil {
		t.Fatal(err)
	}
	if err := cat.Undeploy(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool {
		l := list()
		return len(l) == 1 && l["base"]["aiforge_catalog"] == nil
	}, "the adapter and the deployment gone")
}
