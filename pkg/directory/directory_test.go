package directory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/registry"
)

type fixture struct {
	reg     *registry.Store
	cat     *catalog.Store
	workers *registry.Workers
	mu      sync.Mutex
	changes []directory.Change
}

func (f *fixture) seen(c directory.Change) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.changes {
		if x == c {
			return true
		}
	}
	return false
}

func setup(t *testing.T) *fixture {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{}
	if f.reg, err = registry.Open(ctx, js); err != nil {
		t.Fatal(err)
	}
	if f.cat, err = catalog.Open(ctx, js); err != nil {
		t.Fatal(err)
	}
	if f.workers, err = registry.OpenWorkers(ctx, js); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) start(t *testing.T) *directory.View {
	t.Helper()
	return f.startWith(t, directory.Options{})
}

func (f *fixture) startWith(t *testing.T, opts directory.Options) *directory.View {
	t.Helper()
	v := directory.New(f.reg, f.cat, directory.Options{Workers: opts.Workers, OnChange: func(c directory.Change) {
		f.mu.Lock()
		f.changes = append(f.changes, c)
		f.mu.Unlock()
	}})
	if v.Synced() {
		t.Fatal("Synced before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := v.WaitSynced(wctx); err != nil {
		t.Fatalf("WaitSynced: %v", err)
	}
	if !v.Synced() {
		t.Fatal("WaitSynced returned but not Synced")
	}
	return v
}

func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) adapter(t *testing.T, name, base string, publish bool) {
	t.Helper()
	ctx := context.Background()
	v, err := f.cat.AddVersion(ctx, name, events.ModelKindAdapter, base, catalog.Version{Status: catalog.StatusScanning})
	if err != nil {
		t.Fatal(err)
	}
	if publish {
		if _, err := f.cat.ApplyVerdict(ctx, events.ModelVerdictV1{Name: name, Version: v.Version, Status: events.VerdictPublished, ScannedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
}

var engine = registry.Engine{BaseURL: "http://127.0.0.1:1/v1", Model: "upstream"}

// The initial state is loaded before Synced, and later changes, deletions
// included, are seen and reported.
func TestInitialStateAndChanges(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if _, err := f.reg.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	k1, _, err := f.reg.CreateKey(ctx, "acme", "one", nil, registry.Limits{RPM: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.reg.PutModel(ctx, registry.Model{Name: "chat", Engine: engine}); err != nil {
		t.Fatal(err)
	}
	v := f.start(t)

	if k := v.Key(k1.ID); k == nil || k.RPM != 5 || k.Tenant != "acme" {
		t.Fatalf("Key(%s) = %+v", k1.ID, k)
	}
	if _, ok := v.Tenant("acme"); !ok {
		t.Fatal("tenant acme not in the initial state")
	}
	if m, ok := v.Served("chat"); !ok || m.Engine.Model != "upstream" {
		t.Fatalf("Served(chat) = %+v, %v", m, ok)
	}
	if len(f.changes) != 0 {
		t.Fatalf("the initial state was reported as changes: %+v", f.changes)
	}

	k2, _, err := f.reg.CreateKey(ctx, "acme", "two", []string{"chat"}, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return v.Key(k2.ID) != nil }, "a new key")
	if _, err := f.reg.UpdateTenantLimits(ctx, "acme", func(l *registry.Limits) { l.MaxBudgetUSD = 7 }); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { tn, _ := v.Tenant("acme"); return tn.MaxBudgetUSD == 7 }, "a tenant's new limits")

	if err := f.reg.RevokeKey(ctx, k1.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return v.Key(k1.ID) == nil }, "a revoked key gone")
	eventually(t, func() bool { return f.seen(directory.Change{Kind: directory.KindKey, ID: k1.ID, Deleted: true}) }, "the revocation reported")
	if got := len(v.Keys()); got != 1 {
		t.Fatalf("Keys() has %d keys, want 1", got)
	}

	if err := f.reg.DeleteModel(ctx, "chat"); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { _, ok := v.Model("chat"); return !ok }, "a deleted model gone")
	eventually(t, func() bool { return f.seen(directory.Change{Kind: directory.KindModel, ID: "chat", Deleted: true}) }, "the model deletion reported")
}

// A published adapter of a registered base is served under its own name;
// without a price of its own it costs what its base costs, until it gets
// one.
func TestAdaptersAndPrices(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := f.reg.PutModel(ctx, registry.Model{Name: "base", Engine: engine, OwnedBy: "acme"}); err != nil {
		t.Fatal(err)
	}
	basePrice := registry.Price{InputPerMTokUSD: 1, OutputPerMTokUSD: 2, CachedInputPerMTokUSD: 1}
	if _, err := f.reg.SetPrice(ctx, "base", basePrice); err != nil {
		t.Fatal(err)
	}
	f.adapter(t, "sql", "base", true)
	f.adapter(t, "draft", "base", false)
	f.adapter(t, "orphan", "ghost", true)
	v := f.start(t)

	m, ok := v.Served("sql")
	if !ok || m.Name != "sql" || m.Engine != engine || m.OwnedBy != "acme" {
		t.Fatalf("Served(sql) = %+v, %v", m, ok)
	}
	if a, ok := v.Adapter("sql"); !ok || a.Base != "base" || a.Version != 1 {
		t.Fatalf("Adapter(sql) = %+v, %v", a, ok)
	}
	for _, name := range []string{"draft", "orphan", "ghost"} {
		if _, ok := v.Served(name); ok {
			t.Errorf("%s is served", name)
		}
	}
	if _, ok := v.Adapter("orphan"); !ok {
		t.Error("a published adapter of an unregistered base is not listed as an adapter")
	}
	served := map[string]bool{}
	for _, m := range v.ServedModels() {
		served[m.Name] = true
	}
	if len(served) != 2 || !served["base"] || !served["sql"] {
		t.Fatalf("ServedModels = %v", served)
	}

	h, ok := v.Price("sql")
	if p, _ := h.At(time.Now()); !ok || h.Model != "sql" || p.OutputPerMTokUSD != 2 {
		t.Fatalf("Price(sql) = %+v, %v: want the base's price", h, ok)
	}
	if _, ok := v.Price("ghost"); ok {
		t.Fatal("an unpriced model has a price")
	}
	byModel := func() map[string]float64 {
		out := map[string]float64{}
		for _, h := range v.Prices() {
			p, _ := h.At(time.Now())
			out[h.Model] = p.OutputPerMTokUSD
		}
		return out
	}
	if got := byModel(); len(got) != 3 || got["base"] != 2 || got["sql"] != 2 || got["draft"] != 2 {
		t.Fatalf("Prices = %v: want base and its two adapters at the base's price", got)
	}

	own := registry.Price{InputPerMTokUSD: 3, OutputPerMTokUSD: 9, CachedInputPerMTokUSD: 3}
	if _, err := f.reg.SetPrice(ctx, "sql", own); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return byModel()["sql"] == 9 }, "the adapter's own price")
	if got := byModel(); got["base"] != 2 || got["draft"] != 2 {
		t.Fatalf("Prices = %v after sql got its own price", got)
	}

	if _, err := f.cat.Deploy(ctx, "base", "sql", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { d, ok := v.Deployment("base"); return ok && d.Catalog == "sql" && d.Version == 1 }, "a deployment")

	if err := f.cat.Delete(ctx, "draft"); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { _, ok := byModel()["draft"]; return !ok }, "a deleted adapter unpriced")
}

// Note* make a write of this process visible at once and report it.
func TestNote(t *testing.T) {
	f := setup(t)
	v := f.start(t)
	k := registry.Key{ID: "key1", Tenant: "acme"}
	v.NoteKey(k)
	if got := v.Key("key1"); got == nil || got.Tenant != "acme" {
		t.Fatalf("Key after NoteKey = %+v", got)
	}
	v.NoteKeyDeleted("key1")
	if v.Key("key1") != nil {
		t.Fatal("key still there after NoteKeyDeleted")
	}
	if !f.seen(directory.Change{Kind: directory.KindKey, ID: "key1", Deleted: true}) {
		t.Fatal("NoteKeyDeleted not reported")
	}
	v.NoteModel(registry.Model{Name: "m", Engine: engine})
	if _, ok := v.Served("m"); !ok {
		t.Fatal("model not served after NoteModel")
	}
	v.NoteModelDeleted("m")
	if _, ok := v.Model("m"); ok {
		t.Fatal("model still there after NoteModelDeleted")
	}
	v.NoteTenant(registry.Tenant{ID: "acme"})
	if _, ok := v.Tenant("acme"); !ok {
		t.Fatal("tenant not there after NoteTenant")
	}
	v.NotePrice(registry.PriceHistory{Model: "m", Prices: []registry.Price{{OutputPerMTokUSD: 1}}})
	if _, ok := v.Price("m"); !ok {
		t.Fatal("price not there after NotePrice")
	}
}

// A view built with Options.Workers follows the replicas' state; an
// adapter is served by its base's replicas.
func TestWorkers(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := f.reg.PutModel(ctx, registry.Model{Name: "base", Engine: engine}); err != nil {
		t.Fatal(err)
	}
	f.adapter(t, "ad", "base", true)
	put := func(model, id, state string) {
		t.Helper()
		if err := f.workers.Put(ctx, registry.WorkerState{Model: model, WorkerID: id, State: state}); err != nil {
			t.Fatal(err)
		}
	}
	put("base", "w-2", registry.WorkerServing)
	v := f.startWith(t, directory.Options{Workers: f.workers})
	put("base", "w-1", registry.WorkerUnreachable)
	put("other", "w-3", registry.WorkerServing)
	eventually(t, func() bool { return len(v.AllWorkers()) == 3 }, "three replicas")
	ws := v.Workers("ad")
	if len(ws) != 2 || ws[0].WorkerID != "w-1" || ws[1].WorkerID != "w-2" || ws[0].State != registry.WorkerUnreachable {
		t.Fatalf("Workers(adapter) = %+v", ws)
	}
	if !f.seen(directory.Change{Kind: directory.KindWorker, ID: "other\x00w-3"}) {
		t.Error("no change reported for a new replica")
	}
	if err := f.workers.Delete(ctx, "base", "w-2"); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return len(v.Workers("base")) == 1 }, "the deleted replica gone")
	// The workers that serve an adapter report under its name: their state
	// is the adapter's.
	put("ad", "w-9", registry.WorkerMisnamed)
	eventually(t, func() bool { ws := v.Workers("ad"); return len(ws) == 1 && ws[0].WorkerID == "w-9" }, "the adapter's own replica")
	if plain := f.start(t); plain.Workers("base") != nil {
		t.Error("a view without Options.Workers lists replicas")
	}
}

// A model a tenant owns (its adapter, or a deployment of its catalog
// entry) is permitted to that tenant's keys only; the platform's models to
// every key that allows them.
func TestOwnedModelsPermitOwnerOnly(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := f.reg.PutModel(ctx, registry.Model{Name: "base", Engine: engine}); err != nil {
		t.Fatal(err)
	}
	if err := f.reg.PutModel(ctx, registry.Model{Name: "acme-chat", Engine: engine}); err != nil {
		t.Fatal(err)
	}
	publish := func(tenant, name, kind, base string) {
		t.Helper()
		v, err := f.cat.AddOwnedVersion(ctx, tenant, name, kind, base, catalog.Version{Status: catalog.StatusScanning})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.cat.ApplyVerdict(ctx, events.ModelVerdictV1{Name: name, Version: v.Version, Status: events.VerdictPublished, ScannedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	publish("acme", "acme/lora", events.ModelKindAdapter, "base")
	publish("acme", "acme/tiny", events.ModelKindModel, "")
	if _, err := f.cat.Deploy(ctx, "acme-chat", "acme/tiny", 0); err != nil {
		t.Fatal(err)
	}
	v := f.start(t)
	eventually(t, func() bool { _, ok := v.Deployment("acme-chat"); return ok }, "the deployment")
	acme := &registry.Key{Tenant: "acme", Models: []string{"*"}}
	globex := &registry.Key{Tenant: "globex", Models: []string{"*"}}
	for _, c := range []struct {
		model, owner string
		acme, globex bool
	}{{"base", "", true, true}, {"acme/lora", "acme", true, false}, {"acme-chat", "acme", true, false}} {
		if got := v.Owner(c.model); got != c.owner {
			t.Errorf("Owner(%s) = %q, want %q", c.model, got, c.owner)
		}
		if v.Permits(acme, c.model) != c.acme || v.Permits(globex, c.model) != c.globex {
			t.Errorf("%s: acme %v, globex %v; want %v, %v", c.model, v.Permits(acme, c.model), v.Permits(globex, c.model), c.acme, c.globex)
		}
	}
	if v.Permits(&registry.Key{Tenant: "acme", Models: []string{"base"}}, "acme/lora") {
		t.Error("the owner's key without the adapter on its allow-list was permitted it")
	}
}
