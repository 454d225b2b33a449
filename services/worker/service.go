package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/services/worker/internal/engine"
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
	// limits holds the engine's own rate limits (nil: none).
	limits *engineLimiter

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
	}
	s.engine = engine.New(engine.Config{
		Served:         cfg.Model,
		Engine:         cfg.Engine,
		RequestTimeout: cfg.RequestTimeout,
		HTTPClient:     deps.HTTPClient,
		TTFT:           s.metrics.ttft,
		ITL:            s.metrics.itl,
	})
	srv, err := bridge.NewServer(deps.NC, bridge.ServerConfig{
		Model:             cfg.Model,
		WorkerID:          cfg.WorkerID,
		MaxConcurrency:    cfg.Engine.MaxConcurrency,
		HeartbeatInterval: cfg.HeartbeatInterval,
		Logger:            s.log,
	}, s.handle)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	s.server = srv
	return s, nil
}

// ID is the worker's replica id.
func (s *Service) ID() string { return s.cfg.WorkerID }

// Ready reports whether the worker takes requests: the engine passed the
// identity check and its last health check.
func (s *Service) Ready() bool { return s.ready.Load() }

// Run checks that the engine serves the configured upstream model, starts
// taking requests, checks the engine's health every HealthInterval (pausing
// while it fails), and on ctx done drains requests in flight for up to
// DrainTimeout and returns nil. An engine that is unreachable is waited for;
// one that answers but does not serve the model is an error.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	if err := s.awaitEngine(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := s.server.Start(); err != nil {
		return fmt.Errorf("worker %s: start: %w", s.cfg.Model, err)
	}
	s.deps.Metrics.track(s.cfg.Model, s.server)
	s.ready.Store(true)
	s.log.Info("worker serving", "engine", engine.RedactURL(s.cfg.Engine.BaseURL), "upstream_model", s.cfg.Engine.Model,
		"max_concurrency", s.cfg.Engine.MaxConcurrency)
	if s.hooks.OnServing != nil {
		s.hooks.OnServing()
	}

	s.healthLoop(ctx)

	s.ready.Store(false)
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := s.server.Shutdown(dctx); err != nil {
		s.log.Warn("worker drain timed out; requests in flight were canceled", "drain_timeout", s.cfg.DrainTimeout)
	}
	s.deps.Metrics.untrack(s.server)
	s.log.Info("worker stopped")
	return nil
}

// awaitEngine runs the identity check, retrying with backoff while the
// engine cannot be reached (or answers 5xx, as engines do while loading).
func (s *Service) awaitEngine(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	maxBackoff := s.cfg.EngineWaitMax
	attempt := 0
	for {
		err := s.engine.Check(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, engine.ErrUnreachable) {
			return err // the caller reports it
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		level := slog.LevelWarn
		if attempt++; attempt > 1 {
			level = slog.LevelDebug // said once; do not flood the log
		}
		s.log.Log(ctx, level, "engine not reachable yet; retrying", "err", err, "retry_in", backoff)
		if s.hooks.OnCheckFailed != nil {
			s.hooks.OnCheckFailed(err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// healthLoop checks the engine every HealthInterval until ctx ends, pausing
// the bridge server (traffic goes to healthy replicas) while checks fail.
func (s *Service) healthLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	healthy := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.engine.Check(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && healthy:
			healthy = false
			s.ready.Store(false)
			s.server.Pause()
			s.log.Warn("engine unhealthy; paused taking requests", "err", err)
			if s.hooks.OnUnhealthy != nil {
				s.hooks.OnUnhealthy(err)
			}
		case err == nil && !healthy:
			if rerr := s.server.Resume(); rerr != nil {
				s.log.Error("could not resume taking requests", "err", rerr)
				continue
			}
			healthy = true
			s.ready.Store(true)
			s.log.Info("engine healthy again; taking requests")
			if s.hooks.OnServing != nil {
				s.hooks.OnServing()
			}
		}
	}
}
