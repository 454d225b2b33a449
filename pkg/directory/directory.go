// Package directory is the read-only view of the registry and the catalog
// that serving needs: tenants, API keys, model bindings, prices, published
// LoRA adapters and deployments, kept current by KV watches. A service
// reads it on its hot path without touching the bus; the view never writes
// to a bucket.
//
// Two rules live here and nowhere else: a published adapter whose base
// model is registered is served under its own name with its base's engine
// binding, and an adapter without a price of its own costs what its base
// costs.
package directory

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Kind names what a Change is about.
type Kind string

// Kinds of changes.
const (
	KindKey        Kind = "key"
	KindTenant     Kind = "tenant"
	KindModel      Kind = "model"
	KindPrice      Kind = "price"
	KindCatalog    Kind = "catalog"
	KindDeployment Kind = "deployment"
	// KindWorker: a worker replica's state changed or expired; ID is the
	// served model name and the worker id joined by a NUL byte. Only views
	// built with Options.Workers see it.
	KindWorker Kind = "worker"
	// KindRouter: a router changed; ID is its name. Only views built with
	// Options.Routers see it.
	KindRouter Kind = "router"
)

// Change is one update the view applied: ID is the key id, tenant id,
// model name, priced model, catalog entry name or deployed model.
type Change struct {
	Kind    Kind
	ID      string
	Deleted bool
}

// Adapter is a published LoRA adapter of the catalog.
type Adapter struct {
	Name string
	// Base is the model the adapter is loaded into.
	Base string
	// Version is the newest published version.
	Version   int
	CreatedAt time.Time
}

// Options tune a View.
type Options struct {
	Logger *slog.Logger
	// OnChange, when set, is called after each change the view applied once
	// the watch that delivered it had delivered its initial state (and for
	// each Note call). It runs on a watch goroutine: keep it short.
	OnChange func(Change)
	// RetryWait is how long a watch that ended waits before it starts
	// again. Default 1s.
	RetryWait time.Duration
	// Workers, when set, makes the view follow the worker replicas' state
	// too (Workers, ServableWorkers).
	Workers *registry.Workers
	// Routers, when set, makes the view follow the routers too (Router,
	// Routers).
	Routers bool
}

// View is the directory. Build it with New, start it with Run.
type View struct {
	reg  *registry.Store
	cat  *catalog.Store
	opts Options
	log  *slog.Logger

	mu          sync.RWMutex
	keys        *table[registry.Key]
	tenants     *table[registry.Tenant]
	models      *table[registry.Model]
	prices      *table[registry.PriceHistory]
	entries     *table[entry]
	deployments *table[catalog.Deployment]
	workers     *table[registry.WorkerState]
	routers     *table[registry.Router]

	pending    atomic.Int32 // watches that have not delivered their initial state yet
	syncedOnce sync.Once
	synced     chan struct{}
}

// entry is what the view keeps of a catalog entry.
type entry struct {
	name, kind, base string
	tenant           string // the owner (catalog.Entry.Tenant), "" for the platform's
	published        int    // newest published version, 0 when none
	createdAt        time.Time
}

const watches = 6 // and one more with each of Options.Workers and Options.Routers

// New builds a stopped view over the registry and the catalog.
func New(reg *registry.Store, cat *catalog.Store, opts Options) *View {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RetryWait <= 0 {
		opts.RetryWait = time.Second
	}
	v := &View{
		reg: reg, cat: cat, opts: opts, log: opts.Logger,
		keys:        newTable(func(k registry.Key) string { return k.ID }),
		tenants:     newTable(func(t registry.Tenant) string { return t.ID }),
		models:      newTable(func(m registry.Model) string { return m.Name }),
		prices:      newTable(func(h registry.PriceHistory) string { return h.Model }),
		entries:     newTable(func(e entry) string { return e.name }),
		deployments: newTable(func(d catalog.Deployment) string { return d.Model }),
		workers:     newTable(func(w registry.WorkerState) string { return w.Model + "\x00" + w.WorkerID }),
		routers:     newTable(func(r registry.Router) string { return r.Name }),
		synced:      make(chan struct{}),
	}
	n := int32(watches)
	if opts.Workers != nil {
		n++
	}
	if opts.Routers {
		n++
	}
	v.pending.Store(n)
	return v
}

// Run watches the buckets until ctx ends; a watch that fails or ends starts
// again after Options.RetryWait and replaces what it delivered before. Run
// returns nil when ctx ends.
func (v *View) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		follow(ctx, v, KindKey, v.keys, func(ctx context.Context, fn watchFn[registry.Key]) error {
			return v.reg.WatchKeys(ctx, registryWatch(fn))
		})
	})
	wg.Go(func() {
		follow(ctx, v, KindTenant, v.tenants, func(ctx context.Context, fn watchFn[registry.Tenant]) error {
			return v.reg.WatchTenants(ctx, registryWatch(fn))
		})
	})
	wg.Go(func() {
		follow(ctx, v, KindModel, v.models, func(ctx context.Context, fn watchFn[registry.Model]) error {
			return v.reg.WatchModels(ctx, registryWatch(fn))
		})
	})
	wg.Go(func() {
		follow(ctx, v, KindPrice, v.prices, func(ctx context.Context, fn watchFn[registry.PriceHistory]) error {
			return v.reg.WatchPrices(ctx, registryWatch(fn))
		})
	})
	wg.Go(func() {
		follow(ctx, v, KindCatalog, v.entries, func(ctx context.Context, fn watchFn[entry]) error {
			return v.cat.Watch(ctx, func(key string, e catalog.Entry, deleted, initialDone bool) {
				fn(key, entryOf(e), deleted, initialDone)
			})
		})
	})
	wg.Go(func() {
		follow(ctx, v, KindDeployment, v.deployments, func(ctx context.Context, fn watchFn[catalog.Deployment]) error {
			return v.cat.WatchDeployments(ctx, fn)
		})
	})
	if w := v.opts.Workers; w != nil {
		wg.Go(func() {
			follow(ctx, v, KindWorker, v.workers, func(ctx context.Context, fn watchFn[registry.WorkerState]) error {
				return w.Watch(ctx, registryWatch(fn))
			})
		})
	}
	if v.opts.Routers {
		wg.Go(func() {
			follow(ctx, v, KindRouter, v.routers, func(ctx context.Context, fn watchFn[registry.Router]) error {
				return v.reg.WatchRouters(ctx, registryWatch(fn))
			})
		})
	}
	wg.Wait()
	return nil
}

// Synced reports whether every watch has delivered its initial state.
func (v *View) Synced() bool { return v.pending.Load() == 0 }

// WaitSynced blocks until Synced or ctx ends.
func (v *View) WaitSynced(ctx context.Context) error {
	select {
	case <-v.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func entryOf(e catalog.Entry) entry {
	out := entry{name: e.Name, kind: e.Kind, base: e.BaseModel, tenant: e.Tenant, createdAt: e.CreatedAt}
	if p, ok := e.LatestPublished(); ok {
		out.published = p.Version
	}
	return out
}

type watchFn[T any] = func(kvKey string, v T, deleted, initialDone bool)

func registryWatch[T any](fn watchFn[T]) func(registry.Change[T], bool) {
	return func(c registry.Change[T], initialDone bool) { fn(c.Key, c.Value, c.Deleted, initialDone) }
}

// follow runs one watch until ctx ends. The initial state of each watch is
// collected aside and swapped in whole, so a restarted watch never shows a
// half-loaded table.
func follow[T any](ctx context.Context, v *View, kind Kind, t *table[T], watch func(context.Context, watchFn[T]) error) {
	first := true
	for ctx.Err() == nil {
		var staging *table[T]
		live := false
		err := watch(ctx, func(kvKey string, val T, deleted, initialDone bool) {
			switch {
			case initialDone:
				v.mu.Lock()
				changes := t.replace(staging)
				v.mu.Unlock()
				live, staging = true, nil
				if first {
					first = false
					if v.pending.Add(-1) == 0 {
						v.syncedOnce.Do(func() { close(v.synced) })
					}
				} else if v.opts.OnChange != nil {
					// A restarted watch: what changed while it was down.
					for _, c := range changes {
						c.Kind = kind
						v.opts.OnChange(c)
					}
				}
			case !live:
				if staging == nil {
					staging = newTable(t.id)
				}
				if !deleted {
					staging.put(kvKey, val)
				}
			default:
				v.mu.Lock()
				var id string
				if deleted {
					id = t.del(kvKey)
				} else {
					id = t.put(kvKey, val)
				}
				v.mu.Unlock()
				if id != "" && v.opts.OnChange != nil {
					v.opts.OnChange(Change{Kind: kind, ID: id, Deleted: deleted})
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("watch ended")
		}
		v.log.Warn("directory watch failed; retrying", "kind", string(kind), "err", err)
		t := time.NewTimer(v.opts.RetryWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Key is the API key with id, or nil.
func (v *View) Key(id string) *registry.Key {
	v.mu.RLock()
	k, ok := v.keys.byID[id]
	v.mu.RUnlock()
	if !ok {
		return nil
	}
	return &k
}

// Keys lists every key.
func (v *View) Keys() []registry.Key {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.keys.values()
}

// Tenant is the tenant with id.
func (v *View) Tenant(id string) (registry.Tenant, bool) {
	v.mu.RLock()
	t, ok := v.tenants.byID[id]
	v.mu.RUnlock()
	return t, ok
}

// Tenants lists every tenant.
func (v *View) Tenants() []registry.Tenant {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.tenants.values()
}

// Model is the registered binding of name (adapters aside).
func (v *View) Model(name string) (registry.Model, bool) {
	v.mu.RLock()
	m, ok := v.models.byID[name]
	v.mu.RUnlock()
	return m, ok
}

// Served resolves a served model name: a registered model, else a
// published adapter whose base model is registered, bound to its base's
// engine (the base's workers load it) under the adapter's name.
func (v *View) Served(name string) (registry.Model, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if m, ok := v.models.byID[name]; ok {
		return m, true
	}
	e, ok := v.entries.byID[name]
	if !ok || e.kind != events.ModelKindAdapter || e.published == 0 {
		return registry.Model{}, false
	}
	base, ok := v.models.byID[e.base]
	if !ok {
		return registry.Model{}, false
	}
	return registry.Model{Name: name, Engine: base.Engine, OwnedBy: base.OwnedBy, CreatedAt: e.createdAt}, true
}

// ServedModels lists every name Served resolves.
func (v *View) ServedModels() []registry.Model {
	v.mu.RLock()
	out := v.models.values()
	var adapters []string
	for name, e := range v.entries.byID {
		if _, registered := v.models.byID[name]; !registered && e.kind == events.ModelKindAdapter && e.published > 0 {
			adapters = append(adapters, name)
		}
	}
	v.mu.RUnlock()
	for _, name := range adapters {
		if m, ok := v.Served(name); ok {
			out = append(out, m)
		}
	}
	return out
}

// Workers lists the live worker replicas serving name, sorted by worker
// id: a registered model's own; for a published adapter, its own (the
// workers that serve it on its base's engine report under its name), else
// its base's. Nil without Options.Workers.
func (v *View) Workers(name string) []registry.WorkerState {
	v.mu.RLock()
	defer v.mu.RUnlock()
	of := func(model string) []registry.WorkerState {
		var out []registry.WorkerState
		for _, w := range v.workers.byID {
			if w.Model == model {
				out = append(out, w)
			}
		}
		return out
	}
	out := of(name)
	if _, ok := v.models.byID[name]; !ok && out == nil {
		if e, ok := v.entries.byID[name]; ok && e.kind == events.ModelKindAdapter && e.published > 0 {
			out = of(e.base)
		}
	}
	slices.SortFunc(out, func(a, b registry.WorkerState) int { return strings.Compare(a.WorkerID, b.WorkerID) })
	return out
}

// AllWorkers lists every live worker replica, sorted by model and worker
// id.
func (v *View) AllWorkers() []registry.WorkerState {
	v.mu.RLock()
	out := v.workers.values()
	v.mu.RUnlock()
	slices.SortFunc(out, func(a, b registry.WorkerState) int {
		if c := strings.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		return strings.Compare(a.WorkerID, b.WorkerID)
	})
	return out
}

// Router is the router name (views built with Options.Routers).
func (v *View) Router(name string) (registry.Router, bool) {
	v.mu.RLock()
	r, ok := v.routers.byID[name]
	v.mu.RUnlock()
	return r, ok
}

// Routers lists every router, sorted by name.
func (v *View) Routers() []registry.Router {
	v.mu.RLock()
	out := v.routers.values()
	v.mu.RUnlock()
	slices.SortFunc(out, func(a, b registry.Router) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// NoteRouter is NoteKey for a router.
func (v *View) NoteRouter(r registry.Router) { noteput(v, KindRouter, v.routers, r) }

// NoteRouterDeleted is NoteKeyDeleted for a router.
func (v *View) NoteRouterDeleted(name string) { notedel(v, KindRouter, v.routers, name) }

// Adapter is the published adapter name (whether or not its base is
// registered).
func (v *View) Adapter(name string) (Adapter, bool) {
	v.mu.RLock()
	e, ok := v.entries.byID[name]
	v.mu.RUnlock()
	if !ok || e.kind != events.ModelKindAdapter || e.published == 0 {
		return Adapter{}, false
	}
	return Adapter{Name: e.name, Base: e.base, Version: e.published, CreatedAt: e.createdAt}, true
}

// Owner is the tenant that owns the served model name: the owner of a
// tenant's adapter, or of the catalog entry a deployment runs; "" for the
// platform's models (every tenant's keys may be allowed them).
func (v *View) Owner(model string) string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if e, ok := v.entries.byID[model]; ok && e.kind == events.ModelKindAdapter {
		return e.tenant
	}
	if d, ok := v.deployments.byID[model]; ok {
		return v.entries.byID[d.Catalog].tenant
	}
	return ""
}

// Permits reports whether key k may use the served model name: its
// allow-list names it and, for a model a tenant owns (from its model
// bucket), k is that tenant's.
func (v *View) Permits(k *registry.Key, model string) bool {
	if !k.Allows(model) {
		return false
	}
	owner := v.Owner(model)
	return owner == "" || owner == k.Tenant
}

// Deployment is the catalog version the served name model runs.
func (v *View) Deployment(model string) (catalog.Deployment, bool) {
	v.mu.RLock()
	d, ok := v.deployments.byID[model]
	v.mu.RUnlock()
	return d, ok
}

// Price is the price history of model: its own, else, for an adapter of
// the catalog, its base model's (under the adapter's name).
func (v *View) Price(model string) (registry.PriceHistory, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.priceLocked(model)
}

func (v *View) priceLocked(model string) (registry.PriceHistory, bool) {
	if h, ok := v.prices.byID[model]; ok {
		return h, true
	}
	e, ok := v.entries.byID[model]
	if !ok || e.kind != events.ModelKindAdapter {
		return registry.PriceHistory{}, false
	}
	h, ok := v.prices.byID[e.base]
	if !ok {
		return registry.PriceHistory{}, false
	}
	return registry.PriceHistory{Model: model, Prices: h.Prices}, true
}

// Prices lists every price history in force: the registered ones, plus one
// for each adapter of the catalog without a price of its own whose base
// has one.
func (v *View) Prices() []registry.PriceHistory {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := v.prices.values()
	for name, e := range v.entries.byID {
		if _, own := v.prices.byID[name]; own || e.kind != events.ModelKindAdapter {
			continue
		}
		if h, ok := v.priceLocked(name); ok {
			out = append(out, h)
		}
	}
	return out
}

// NoteKey makes a key this process just wrote visible before the watch
// delivers it, so that a client using it at once is not refused by a
// watch that lags by a millisecond. The KV stays the source of truth: the
// watch's later delivery overwrites it.
func (v *View) NoteKey(k registry.Key) { noteput(v, KindKey, v.keys, k) }

// NoteKeyDeleted is NoteKey for a key this process just revoked.
func (v *View) NoteKeyDeleted(id string) { notedel(v, KindKey, v.keys, id) }

// NoteTenant is NoteKey for a tenant.
func (v *View) NoteTenant(t registry.Tenant) { noteput(v, KindTenant, v.tenants, t) }

// NoteModel is NoteKey for a model binding.
func (v *View) NoteModel(m registry.Model) { noteput(v, KindModel, v.models, m) }

// NoteModelDeleted is NoteKeyDeleted for a model binding.
func (v *View) NoteModelDeleted(name string) { notedel(v, KindModel, v.models, name) }

// NotePrice is NoteKey for a price history.
func (v *View) NotePrice(h registry.PriceHistory) { noteput(v, KindPrice, v.prices, h) }

func noteput[T any](v *View, kind Kind, t *table[T], val T) {
	v.mu.Lock()
	id := t.id(val)
	t.byID[id] = val
	v.mu.Unlock()
	if v.opts.OnChange != nil {
		v.opts.OnChange(Change{Kind: kind, ID: id})
	}
}

func notedel[T any](v *View, kind Kind, t *table[T], id string) {
	v.mu.Lock()
	delete(t.byID, id)
	for k, i := range t.idOf {
		if i == id {
			delete(t.idOf, k)
		}
	}
	v.mu.Unlock()
	if v.opts.OnChange != nil {
		v.opts.OnChange(Change{Kind: kind, ID: id, Deleted: true})
	}
}

// table holds the values of one bucket by id, and the id each KV key
// holds (a deletion carries only the KV key).
type table[T any] struct {
	id   func(T) string
	byID map[string]T
	idOf map[string]string
}

func newTable[T any](id func(T) string) *table[T] {
	return &table[T]{id: id, byID: map[string]T{}, idOf: map[string]string{}}
}

func (t *table[T]) put(kvKey string, v T) string {
	id := t.id(v)
	if old, ok := t.idOf[kvKey]; ok && old != id {
		delete(t.byID, old)
	}
	t.idOf[kvKey] = id
	t.byID[id] = v
	return id
}

func (t *table[T]) del(kvKey string) string {
	id, ok := t.idOf[kvKey]
	if !ok {
		return ""
	}
	delete(t.idOf, kvKey)
	delete(t.byID, id)
	return id
}

// replace takes the contents of s (nil: empty) and returns the ids it
// dropped or (re)set.
func (t *table[T]) replace(s *table[T]) []Change {
	if s == nil {
		s = newTable(t.id)
	}
	var changes []Change
	for id := range t.byID {
		if _, ok := s.byID[id]; !ok {
			changes = append(changes, Change{ID: id, Deleted: true})
		}
	}
	for id := range s.byID {
		changes = append(changes, Change{ID: id})
	}
	t.byID, t.idOf = s.byID, s.idOf
	return changes
}

func (t *table[T]) values() []T {
	out := make([]T, 0, len(t.byID))
	for _, v := range t.byID {
		out = append(out, v)
	}
	return out
}
