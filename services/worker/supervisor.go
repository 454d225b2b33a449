package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Supervisor statuses of a model.
const (
	StatusServing  = "serving"
	StatusStarting = "starting"
	statusErrorPfx = "error: "
)

// SupervisorConfig configures a Supervisor.
type SupervisorConfig struct {
	// WorkerDefaults holds the settings used for every worker:
	// HeartbeatInterval, HealthInterval, RequestTimeout, DrainTimeout,
	// Source. Model and Engine come from the registry; WorkerID, when set,
	// prefixes the generated ids.
	WorkerDefaults Config
	// RetryInterval separates failed starts of a worker. Default 2s.
	RetryInterval time.Duration
	// AdapterDir is where LoRA adapter files are materialised for the
	// engines to load (engines must see the same path). Default
	// os.TempDir()/aiforge-adapters.
	AdapterDir string
	// ModelsDir is where the deployed catalog version of each served model
	// is materialised (deployments.go): ModelsDir/<model>/current links to
	// it. Default os.TempDir()/aiforge-models.
	ModelsDir string
}

// SupervisorDeps are the Supervisor's collaborators (the workers').
type SupervisorDeps = Deps

// Supervisor runs one worker per model in the registry, in this process.
type Supervisor struct {
	cfg  SupervisorConfig
	deps Deps
	log  *slog.Logger

	mu      sync.Mutex
	workers map[string]*supervised // by model name
	byKey   map[string]string      // KV key -> model name
	status  map[string]string
	wg      sync.WaitGroup

	// LoRA adapters (adapters.go), guarded by mu.
	runCtx          context.Context
	catalogAdapters map[string]catalog.Entry // adapter name -> entry
	catalogKeys     map[string]string        // catalog KV key -> adapter name
	adapters        map[string]*adapterRun   // adapter name -> run
	adapterStatus   map[string]string

	// Deployments (deployments.go), guarded by deployMu.
	deployMu     sync.Mutex
	catalogStore *catalog.Store
	deployments  map[string]catalog.Deployment // KV key -> deployment
	deployStatus map[string]string             // served model -> state
	deployKick   chan struct{}
}

// supervised is one model's worker loop.
type supervised struct {
	binding registry.Model
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewSupervisor validates cfg and deps.
func NewSupervisor(cfg SupervisorConfig, deps Deps) (*Supervisor, error) {
	var errs []error
	if cfg.RetryInterval < 0 {
		errs = append(errs, errors.New("RetryInterval must not be negative"))
	}
	if cfg.WorkerDefaults.Engine.MaxConcurrency < 0 {
		errs = append(errs, errors.New("WorkerDefaults.Engine.MaxConcurrency must not be negative"))
	}
	errs = append(errs, cfg.WorkerDefaults.validateDurations(), deps.validate())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("worker supervisor: %w", err)
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = 2 * time.Second
	}
	if cfg.AdapterDir == "" {
		cfg.AdapterDir = filepath.Join(os.TempDir(), "aiforge-adapters")
	}
	if cfg.ModelsDir == "" {
		cfg.ModelsDir = filepath.Join(os.TempDir(), "aiforge-models")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.HTTPClient == nil {
		// One pool of engine connections for every worker of the process.
		deps.HTTPClient = NewHTTPClient()
	}
	return &Supervisor{
		cfg: cfg, deps: deps, log: deps.Logger.With("component", "worker-supervisor"),
		workers: make(map[string]*supervised),
		byKey:   make(map[string]string),
		status:  make(map[string]string),

		catalogAdapters: make(map[string]catalog.Entry),
		catalogKeys:     make(map[string]string),
		adapters:        make(map[string]*adapterRun),
		adapterStatus:   make(map[string]string),

		deployments:  make(map[string]catalog.Deployment),
		deployStatus: make(map[string]string),
		deployKick:   make(chan struct{}, 1),
	}, nil
}

// Status returns each registered model's state: "serving", "starting" or
// "error: ...".
func (s *Supervisor) Status() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.status)
}

// Run watches the registry's models until ctx ends: it starts a worker per
// model, restarts it when its binding changes and stops it when the model is
// deleted. With Deps.Objects it also serves the published LoRA adapters of
// those models (adapters.go). On ctx done it stops every worker (each
// drains) and returns.
func (s *Supervisor) Run(parent context.Context) error {
	// ctx ends with parent or when the registry watch fails, so that every
	// goroutine started below ends before stopAll waits for them.
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	store, err := registry.Open(ctx, s.deps.JS)
	if err != nil {
		return fmt.Errorf("worker supervisor: %w", err)
	}
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	if s.deps.Objects != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.watchCatalog(ctx) }()
		s.wg.Add(2)
		go func() { defer s.wg.Done(); s.watchDeployments(ctx) }()
		go func() { defer s.wg.Done(); s.deploymentLoop(ctx) }()
	}
	werr := store.WatchModels(ctx, func(c registry.Change[registry.Model], initialDone bool) {
		if initialDone {
			return
		}
		if c.Deleted {
			s.remove(c.Key)
			return
		}
		s.apply(ctx, c.Key, c.Value)
	})
	cancel()
	s.stopAll()
	if werr != nil && parent.Err() == nil {
		return fmt.Errorf("worker supervisor: %w", werr)
	}
	return nil
}

// apply starts or restarts the worker of a model binding.
func (s *Supervisor) apply(ctx context.Context, key string, m registry.Model) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.byKey[key]; ok && old != m.Name {
		s.stopLocked(old)
	}
	s.byKey[key] = m.Name
	if w, ok := s.workers[m.Name]; ok {
		if w.binding.Engine == m.Engine {
			return // same binding: nothing to do
		}
		s.log.Info("model binding changed; restarting its worker", "model", m.Name)
		s.stopLocked(m.Name)
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &supervised{binding: m, cancel: cancel, done: make(chan struct{})}
	s.workers[m.Name] = w
	s.status[m.Name] = StatusStarting
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(w.done)
		s.loop(wctx, w)
	}()
	s.reconcileAdaptersLocked()
	s.kickDeployments()
}

// remove stops the worker of a deleted model.
func (s *Supervisor) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, ok := s.byKey[key]
	if !ok {
		return
	}
	delete(s.byKey, key)
	s.log.Info("model deleted; stopping its worker", "model", name)
	s.stopLocked(name)
	s.kickDeployments()
	s.reconcileAdaptersLocked()
}

// stopLocked cancels a model's worker without waiting for its drain: the
// bridge server unsubscribes at once, so a new worker of the same model can
// start beside the draining one.
func (s *Supervisor) stopLocked(name string) {
	if w, ok := s.workers[name]; ok {
		w.cancel()
		delete(s.workers, name)
	}
	delete(s.status, name)
}

func (s *Supervisor) stopAll() {
	s.mu.Lock()
	for name := range s.workers {
		s.stopLocked(name)
	}
	s.stopAdaptersLocked()
	s.mu.Unlock()
	s.wg.Wait()
}

// setStatus records the status of w, if w is still the model's worker.
func (s *Supervisor) setStatus(w *supervised, st string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workers[w.binding.Name] == w {
		s.status[w.binding.Name] = st
	}
}

// loop runs a model's worker, starting it again RetryInterval after each
// failure, until ctx ends.
func (s *Supervisor) loop(ctx context.Context, w *supervised) {
	log := s.log.With("model", w.binding.Name)
	lastErr := ""
	for ctx.Err() == nil {
		cfg := s.cfg.WorkerDefaults
		cfg.Model = w.binding.Name
		cfg.Engine = w.binding.Engine
		if cfg.Engine.MaxConcurrency == 0 {
			cfg.Engine.MaxConcurrency = s.cfg.WorkerDefaults.Engine.MaxConcurrency
		}
		cfg.WorkerID = ""
		if p := s.cfg.WorkerDefaults.WorkerID; p != "" {
			cfg.WorkerID = p + "-" + newWorkerID()[2:]
		}
		err := s.runOnce(ctx, cfg, w)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("worker stopped unexpectedly")
		}
		if msg := err.Error(); msg != lastErr {
			log.Error("worker failed; retrying", "err", err, "retry_in", s.cfg.RetryInterval)
			lastErr = msg
		} else {
			log.Debug("worker failed again; retrying", "err", err, "retry_in", s.cfg.RetryInterval)
		}
		s.setStatus(w, statusErrorPfx+err.Error())
		t := time.NewTimer(s.cfg.RetryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (s *Supervisor) runOnce(ctx context.Context, cfg Config, w *supervised) error {
	svc, err := New(cfg, s.deps)
	if err != nil {
		return err
	}
	svc.checkBackoffMax = s.cfg.RetryInterval
	svc.onCheckFailed = func(err error) { s.setStatus(w, statusErrorPfx+err.Error()) }
	svc.onServing = func() { s.setStatus(w, StatusServing) }
	svc.onUnhealthy = func(err error) { s.setStatus(w, statusErrorPfx+"engine unhealthy: "+err.Error()) }
	return svc.Run(ctx)
}
