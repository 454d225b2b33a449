// Package edge is aiforge's OpenAI-compatible front door: it authenticates
// API keys, admits requests, bridges them over the bus to the workers of the
// requested model and streams their answers back. It also serves the admin
// API that manages tenants, keys and model bindings.
package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Config configures one edge replica.
type Config struct {
	// Listen is the HTTP address, e.g. 127.0.0.1:8080. Ignored when
	// Deps.Listener is set.
	Listen string
	// AdminKey authorises /admin/v1. Required.
	AdminKey string
	// InstanceID names this replica in logs and usage events. Default random.
	InstanceID string
	// MaxBodyBytes bounds request bodies; larger ones get 413. Default 16 MiB.
	MaxBodyBytes int64
	// NoWorkerWait is how long a request waits for a worker to take it
	// before 503. Default 2s.
	NoWorkerWait time.Duration
	// HeartbeatTimeout declares a worker lost after this long without a
	// frame. Default 5s.
	HeartbeatTimeout time.Duration
	// FailoverWait bounds the search for another replica. Default 250ms.
	FailoverWait time.Duration
	// MaxFileBytes bounds one uploaded file; larger ones get 413. Default
	// 512 MiB.
	MaxFileBytes int64
	// ShutdownGrace is how long streams in flight may finish on shutdown
	// before they are ended with an error. Default 30s.
	ShutdownGrace time.Duration
	// Streams tunes stream definitions created at start.
	Streams events.StreamOptions
	// UploadPartBytes is the part size of resumable model uploads. Default
	// 64 MiB.
	UploadPartBytes int64
}

// Validate reports every problem with c; it never mutates c.
func (c Config) Validate() error {
	var errs []error
	if len(c.AdminKey) < 16 {
		errs = append(errs, errors.New("AdminKey must be at least 16 characters"))
	}
	if c.MaxBodyBytes < 0 || c.MaxFileBytes < 0 || c.NoWorkerWait < 0 || c.HeartbeatTimeout < 0 || c.ShutdownGrace < 0 || c.FailoverWait < 0 || c.UploadPartBytes < 0 {
		errs = append(errs, errors.New("limits and durations must not be negative"))
	}
	return errors.Join(errs...)
}

// Deps are the edge's collaborators.
type Deps struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Logger *slog.Logger
	// Registerer receives the edge's metrics; Gatherer serves /metrics.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Tracer creates spans; default no-op (trace context still flows).
	Tracer trace.TracerProvider
	// Objects stores uploaded files; without it the Files API answers 503.
	Objects objstore.Store
	// Listener, when set, is served instead of listening on Config.Listen.
	Listener net.Listener
	// Ready, when set, must also report true for /readyz to answer 200 (the
	// all-in-one process uses it to wait for every service).
	Ready func() bool
}

// Service is one edge replica.
type Service struct {
	cfg    Config
	deps   Deps
	log    *slog.Logger
	tracer trace.Tracer

	store   *registry.Store
	catalog *catalog.Store
	uploads jetstream.KeyValue
	client  *bridge.Client
	metrics *metrics

	keysMu sync.RWMutex
	keys   map[string]*registry.Key

	modelsMu sync.RWMutex
	models   map[string]registry.Model

	tenantsMu sync.RWMutex
	tenants   map[string]registry.Tenant

	pricesMu sync.RWMutex
	prices   map[string]registry.PriceHistory

	// The catalog as /v1/models shows it (catalogview.go): published
	// adapters and deployments.
	cv catalogView

	budgetKV  jetstream.KeyValue
	rateKV    jetstream.KeyValue
	filesKV   jetstream.KeyValue
	vsKV      jetstream.KeyValue
	vsFilesKV jetstream.KeyValue

	flightsMu sync.Mutex
	flights   map[string]map[*flight]struct{}

	synced   atomic.Int32
	ready    atomic.Bool
	draining atomic.Bool
	addr     atomic.Value

	// streamCtx ends streams still open when the shutdown grace is over.
	streamCtx  context.Context
	endStreams context.CancelCauseFunc
	handler    http.Handler
}

// New validates its arguments and builds a stopped edge.
func New(cfg Config, deps Deps) (*Service, error) {
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if deps.NC == nil || deps.JS == nil {
		errs = append(errs, errors.New("Deps.NC and Deps.JS are required"))
	}
	if deps.Registerer == nil || deps.Gatherer == nil {
		errs = append(errs, errors.New("Deps.Registerer and Deps.Gatherer are required"))
	}
	if deps.Listener == nil && cfg.Listen == "" {
		errs = append(errs, errors.New("Config.Listen or Deps.Listener is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	if cfg.MaxFileBytes == 0 {
		cfg.MaxFileBytes = 512 << 20
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	if cfg.UploadPartBytes == 0 {
		cfg.UploadPartBytes = 64 << 20
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = "edge-" + events.NewID()[:8]
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Tracer == nil {
		deps.Tracer = noop.NewTracerProvider()
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("edge: metrics: %w", err)
	}
	s := &Service{
		cfg: cfg, deps: deps,
		log:     deps.Logger.With("service", "edge", "instance", cfg.InstanceID),
		tracer:  deps.Tracer.Tracer("aiforge/edge"),
		metrics: m,
		keys:    make(map[string]*registry.Key),
		models:  make(map[string]registry.Model),
		tenants: make(map[string]registry.Tenant),
		prices:  make(map[string]registry.PriceHistory),
		flights: make(map[string]map[*flight]struct{}),
	}
	s.streamCtx, s.endStreams = context.WithCancelCause(context.Background())
	s.handler = s.routes()
	return s, nil
}

// Handler is the HTTP handler (for tests and embedding).
func (s *Service) Handler() http.Handler { return s.handler }

// Ready reports whether the edge serves traffic.
func (s *Service) Ready() bool {
	return s.ready.Load() && !s.draining.Load() && (s.deps.Ready == nil || s.deps.Ready())
}

// Addr is the address the edge listens on, once Run started.
func (s *Service) Addr() string {
	if a, ok := s.addr.Load().(string); ok {
		return a
	}
	return ""
}

// Run serves until ctx ends, then drains: readiness turns false, no new
// requests are accepted, open streams get ShutdownGrace to finish and are
// then ended with an SSE error.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Ensure(ctx, s.deps.JS, s.cfg.Streams); err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	store, err := registry.Open(ctx, s.deps.JS)
	if err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	s.store = store
	if s.catalog, err = catalog.Open(ctx, s.deps.JS); err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	if s.uploads, err = s.deps.JS.KeyValue(ctx, events.BucketUploads); err != nil {
		return fmt.Errorf("edge: bucket %s: %w", events.BucketUploads, err)
	}
	if s.budgetKV, err = s.deps.JS.KeyValue(ctx, events.BucketBudgets); err != nil {
		return fmt.Errorf("edge: bucket %s: %w", events.BucketBudgets, err)
	}
	if s.rateKV, err = s.deps.JS.KeyValue(ctx, events.BucketRateLimits); err != nil {
		return fmt.Errorf("edge: bucket %s: %w", events.BucketRateLimits, err)
	}
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
	}{{&s.filesKV, events.BucketFiles}, {&s.vsKV, events.BucketVectorStores}, {&s.vsFilesKV, events.BucketVectorStoreFiles}} {
		if *b.kv, err = s.deps.JS.KeyValue(ctx, b.name); err != nil {
			return fmt.Errorf("edge: bucket %s: %w", b.name, err)
		}
	}
	client, err := bridge.NewClient(s.deps.NC, bridge.ClientConfig{
		NoWorkerWait: s.cfg.NoWorkerWait, HeartbeatTimeout: s.cfg.HeartbeatTimeout,
		FailoverWait: s.cfg.FailoverWait, Logger: s.log,
	})
	if err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	s.client = client
	defer func() { _ = client.Close() }()

	watchCtx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(5)
	go func() {
		defer wg.Done()
		if err := s.docStatus(watchCtx); err != nil {
			s.log.Error("document status consumer ended", "err", err)
		}
	}()
	go func() { defer wg.Done(); s.watchKeys(watchCtx) }()
	go func() { defer wg.Done(); s.watchModels(watchCtx) }()
	go func() { defer wg.Done(); s.watchTenants(watchCtx) }()
	go func() { defer wg.Done(); s.watchPrices(watchCtx) }()
	wg.Add(1)
	go func() { defer wg.Done(); s.watchCatalogView(watchCtx) }()
	defer func() { stopWatch(); wg.Wait() }()

	ln := s.deps.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("edge: listen: %w", err)
		}
	}
	s.addr.Store(ln.Addr().String())
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	// Ready once every watcher delivered its initial state.
	for s.synced.Load() < 4 || !s.cv.synced() {
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			return fmt.Errorf("edge: serve: %w", err)
		case <-time.After(5 * time.Millisecond):
			continue
		}
		break
	}
	s.ready.Store(true)
	s.log.Info("edge ready", "addr", ln.Addr().String())

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("edge: serve: %w", err)
	}
	s.draining.Store(true)
	s.log.Info("edge draining", "grace", s.cfg.ShutdownGrace.String())
	graceCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(graceCtx); err != nil {
		s.endStreams(errShuttingDown)
		shortCtx, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel2()
		if err := srv.Shutdown(shortCtx); err != nil {
			_ = srv.Close()
		}
	}
	s.endStreams(errShuttingDown)
	_ = s.deps.NC.Flush()
	s.log.Info("edge stopped")
	return nil
}

var (
	errShuttingDown = errors.New("edge: shutting down")
	errKeyRevoked   = errors.New("edge: api key revoked")
)

func (s *Service) watchKeys(ctx context.Context) {
	err := s.store.WatchKeys(ctx, func(c registry.Change[registry.Key], initial bool) {
		if initial {
			s.synced.Add(1)
			return
		}
		if c.Deleted {
			s.keysMu.Lock()
			delete(s.keys, c.Key)
			s.keysMu.Unlock()
			s.revoke(c.Key)
			return
		}
		k := c.Value
		s.keysMu.Lock()
		s.keys[k.ID] = &k
		s.keysMu.Unlock()
	})
	if err != nil {
		s.log.Error("key watch ended", "err", err)
	}
}

func (s *Service) watchModels(ctx context.Context) {
	err := s.store.WatchModels(ctx, func(c registry.Change[registry.Model], initial bool) {
		if initial {
			s.synced.Add(1)
			return
		}
		s.modelsMu.Lock()
		defer s.modelsMu.Unlock()
		if c.Deleted {
			for name := range s.models {
				if registry.ModelKey(name) == c.Key {
					delete(s.models, name)
				}
			}
			return
		}
		s.models[c.Value.Name] = c.Value
	})
	if err != nil {
		s.log.Error("model watch ended", "err", err)
	}
}

// flight is one request in progress, tracked so that a key revocation ends it.
type flight struct {
	cancel context.CancelCauseFunc
}

func (s *Service) track(keyID string, f *flight) func() {
	s.flightsMu.Lock()
	m := s.flights[keyID]
	if m == nil {
		m = make(map[*flight]struct{})
		s.flights[keyID] = m
	}
	m[f] = struct{}{}
	s.flightsMu.Unlock()
	return func() {
		s.flightsMu.Lock()
		delete(m, f)
		if len(m) == 0 {
			delete(s.flights, keyID)
		}
		s.flightsMu.Unlock()
	}
}

func (s *Service) revoke(keyID string) {
	s.flightsMu.Lock()
	fs := make([]*flight, 0, len(s.flights[keyID]))
	for f := range s.flights[keyID] {
		fs = append(fs, f)
	}
	s.flightsMu.Unlock()
	for _, f := range fs {
		f.cancel(errKeyRevoked)
	}
	n := len(fs)
	s.log.Info("api key revoked", "key_id", keyID, "streams_ended", n)
}

func (s *Service) lookupKey(id string) *registry.Key {
	s.keysMu.RLock()
	k := s.keys[id]
	s.keysMu.RUnlock()
	return k
}

// lookupModel resolves a served model name: a registered model, else a
// published adapter of one (catalogview.go).
func (s *Service) lookupModel(name string) (registry.Model, bool) {
	s.modelsMu.RLock()
	m, ok := s.models[name]
	s.modelsMu.RUnlock()
	if ok {
		return m, true
	}
	return s.lookupAdapter(name)
}
