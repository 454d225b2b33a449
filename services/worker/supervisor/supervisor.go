// Package supervisor runs one worker per engine of each model registered in
// the registry, in one process, starting, restarting and stopping them as
// bindings change. Given an object store it also serves the catalog's published LoRA
// adapters of those models and materialises each one's deployed version.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/services/worker"
	"github.com/aiforge/aiforge/services/worker/internal/adapters"
	"github.com/aiforge/aiforge/services/worker/internal/deploy"
	"github.com/aiforge/aiforge/services/worker/internal/supervise"
)

// Statuses of a model or an adapter; a failing one is "error: " and the
// error.
const (
	StatusServing  = supervise.StatusServing
	StatusStarting = supervise.StatusStarting
)

// Config configures a Supervisor.
type Config struct {
	// WorkerDefaults holds the settings used for every worker:
	// HeartbeatInterval, HealthInterval, RequestTimeout, DrainTimeout,
	// Source. Model and Engine come from the registry; WorkerID, when set,
	// prefixes the generated ids.
	WorkerDefaults worker.Config
	// RetryInterval separates failed starts of a worker. Default 2s.
	RetryInterval time.Duration
	// AdapterDir is where LoRA adapter files are materialised for the
	// engines to load (engines must see the same path). Default
	// os.TempDir()/aiforge-adapters.
	AdapterDir string
	// ModelsDir is where the deployed catalog version of each served model
	// is materialised: ModelsDir/<model>/current links to it. Default
	// os.TempDir()/aiforge-models.
	ModelsDir string
	// SecretsKey opens the engine API keys the registry keeps sealed
	// (package sealed; the edge seals them to its public half). Nil: the
	// models whose key is sealed do not start (their status says why);
	// those without a key, or with one stored in clear by an older
	// version, do.
	SecretsKey *sealed.PrivateKey
}

// Deps are the Supervisor's collaborators; all but Objects are the workers'
// (worker.Deps).
type Deps struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Logger *slog.Logger
	// Metrics is shared by all workers of a process; required
	// (worker.NewMetrics).
	Metrics *worker.Metrics
	// Tracer is optional; the default is a no-op provider.
	Tracer trace.TracerProvider
	// HTTPClient is optional; the default is one pool of engine
	// connections for every worker (worker.NewHTTPClient).
	HTTPClient *http.Client
	// Objects holds the catalog's model files. Given one, the Supervisor
	// serves the published LoRA adapters of the models it runs and
	// materialises their deployed versions; without it, it does neither.
	Objects objstore.Store
	// Now is the workers' clock of idle stops (worker.Deps.Now);
	// optional.
	Now func() time.Time
}

func (d Deps) worker() worker.Deps {
	return worker.Deps{NC: d.NC, JS: d.JS, Logger: d.Logger, Metrics: d.Metrics, Tracer: d.Tracer, HTTPClient: d.HTTPClient, Now: d.Now}
}

// Supervisor runs one worker per engine of each model in the registry, in
// this process: a model with several engines (Model.Engines) has a worker
// replica per engine, each reporting its Engine.ID.
type Supervisor struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	adapters    *adapters.Manager
	deployments *deploy.Manager

	mu      sync.Mutex
	workers map[string]*supervised // by model name
	byKey   map[string]string      // KV key -> model name
	status  map[string]string
	wg      sync.WaitGroup
}

// supervised is one model's worker loops: one per engine of the model.
type supervised struct {
	// binding has the engine keys opened: it exists only in memory.
	binding registry.Model
	cancel  context.CancelFunc
	done    chan struct{}
	// engines is each engine's status, by engine index; the model's status
	// is the best of them (modelStatus).
	engines []string
}

// modelStatus is a model's status from its engines': serving when any
// engine serves, else starting when any starts, else the first error.
func modelStatus(engines []string) string {
	if slices.Contains(engines, StatusServing) {
		return StatusServing
	}
	if slices.Contains(engines, StatusStarting) {
		return StatusStarting
	}
	for _, st := range engines {
		return st
	}
	return StatusStarting
}

// New validates cfg and deps.
func New(cfg Config, deps Deps) (*Supervisor, error) {
	var errs []error
	if cfg.RetryInterval < 0 {
		errs = append(errs, errors.New("RetryInterval must not be negative"))
	}
	if cfg.WorkerDefaults.Engine.MaxConcurrency < 0 {
		errs = append(errs, errors.New("WorkerDefaults.Engine.MaxConcurrency must not be negative"))
	}
	errs = append(errs, cfg.WorkerDefaults.ValidateDefaults(), deps.validate())
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
		deps.HTTPClient = worker.NewHTTPClient()
	}
	log := deps.Logger.With("component", "worker-supervisor")
	return &Supervisor{
		cfg: cfg, deps: deps, log: log,
		adapters: adapters.New(
			adapters.Config{WorkerDefaults: cfg.WorkerDefaults, RetryInterval: cfg.RetryInterval, Dir: cfg.AdapterDir},
			adapters.Deps{JS: deps.JS, Objects: deps.Objects, Logger: log, Worker: deps.worker()}),
		deployments: deploy.New(
			deploy.Config{Dir: cfg.ModelsDir, RetryInterval: cfg.RetryInterval},
			deploy.Deps{JS: deps.JS, Objects: deps.Objects, Logger: log}),
		workers: make(map[string]*supervised),
		byKey:   make(map[string]string),
		status:  make(map[string]string),
	}, nil
}

func (d Deps) validate() error {
	var errs []error
	if d.NC == nil {
		errs = append(errs, errors.New("Deps.NC is required"))
	}
	if d.JS == nil {
		errs = append(errs, errors.New("Deps.JS is required"))
	}
	if d.Metrics == nil {
		errs = append(errs, errors.New("Deps.Metrics is required (worker.NewMetrics)"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker deps: %w", err)
	}
	return nil
}

// Status returns each registered model's state: "serving", "starting" or
// "error: ...".
func (s *Supervisor) Status() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.status)
}

// AdapterStatus returns each served adapter's state: "serving", "starting"
// or "error: ...".
func (s *Supervisor) AdapterStatus() map[string]string { return s.adapters.Status() }

// DeploymentStatus returns, per served model with a deployment, "ready
// <catalog> v<N>", "materialising <catalog> v<N>" or "error: ...".
func (s *Supervisor) DeploymentStatus() map[string]string { return s.deployments.Status() }

// CurrentLink is where the deployed weights of a served model appear.
func (s *Supervisor) CurrentLink(model string) string { return s.deployments.CurrentLink(model) }

// Run watches the registry's models until ctx ends: it starts a worker per
// model, restarts it when its binding changes and stops it when the model is
// deleted. With Deps.Objects it also serves the published LoRA adapters of
// those models and materialises their deployments. On ctx done it stops
// every worker (each drains) and returns.
func (s *Supervisor) Run(parent context.Context) error {
	// ctx ends with parent or when the registry watch fails, so that every
	// goroutine started below ends before stopAll waits for them.
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	store, err := registry.Open(ctx, s.deps.JS)
	if err != nil {
		return fmt.Errorf("worker supervisor: %w", err)
	}
	if s.deps.Objects != nil {
		s.wg.Add(2)
		go func() { defer s.wg.Done(); s.adapters.Run(ctx) }()
		go func() { defer s.wg.Done(); s.deployments.Run(ctx) }()
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

// basesChangedLocked tells the adapters and the deployments which models
// run here now.
func (s *Supervisor) basesChangedLocked() {
	bases := make(map[string]registry.Model, len(s.workers))
	for name, w := range s.workers {
		bases[name] = w.binding
	}
	s.adapters.SetBases(bases)
	s.deployments.SetServed(slices.Collect(maps.Keys(bases)))
}

// apply starts or restarts the worker of a model binding.
func (s *Supervisor) apply(ctx context.Context, key string, stored registry.Model) {
	// Opened, a binding compares by its key in clear: sealing the same key
	// again (a new random box) is no change.
	m, openErr := stored.OpenEngineKey(s.cfg.SecretsKey)
	if openErr != nil {
		m = stored
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.byKey[key]; ok && old != m.Name {
		s.stopLocked(old)
	}
	s.byKey[key] = m.Name
	if w, ok := s.workers[m.Name]; ok {
		if openErr == nil && w.binding.Kind == m.Kind && sameEngines(w.binding.AllEngines(), m.AllEngines()) {
			return // same binding: nothing to do
		}
		s.log.Info("model binding changed; restarting its worker", "model", m.Name)
		s.stopLocked(m.Name)
	}
	if openErr != nil {
		// Not retried: the same binding will not open later. The error
		// names the model and the cause, never the key.
		if errors.Is(openErr, registry.ErrNoSecretsKey) {
			openErr = fmt.Errorf("%w (AIFORGE_SECRETS_KEY_FILE, or secrets.key in the data dir)", openErr)
		}
		s.log.Error("model not served: its engine api key cannot be opened", "model", m.Name, "err", openErr)
		s.status[m.Name] = supervise.StatusErrorPrefix + openErr.Error()
		s.basesChangedLocked()
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	engines := m.AllEngines()
	w := &supervised{binding: m, cancel: cancel, done: make(chan struct{}), engines: make([]string, len(engines))}
	for i := range w.engines {
		w.engines[i] = StatusStarting
	}
	s.workers[m.Name] = w
	s.status[m.Name] = StatusStarting
	var loops sync.WaitGroup
	for i, eng := range engines {
		s.wg.Add(1)
		loops.Add(1)
		go func() {
			defer s.wg.Done()
			defer loops.Done()
			s.loop(wctx, w, i, eng)
		}()
	}
	go func() { loops.Wait(); close(w.done) }()
	s.basesChangedLocked()
}

// sameEngines compares engine bindings by value, the supervised process
// (a pointer) included: a binding stored again unchanged restarts neither
// the worker nor its engine process.
func sameEngines(a, b []registry.Engine) bool { return reflect.DeepEqual(a, b) }

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
	s.basesChangedLocked()
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
	s.mu.Unlock()
	s.wg.Wait()
}

// setStatus records the status of engine i of w, if w is still the
// model's worker.
func (s *Supervisor) setStatus(w *supervised, i int, st string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workers[w.binding.Name] == w {
		w.engines[i] = st
		s.status[w.binding.Name] = modelStatus(w.engines)
	}
}

// loop runs the worker of engine i (eng) of a model, starting it again
// RetryInterval after each failure, until ctx ends.
func (s *Supervisor) loop(ctx context.Context, w *supervised, i int, eng registry.Engine) {
	log := s.log.With("model", w.binding.Name)
	if eng.ID != "" {
		log = log.With("engine_id", eng.ID)
	}
	lastErr := ""
	for ctx.Err() == nil {
		cfg := s.cfg.WorkerDefaults.Bound(w.binding.Name, eng)
		cfg.Kind = w.binding.Kind
		err := s.runOnce(ctx, cfg, w, i)
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
		s.setStatus(w, i, supervise.StatusErrorPrefix+err.Error())
		t := time.NewTimer(s.cfg.RetryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (s *Supervisor) runOnce(ctx context.Context, cfg worker.Config, w *supervised, i int) error {
	cfg.EngineWaitMax = s.cfg.RetryInterval
	deps := s.deps.worker()
	deps.Hooks = worker.Hooks{
		OnCheckFailed: func(err error) { s.setStatus(w, i, supervise.StatusErrorPrefix+err.Error()) },
		OnServing:     func() { s.setStatus(w, i, StatusServing) },
		OnUnhealthy:   func(err error) { s.setStatus(w, i, supervise.StatusErrorPrefix+"engine unhealthy: "+err.Error()) },
	}
	svc, err := worker.New(cfg, deps)
	if err != nil {
		return err
	}
	return svc.Run(ctx)
}
