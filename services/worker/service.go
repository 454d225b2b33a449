package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/aiforge/aiforge/pkg/bridge"
)

// Service is one worker: one served model bound to one engine.
type Service struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	client  *http.Client
	tracer  trace.Tracer
	metrics *modelMetrics
	server  *bridge.Server

	// Precomputed per binding.
	urls         [len(endpointNames)]string
	modelsURL    string
	authHeader   string // "Bearer <key>" or ""; never logged
	upstreamJSON json.RawMessage
	servedJSON   json.RawMessage
	// modelNeedle/modelRepl rewrite `"model":"<upstream>"` into
	// `"model":"<served>"` in responses; nil when the names are equal.
	modelNeedle []byte
	modelRepl   []byte

	ready   atomic.Bool
	running atomic.Bool

	// Hooks used by the Supervisor; nil for a standalone worker.
	checkBackoffMax time.Duration
	onCheckFailed   func(error) // the engine is unreachable; Run retries
	onServing       func()      // serving (after start or recovery)
	onUnhealthy     func(error) // a health check failed; the worker paused
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
		client:  deps.HTTPClient,
		tracer:  deps.Tracer.Tracer("github.com/aiforge/aiforge/services/worker"),
		metrics: deps.Metrics.forModel(cfg.Model),
	}
	base := cfg.Engine.BaseURL
	s.urls = [...]string{base + "/chat/completions", base + "/completions", base + "/embeddings"}
	s.modelsURL = base + "/models"
	if cfg.Engine.APIKey != "" {
		s.authHeader = "Bearer " + cfg.Engine.APIKey
	}
	s.upstreamJSON = jsonString(cfg.Engine.Model)
	s.servedJSON = jsonString(cfg.Model)
	if cfg.Model != cfg.Engine.Model {
		s.modelNeedle = append([]byte(`"model":`), s.upstreamJSON...)
		s.modelRepl = append([]byte(`"model":`), s.servedJSON...)
	}
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

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
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
	s.log.Info("worker serving", "engine", redactURL(s.cfg.Engine.BaseURL), "upstream_model", s.cfg.Engine.Model,
		"max_concurrency", s.cfg.Engine.MaxConcurrency)
	if s.onServing != nil {
		s.onServing()
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

// errUnreachable marks identity-check failures worth waiting out.
var errUnreachable = errors.New("engine unreachable")

// awaitEngine runs the identity check, retrying with backoff while the
// engine cannot be reached (or answers 5xx, as engines do while loading).
func (s *Service) awaitEngine(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	maxBackoff := 5 * time.Second
	if s.checkBackoffMax > 0 {
		maxBackoff = s.checkBackoffMax
	}
	attempt := 0
	for {
		err := s.checkEngine(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errUnreachable) {
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
		if s.onCheckFailed != nil {
			s.onCheckFailed(err)
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

// checkEngine asks the engine which models it serves: its readiness alone
// does not prove which weights it loaded.
func (s *Service) checkEngine(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.modelsURL, nil)
	if err != nil {
		return fmt.Errorf("worker %s: engine request: %w", s.cfg.Model, err)
	}
	if s.authHeader != "" {
		req.Header.Set("Authorization", s.authHeader)
	}
	req.Header.Set("Accept", "application/json")
	where := redactURL(s.modelsURL)
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("worker %s: %w: GET %s: %w", s.cfg.Model, errUnreachable, where, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("worker %s: %w: GET %s: reading the answer: %w", s.cfg.Model, errUnreachable, where, err)
	}
	switch {
	case resp.StatusCode >= 500:
		return fmt.Errorf("worker %s: %w: GET %s answered %d", s.cfg.Model, errUnreachable, where, resp.StatusCode)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("worker %s: engine at %s refused the engine API key (status %d)", s.cfg.Model, where, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("worker %s: GET %s answered %d; is the base URL right (it ends with /v1)?", s.cfg.Model, where, resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("worker %s: GET %s did not answer an OpenAI model list: %w", s.cfg.Model, where, err)
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID == s.cfg.Engine.Model {
			return nil
		}
		ids = append(ids, m.ID)
	}
	listed := "no models"
	if len(ids) > 0 {
		listed = "[" + strings.Join(ids, ", ") + "]"
	}
	return fmt.Errorf("worker %s: engine at %s does not serve upstream model %q; it lists %s",
		s.cfg.Model, redactURL(s.cfg.Engine.BaseURL), s.cfg.Engine.Model, listed)
}

// unwrapURLError drops the *url.Error wrapper, whose text repeats the URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
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
		err := s.checkEngine(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && healthy:
			healthy = false
			s.ready.Store(false)
			s.server.Pause()
			s.log.Warn("engine unhealthy; paused taking requests", "err", err)
			if s.onUnhealthy != nil {
				s.onUnhealthy(err)
			}
		case err == nil && !healthy:
			if rerr := s.server.Resume(); rerr != nil {
				s.log.Error("could not resume taking requests", "err", rerr)
				continue
			}
			healthy = true
			s.ready.Store(true)
			s.log.Info("engine healthy again; taking requests")
			if s.onServing != nil {
				s.onServing()
			}
		}
	}
}
