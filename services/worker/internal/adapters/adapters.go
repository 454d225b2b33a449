// Package adapters serves the catalog's LoRA adapters of the models a
// supervisor runs. Every entry of kind adapter whose base model is one of
// those models is served as a model of its own. Its newest published
// version is materialised from the object store into Dir/<escaped
// name>/v<N>/ (sizes and SHA-256 checked against the catalog), loaded into
// the base model's engine through vLLM's runtime LoRA API (POST
// /v1/load_lora_adapter) under the adapter's catalog name, and served on the
// bus by a worker whose upstream model is that name. A newer version is
// unloaded and loaded again from its own directory; a deleted adapter is
// unloaded and no longer served; an adapter the engine forgot (a restart)
// fails the worker's health check and is loaded again.
package adapters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker"
	"github.com/aiforge/aiforge/services/worker/internal/engine"
	"github.com/aiforge/aiforge/services/worker/internal/supervise"
)

// Config configures a Manager.
type Config struct {
	// WorkerDefaults are the settings of every adapter worker (as
	// worker.Config.Bound uses them).
	WorkerDefaults worker.Config
	// RetryInterval paces retries (supervise.NewBackoff); required.
	RetryInterval time.Duration
	// Dir is where adapter files are materialised for the engines to load;
	// required.
	Dir string
}

// Deps are a Manager's collaborators.
type Deps struct {
	JS      jetstream.JetStream
	Objects objstore.Store
	Logger  *slog.Logger
	// Worker are the deps of the adapter workers; Worker.HTTPClient, which
	// also talks to the LoRA API, is required.
	Worker worker.Deps
}

// Manager serves the adapters of the base models it is given.
type Manager struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	mu       sync.Mutex
	runCtx   context.Context
	bases    map[string]registry.Model // base model name -> binding
	entries  map[string]catalog.Entry  // adapter name -> entry
	keys     map[string]string         // catalog KV key -> adapter name
	adapters map[string]*adapterRun    // adapter name -> run
	status   map[string]string
	wg       sync.WaitGroup
}

// adapterRun is one adapter version being served on one base binding.
type adapterRun struct {
	name    string
	base    registry.Model
	version catalog.Version
	cancel  context.CancelFunc
	done    chan struct{}
	// prev is the run this one replaces; it must be gone before this one
	// touches the engine.
	prev *adapterRun
	// unload asks the run to unload the adapter from the engine as it stops
	// (deleted, no longer published, base gone or moved); a run replaced by
	// a newer version leaves that to its successor.
	unload atomic.Bool
}

// New returns a Manager; Run starts it.
func New(cfg Config, deps Deps) *Manager {
	return &Manager{
		cfg: cfg, deps: deps, log: deps.Logger,
		bases:    make(map[string]registry.Model),
		entries:  make(map[string]catalog.Entry),
		keys:     make(map[string]string),
		adapters: make(map[string]*adapterRun),
		status:   make(map[string]string),
	}
}

// Status returns each served adapter's state: "serving", "starting" or
// "error: ...".
func (m *Manager) Status() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.status)
}

// SetBases replaces the base models whose adapters are served.
func (m *Manager) SetBases(bases map[string]registry.Model) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bases = maps.Clone(bases)
	m.reconcileLocked()
}

// Run follows the catalog's adapters until ctx ends, reopening the catalog
// after failures (its buckets may not exist yet). On ctx done it stops every
// adapter run, leaving adapters loaded (the process is stopping; the next
// one finds them in place), and waits for them.
func (m *Manager) Run(ctx context.Context) {
	m.mu.Lock()
	m.runCtx = ctx
	m.reconcileLocked()
	m.mu.Unlock()
	defer m.stop()
	bo := supervise.NewBackoff(m.cfg.RetryInterval)
	for ctx.Err() == nil {
		store, err := catalog.Open(ctx, m.deps.JS)
		if err == nil {
			err = store.Watch(ctx, m.onCatalog)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("catalog watch ended")
		}
		m.log.Warn("catalog watch failed; retrying", "err", err)
		if !bo.Wait(ctx) {
			return
		}
	}
}

func (m *Manager) stop() {
	m.mu.Lock()
	for name, run := range m.adapters {
		run.cancel()
		delete(m.adapters, name)
	}
	clear(m.status)
	m.mu.Unlock()
	m.wg.Wait()
}

func (m *Manager) onCatalog(key string, e catalog.Entry, deleted, initialDone bool) {
	if initialDone {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if deleted {
		name, ok := m.keys[key]
		if !ok {
			return
		}
		delete(m.keys, key)
		delete(m.entries, name)
		m.reconcileLocked()
		return
	}
	if e.Kind != events.ModelKindAdapter {
		return
	}
	m.keys[key] = e.Name
	m.entries[e.Name] = e
	m.reconcileLocked()
}

// reconcileLocked starts, replaces and stops adapter runs so that every
// published adapter of a base model is served, at its newest published
// version.
func (m *Manager) reconcileLocked() {
	if m.runCtx == nil || m.runCtx.Err() != nil {
		return
	}
	type want struct {
		base    registry.Model
		version catalog.Version
	}
	desired := make(map[string]want)
	for name, e := range m.entries {
		v, ok := e.LatestPublished()
		if !ok {
			continue // uploading, mirroring, scanning or rejected: never served
		}
		b, ok := m.bases[e.BaseModel]
		if !ok {
			continue
		}
		desired[name] = want{base: b, version: *v}
	}
	replaced := make(map[string]*adapterRun)
	for name, run := range m.adapters {
		d, ok := desired[name]
		if ok && d.version.Version == run.version.Version && d.base.Engine == run.base.Engine {
			continue
		}
		switch {
		case !ok:
			m.log.Info("adapter no longer served; unloading it", "adapter", name, "version", run.version.Version)
			run.unload.Store(true)
		case d.base.Engine.BaseURL != run.base.Engine.BaseURL:
			run.unload.Store(true) // the new run loads it into another engine
			replaced[name] = run
		default:
			replaced[name] = run
		}
		run.cancel()
		delete(m.adapters, name)
		delete(m.status, name)
	}
	for name, d := range desired {
		if _, ok := m.adapters[name]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(m.runCtx)
		run := &adapterRun{name: name, base: d.base, version: d.version, cancel: cancel,
			done: make(chan struct{}), prev: replaced[name]}
		m.adapters[name] = run
		m.status[name] = supervise.StatusStarting
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer close(run.done)
			m.runAdapter(ctx, run)
		}()
	}
}

func (m *Manager) setStatus(run *adapterRun, st string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.adapters[run.name] == run {
		m.status[run.name] = st
	}
}

func (m *Manager) lora(eng registry.Engine) engine.LoRA {
	return engine.LoRA{HTTPClient: m.deps.Worker.HTTPClient, Engine: eng}
}

// runAdapter materialises, loads and serves one adapter version until ctx
// ends, retrying failures with backoff.
func (m *Manager) runAdapter(ctx context.Context, run *adapterRun) {
	log := m.log.With("adapter", run.name, "version", run.version.Version, "base_model", run.base.Name)
	prev := run.prev
	run.prev = nil
	defer func() {
		if prev != nil {
			<-prev.done // never unload under a predecessor still draining
		}
		if !run.unload.Load() {
			return
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.lora(run.base.Engine).Unload(uctx, run.name); err != nil {
			log.Warn("could not unload adapter", "err", err)
		} else {
			log.Info("adapter unloaded")
		}
	}()
	bo := supervise.NewBackoff(m.cfg.RetryInterval)
	lastErr := ""
	fail := func(err error) bool {
		if msg := err.Error(); msg != lastErr {
			log.Error("adapter failed; retrying", "err", err)
			lastErr = msg
		} else {
			log.Debug("adapter failed again; retrying", "err", err)
		}
		m.setStatus(run, supervise.StatusErrorPrefix+err.Error())
		return bo.Wait(ctx)
	}
	dir := ""
	for ctx.Err() == nil {
		if dir == "" {
			d, err := m.materialise(ctx, run.name, run.version)
			if err != nil {
				if ctx.Err() != nil || !fail(err) {
					return
				}
				continue
			}
			dir = d
		}
		if prev != nil {
			select {
			case <-prev.done:
				prev = nil
			case <-ctx.Done():
				return
			}
		}
		if err := m.lora(run.base.Engine).Ensure(ctx, run.name, dir); err != nil {
			if ctx.Err() != nil || !fail(err) {
				return
			}
			continue
		}
		log.Info("adapter loaded", "path", dir)
		err := m.serveAdapter(ctx, run, dir, log)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("adapter worker stopped unexpectedly")
		}
		if !fail(err) {
			return
		}
	}
}

// serveAdapter runs the adapter's worker until ctx ends or it fails; when a
// health check fails (the engine may have restarted and forgotten the
// adapter) it loads the adapter again, with backoff, until the worker
// recovers.
func (m *Manager) serveAdapter(ctx context.Context, run *adapterRun, dir string, log *slog.Logger) error {
	eng := run.base.Engine
	eng.Model = run.name
	cfg := m.cfg.WorkerDefaults.Bound(run.name, eng)
	cfg.EngineWaitMax = m.cfg.RetryInterval
	reload := make(chan struct{}, 1)
	deps := m.deps.Worker
	deps.Hooks = worker.Hooks{
		OnCheckFailed: func(err error) {
			m.setStatus(run, supervise.StatusErrorPrefix+err.Error())
			if errors.Is(err, worker.ErrEngineMisnamed) {
				// The engine does not list the adapter (restarted before
				// the worker's first check passed): load it again.
				select {
				case reload <- struct{}{}:
				default:
				}
			}
		},
		OnServing: func() { m.setStatus(run, supervise.StatusServing) },
		OnUnhealthy: func(err error) {
			m.setStatus(run, supervise.StatusErrorPrefix+"engine unhealthy: "+err.Error())
			select {
			case reload <- struct{}{}:
			default:
			}
		},
	}
	svc, err := worker.New(cfg, deps)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- svc.Run(sctx) }()
	bo := supervise.NewBackoff(m.cfg.RetryInterval)
	var retry <-chan time.Time
	for {
		select {
		case err := <-errc:
			return err
		case <-reload:
			retry = time.After(0)
		case <-retry:
			if err := m.lora(run.base.Engine).Ensure(ctx, run.name, dir); err != nil {
				if ctx.Err() == nil {
					log.Warn("could not load adapter again; retrying", "err", err)
				}
				retry = time.After(bo.Next())
				continue
			}
			retry = nil
			bo = supervise.NewBackoff(m.cfg.RetryInterval)
			log.Info("adapter loaded again after a failed health check")
		}
	}
}

// adapterDir is where a version's files are materialised.
func (m *Manager) adapterDir(name string, version int) string {
	return filepath.Join(m.cfg.Dir, url.PathEscape(name), "v"+strconv.Itoa(version))
}

// materialise copies a version's files from the object store into its
// directory, verified against the catalog (catalog.Materialise).
func (m *Manager) materialise(ctx context.Context, name string, v catalog.Version) (string, error) {
	dir := m.adapterDir(name, v.Version)
	if _, err := catalog.Materialise(ctx, m.deps.Objects, v, dir); err != nil {
		return "", fmt.Errorf("adapter %q: %w", name, err)
	}
	return dir, nil
}
