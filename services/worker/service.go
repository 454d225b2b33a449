package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker/internal/engine"
	"github.com/aiforge/aiforge/services/worker/internal/engineproc"
)

// Service is one worker: one served model bound to one engine.
type Service struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	tracer  trace.Tracer
	metrics *modelMetrics
	server  *bridge.Server
	engine  *engine.Client
	hooks   Hooks
	state   *reporter
	// limits holds the engine's own rate limits (nil: none).
	limits *engineLimiter
	// recheck asks the health loop for a full check (the key included)
	// now: a request found the engine refusing its key, or the supervised
	// engine process changed state.
	recheck chan struct{}
	// proc supervises the engine process (Engine.Process); nil otherwise.
	proc *engineproc.Supervisor
	// Scale to zero (scale.go): idleStop is the engine's idle stop (0:
	// never); active counts requests in handle, lastActive is when one
	// last began or ended (now's clock); sleepMu orders wakes and sleeps;
	// change is closed at the next change of the engine process.
	idleStop   time.Duration
	now        func() time.Time
	active     atomic.Int64
	lastActive atomic.Int64
	sleepMu    sync.Mutex
	changeMu   sync.Mutex
	change     chan struct{}

	ready   atomic.Bool
	running atomic.Bool
}

// New validates cfg and deps and returns a stopped worker.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := errors.Join(cfg.Validate(), deps.validate()); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Tracer == nil {
		deps.Tracer = noop.NewTracerProvider()
	}
	if deps.HTTPClient == nil {
		deps.HTTPClient = NewHTTPClient()
	}
	s := &Service{
		cfg:     cfg,
		deps:    deps,
		log:     deps.Logger.With("model", cfg.Model, "worker_id", cfg.WorkerID),
		tracer:  deps.Tracer.Tracer("github.com/aiforge/aiforge/services/worker"),
		metrics: deps.Metrics.forModel(cfg.Model),
		hooks:   deps.Hooks,
		limits:  newEngineLimiter(cfg.Engine.RPM, cfg.Engine.TPM, time.Now),
		recheck: make(chan struct{}, 1),
		now:     deps.Now,
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.lastActive.Store(s.now().UnixNano())
	if cfg.Engine.Process != nil {
		if err := s.setupProcess(); err != nil {
			return nil, err
		}
		cfg = s.cfg
	}
	s.engine = engine.New(engine.Config{
		Served:         cfg.Model,
		Engine:         cfg.Engine,
		Kind:           cfg.Kind,
		RequestTimeout: cfg.RequestTimeout,
		HTTPClient:     deps.HTTPClient,
		TTFT:           s.metrics.ttft,
		ITL:            s.metrics.itl,
	})
	// The bridge server is built when the engine has passed its first
	// check, with the slot count it reports; this one only validates.
	if _, err := s.newServer(cfg.DefaultMaxConcurrency); err != nil {
		return nil, err
	}
	s.state = newReporter(s)
	return s, nil
}

func (s *Service) newServer(maxConc int) (*bridge.Server, error) {
	srv, err := bridge.NewServer(s.deps.NC, bridge.ServerConfig{
		Model:             s.cfg.Model,
		WorkerID:          s.cfg.WorkerID,
		MaxConcurrency:    maxConc,
		HeartbeatInterval: s.cfg.HeartbeatInterval,
		Logger:            s.log,
	}, s.handle)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return srv, nil
}

// ID is the worker's replica id.
func (s *Service) ID() string { return s.cfg.WorkerID }

// Ready reports whether the worker takes requests: the engine passed the
// identity check and its last health check.
func (s *Service) Ready() bool { return s.ready.Load() }

// State is what the replica reports about itself and its engine in
// events.BucketWorkers.
func (s *Service) State() registry.WorkerState { return s.state.State() }

// Run verifies the engine (it serves the upstream model, accepts the
// engine key, and how many slots it has), starts taking requests, checks
// the engine's health every HealthInterval (pausing while it fails), and
// on ctx done drains requests in flight for up to DrainTimeout, removes its
// state and returns nil. An engine that does not pass its checks (unreachable, refusing the
// key, not serving the model) is checked again until it does; the replica
// reports each state (registry.WorkerState) meanwhile and serves nothing.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	// The state outlives ctx: it says "draining" until the drain ends.
	sctx, stopState := context.WithCancel(context.Background())
	stateDone := make(chan struct{})
	go func() { defer close(stateDone); s.state.run(sctx) }()
	defer func() {
		stopState()
		<-stateDone
		s.state.remove(context.Background())
	}()
	if s.proc != nil {
		// The engine outlives ctx too: it serves the requests in flight
		// until the drain ends, then it is stopped.
		pctx, stopProc := context.WithCancel(context.Background())
		procDone := make(chan struct{})
		go func() { defer close(procDone); _ = s.proc.Run(pctx) }()
		s.deps.Metrics.trackEngine(s.cfg.Model, s.cfg.Engine.ID, s.proc)
		defer func() {
			stopProc()
			<-procDone
			s.deps.Metrics.untrackEngine(s.proc)
		}()
	}

	rep, err := s.awaitEngine(ctx)
	if err != nil {
		return nil // ctx ended
	}
	maxConc, from := s.cfg.Engine.MaxConcurrency, FromRegistry
	switch {
	case maxConc > 0:
	case rep.TotalSlots > 0:
		maxConc, from = rep.TotalSlots, FromEngine
	default:
		maxConc, from = s.cfg.DefaultMaxConcurrency, FromDefault
	}
	srv, err := s.newServer(maxConc)
	if err != nil {
		return err
	}
	s.server = srv
	if err := s.server.Start(); err != nil {
		return fmt.Errorf("worker %s: start: %w", s.cfg.Model, err)
	}
	s.deps.Metrics.track(s.cfg.Model, s.server)
	if s.idleEnabled() {
		ictx, stopIdle := context.WithCancel(ctx)
		idleDone := make(chan struct{})
		go func() { defer close(idleDone); s.idleLoop(ictx) }()
		defer func() { stopIdle(); <-idleDone }()
	}
	s.ready.Store(true)
	s.state.serving(s.server, maxConc, from)
	s.log.Info("worker serving", "engine", engine.RedactURL(s.cfg.Engine.BaseURL), "upstream_model", s.cfg.Engine.Model,
		"max_concurrency", maxConc, "max_concurrency_from", from, "key_verified", rep.KeyVerified,
		"context_window", rep.ContextWindow)
	if s.hooks.OnServing != nil {
		s.hooks.OnServing()
	}

	s.healthLoop(ctx)

	s.ready.Store(false)
	s.state.update(func(st *registry.WorkerState) { st.State = registry.WorkerDraining })
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := s.server.Shutdown(dctx); err != nil {
		s.log.Warn("worker drain timed out; requests in flight were canceled", "drain_timeout", s.cfg.DrainTimeout)
	}
	s.deps.Metrics.untrack(s.server)
	s.log.Info("worker stopped")
	return nil
}

// stateOf is the replica state a failed check puts it in; serving says
// whether the replica was serving (an engine it can no longer reach is then
// unhealthy).
func stateOf(err error, serving bool) string {
	switch {
	case errors.Is(err, engine.ErrUnauthorized):
		return registry.WorkerUnauthorized
	case errors.Is(err, engine.ErrMisnamed):
		return registry.WorkerMisnamed
	case serving:
		return registry.WorkerUnhealthy
	default:
		return registry.WorkerUnreachable
	}
}

// awaitEngine runs the full check until the engine passes it, waiting
// between checks with a backoff (100ms doubling to EngineWaitMax) and
// reporting each failure as the replica's state. It fails only when ctx
// ends.
func (s *Service) awaitEngine(ctx context.Context) (engine.Report, error) {
	backoff := 100 * time.Millisecond
	maxBackoff := s.cfg.EngineWaitMax
	last := ""
	for {
		rep, err := s.engine.Verify(ctx)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		if err == nil {
			s.state.verified(rep)
			return rep, nil
		}
		state := stateOf(err, false)
		if state == registry.WorkerUnreachable && s.proc != nil && s.proc.State().Phase != engineproc.PhaseServing {
			state = registry.WorkerStarting // its engine process is starting
		}
		s.state.failed(state, rep, err)
		level := slog.LevelDebug // said once per state; do not flood the log
		if state != last {
			level = slog.LevelWarn
			last = state
		}
		msg := "engine not reachable yet; retrying"
		if state != registry.WorkerUnreachable && state != registry.WorkerStarting {
			msg = "engine check failed; not serving, checking again"
		}
		s.log.Log(ctx, level, msg, "state", state, "err", err, "retry_in", backoff)
		if s.hooks.OnCheckFailed != nil {
			s.hooks.OnCheckFailed(err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return engine.Report{}, ctx.Err()
		case <-t.C:
		case <-s.recheck: // the engine process is serving: check now
			t.Stop()
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// healthLoop checks the engine every HealthInterval until ctx ends, pausing
// the bridge server (traffic goes to healthy replicas) while checks fail.
// A healthy engine gets the cheap check (its model list); a failing one the
// full check, so that it serves again only with its key accepted, and so
// does a healthy one at once when a request found it refusing the key
// (the key changed on the engine since it was verified).
func (s *Service) healthLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	healthy := true
	for {
		full := !healthy
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.recheck:
			full = true
		}
		if s.dormant() {
			// Asleep, or waking for a request: the replica serves (its
			// requests wake the engine); nothing to check.
			if !healthy {
				if rerr := s.server.Resume(); rerr != nil {
					s.log.Error("could not resume taking requests", "err", rerr)
					continue
				}
				healthy = true
				s.ready.Store(true)
				s.state.update(func(st *registry.WorkerState) { st.State = registry.WorkerServing })
			}
			continue
		}
		var err error
		var rep engine.Report
		if !full {
			err = s.engine.Check(ctx)
		} else {
			rep, err = s.engine.Verify(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			s.state.failed(stateOf(err, true), rep, err)
			if !healthy {
				continue
			}
			healthy = false
			s.ready.Store(false)
			s.server.Pause()
			s.log.Warn("engine unhealthy; paused taking requests", "err", err)
			if s.hooks.OnUnhealthy != nil {
				s.hooks.OnUnhealthy(err)
			}
		case !healthy:
			if rerr := s.server.Resume(); rerr != nil {
				s.log.Error("could not resume taking requests", "err", rerr)
				continue
			}
			healthy = true
			s.ready.Store(true)
			s.state.verified(rep)
			s.state.update(func(st *registry.WorkerState) { st.State = registry.WorkerServing })
			s.log.Info("engine healthy again; taking requests")
			if s.hooks.OnServing != nil {
				s.hooks.OnServing()
			}
		}
	}
}
