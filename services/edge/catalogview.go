package edge

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// catalogView is what the edge keeps of the catalog: published LoRA
// adapters, served as model names of their own when their base model is
// registered (the workers of the base load them into its engine), and the
// deployments, which /v1/models shows as the catalog version a served name
// runs.
type catalogView struct {
	mu          sync.RWMutex
	adapters    map[string]servedAdapter // adapter name -> newest published version
	adapterKeys map[string]string        // catalog KV key -> adapter name
	deployments map[string]catalog.Deployment
	deployKeys  map[string]string // deployments KV key -> model

	entriesSynced     atomic.Bool
	deploymentsSynced atomic.Bool
}

type servedAdapter struct {
	name      string
	base      string
	version   int
	createdAt time.Time
}

func (c *catalogView) synced() bool { return c.entriesSynced.Load() && c.deploymentsSynced.Load() }

// watchCatalogView follows the catalog and the deployments until ctx ends,
// reopening them after a failure.
func (s *Service) watchCatalogView(ctx context.Context) {
	c := &s.cv
	for ctx.Err() == nil {
		store, err := catalog.Open(ctx, s.deps.JS)
		if err == nil {
			c.mu.Lock() // a watch delivers everything again
			c.adapters = make(map[string]servedAdapter)
			c.adapterKeys = make(map[string]string)
			c.deployments = make(map[string]catalog.Deployment)
			c.deployKeys = make(map[string]string)
			c.mu.Unlock()
			var wg sync.WaitGroup
			wctx, cancel := context.WithCancel(ctx)
			errs := make([]error, 2)
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer cancel()
				errs[0] = store.Watch(wctx, c.onEntry)
			}()
			go func() {
				defer wg.Done()
				defer cancel()
				errs[1] = store.WatchDeployments(wctx, c.onDeployment)
			}()
			wg.Wait()
			err = errors.Join(errs...)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("watch ended")
		}
		s.log.Warn("catalog watch failed; retrying", "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (c *catalogView) onEntry(key string, e catalog.Entry, deleted, initialDone bool) {
	if initialDone {
		c.entriesSynced.Store(true)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if deleted {
		delete(c.adapters, c.adapterKeys[key])
		delete(c.adapterKeys, key)
		return
	}
	if e.Kind != events.ModelKindAdapter {
		return
	}
	c.adapterKeys[key] = e.Name
	v, ok := e.LatestPublished()
	if !ok {
		delete(c.adapters, e.Name) // uploading, scanning or rejected: not served
		return
	}
	c.adapters[e.Name] = servedAdapter{name: e.Name, base: e.BaseModel, version: v.Version, createdAt: e.CreatedAt}
}

func (c *catalogView) onDeployment(key string, d catalog.Deployment, deleted, initialDone bool) {
	if initialDone {
		c.deploymentsSynced.Store(true)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if deleted {
		delete(c.deployments, c.deployKeys[key])
		delete(c.deployKeys, key)
		return
	}
	c.deployKeys[key] = d.Model
	c.deployments[d.Model] = d
}

func (c *catalogView) adapter(name string) (servedAdapter, bool) {
	c.mu.RLock()
	a, ok := c.adapters[name]
	c.mu.RUnlock()
	return a, ok
}

func (c *catalogView) deployment(model string) (catalog.Deployment, bool) {
	c.mu.RLock()
	d, ok := c.deployments[model]
	c.mu.RUnlock()
	return d, ok
}

func (c *catalogView) adapterList() []servedAdapter {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]servedAdapter, 0, len(c.adapters))
	for _, a := range c.adapters {
		out = append(out, a)
	}
	return out
}

// lookupAdapter resolves a published adapter whose base model is
// registered as a model of its own: the base's engine binding (its workers
// serve the adapter) under the adapter's name.
func (s *Service) lookupAdapter(name string) (registry.Model, bool) {
	a, ok := s.cv.adapter(name)
	if !ok {
		return registry.Model{}, false
	}
	s.modelsMu.RLock()
	base, ok := s.models[a.base]
	s.modelsMu.RUnlock()
	if !ok {
		return registry.Model{}, false
	}
	return registry.Model{Name: name, Engine: base.Engine, OwnedBy: base.OwnedBy, CreatedAt: a.createdAt}, true
}

// adapterBase returns the base model of a served adapter, for prices: an
// adapter without a price of its own costs what its base costs.
func (s *Service) adapterBase(name string) (string, bool) {
	m, ok := s.lookupAdapter(name)
	if !ok {
		return "", false
	}
	a, _ := s.cv.adapter(m.Name)
	return a.base, true
}

// modelObjectOf is the /v1/models object of a served name: an adapter names
// its parent; a deployed model names the catalog version it runs.
func (s *Service) modelObjectOf(m registry.Model) modelObject {
	o := toModelObject(m)
	s.modelsMu.RLock()
	_, registered := s.models[m.Name]
	s.modelsMu.RUnlock()
	if !registered {
		if a, ok := s.cv.adapter(m.Name); ok {
			o.Parent, o.Catalog, o.Version = a.base, a.name, a.version
		}
		return o
	}
	if d, ok := s.cv.deployment(m.Name); ok {
		o.Catalog, o.Version = d.Catalog, d.Version
	}
	return o
}
