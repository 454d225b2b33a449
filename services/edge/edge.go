// Package edge is aiforge's OpenAI-compatible front door, the only HTTP
// face of the mesh. It owns the listener, readiness and shutdown, opens the
// buckets and the bus client, and mounts the APIs of its domains, each a
// package of its own under internal/: inference (the one generation path),
// responses, files, batches, vectorstores, containers (agent code
// sandboxes, served by the sandbox service over the bus), models, admin,
// reports and the operators' web console (/console). They share
// the read-only directory of tenants, keys, models and prices
// (pkg/directory).
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
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/guard"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/rerank"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/pkg/tenantbucket"
	"github.com/aiforge/aiforge/services/edge/internal/admin"
	"github.com/aiforge/aiforge/services/edge/internal/batches"
	"github.com/aiforge/aiforge/services/edge/internal/console"
	"github.com/aiforge/aiforge/services/edge/internal/containers"
	"github.com/aiforge/aiforge/services/edge/internal/files"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
	"github.com/aiforge/aiforge/services/edge/internal/inference"
	"github.com/aiforge/aiforge/services/edge/internal/models"
	"github.com/aiforge/aiforge/services/edge/internal/moderations"
	"github.com/aiforge/aiforge/services/edge/internal/reports"
	"github.com/aiforge/aiforge/services/edge/internal/responses"
	"github.com/aiforge/aiforge/services/edge/internal/routing"
	"github.com/aiforge/aiforge/services/edge/internal/semcache"
	"github.com/aiforge/aiforge/services/edge/internal/vectorstores"
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
	// CooldownFailures consecutive retryable failures of an engine (no
	// worker acknowledged, worker lost, engine error, timeout) make this
	// edge skip it for Cooldown; a success ends the count. Defaults 3 and
	// 30s; a negative CooldownFailures turns cooldowns off. The state is
	// each edge replica's own.
	CooldownFailures int
	Cooldown         time.Duration
	// MaxFileBytes bounds one uploaded file; larger ones get 413. Default
	// 512 MiB.
	MaxFileBytes int64
	// ShutdownGrace is how long streams in flight may finish on shutdown
	// before they are ended with an error. Default 30s.
	ShutdownGrace time.Duration
	// DrainDelay is how long, on shutdown, the edge goes on serving with
	// readiness off before it stops accepting: a load balancer (or a
	// Kubernetes Service) takes it out of rotation meanwhile, and every
	// response carries "Connection: close", so clients leave its kept-alive
	// connections after their current request instead of sending one on a
	// connection the closing server is tearing down. Default 0 (stop
	// accepting at once, as on a laptop).
	DrainDelay time.Duration
	// Streams tunes stream definitions created at start.
	Streams events.StreamOptions
	// UploadPartBytes is the part size of resumable model uploads. Default
	// 64 MiB.
	UploadPartBytes int64
	// SecretsKey is the workers' public key (package sealed). Engine API
	// keys given to the admin API are sealed to it, and keys stored in
	// clear by older versions are sealed at start. Nil: the admin API
	// refuses engine API keys. The edge never holds the private half.
	SecretsKey *sealed.PublicKey
	// ReservationTTL is how long a budget reservation counts when its
	// request's usage never settles (an edge or worker killed mid-request);
	// it must exceed the longest request. Default 15m (spend.DefaultHoldTTL).
	ReservationTTL time.Duration
	// IdleTimeout closes a keep-alive connection that sent no new request
	// for this long. Default 90s.
	IdleTimeout time.Duration
	// HeaderTimeout bounds the time a client takes to send a request's
	// headers (and a new connection its first request). Default 10s.
	HeaderTimeout time.Duration
	// BodyGrace and MinBodyRate bound the time a request body may take: a
	// body must have arrived BodyGrace after the headers plus the time its
	// bytes take at MinBodyRate bytes per second; a slower one gets 408 and
	// the connection is closed. Defaults 30s and 64 KiB/s (a 20 MiB body
	// then has 30s + 320s). The deadline ends with the body, so streaming
	// answers are not cut.
	BodyGrace   time.Duration
	MinBodyRate int64
	// MaxConnections caps the client connections open at once; a
	// connection beyond it is answered 503 overloaded and closed. Default
	// 10000.
	MaxConnections int
	// BatchWindow is how long a batch has before its unfinished lines
	// expire (its expires_at); it must be the batch service's window.
	// Default 24h.
	BatchWindow time.Duration
	// BatchMaxEnqueuedLines and BatchMaxEnqueuedTokens bound a tenant's
	// unfinished batch lines and estimated tokens (input bytes/4) where
	// none of its batch queues sets a bound; a create past them is
	// refused with 429 batch_enqueued_limit_exceeded. Defaults 1,000,000
	// lines and no token bound; a negative value means no bound.
	BatchMaxEnqueuedLines  int64
	BatchMaxEnqueuedTokens int64
	// Classifier judges prompts for admission and /v1/moderations (the
	// tenant's or key's registry.AdmissionPolicy says what is done with
	// a malicious one). Default the built-in classifier; the process
	// builds an external or combined one from --admission-classifier-url.
	Classifier guard.Classifier
	// ClassifierURL, when set (and Classifier is not), adds an external
	// classifier served over HTTP (guard.NewHTTP: Llama Prompt Guard 2
	// behind TEI's /predict, or {"text"} → {label, score}), combined with
	// the built-in one by ClassifierMode: "max" (the default: the higher
	// score of the two per category) or "external_only".
	ClassifierURL     string
	ClassifierMode    string
	ClassifierTimeout time.Duration
	// PII finds and masks personal data in prompts for the policies that
	// ask (default guard.MaskPII).
	PII func(text string) (masked string, kinds []string)
	// ResponsesRetention is how long a stored response (POST /v1/responses
	// with store true, the default) can be read and chained onto; each
	// expires on its own. Default 30 days (responses.DefaultRetention).
	ResponsesRetention time.Duration
	// ConsoleSecureCookies marks the web console's session cookie Secure
	// on plain HTTP too: for an edge behind a TLS-terminating proxy that
	// does not send X-Forwarded-Proto.
	ConsoleSecureCookies bool
}

// DefaultBatchWindow is the batch window unless configured.
const DefaultBatchWindow = 24 * time.Hour

// DefaultBatchMaxEnqueuedLines is a tenant's bound on unfinished batch
// lines unless configured.
const DefaultBatchMaxEnqueuedLines = 1_000_000

// Validate reports every problem with c; it never mutates c.
func (c Config) Validate() error {
	var errs []error
	if len(c.AdminKey) < 16 {
		errs = append(errs, errors.New("AdminKey must be at least 16 characters"))
	}
	if c.MaxBodyBytes < 0 || c.MaxFileBytes < 0 || c.NoWorkerWait < 0 || c.HeartbeatTimeout < 0 || c.ShutdownGrace < 0 || c.DrainDelay < 0 || c.FailoverWait < 0 || c.Cooldown < 0 || c.UploadPartBytes < 0 || c.ReservationTTL < 0 ||
		c.IdleTimeout < 0 || c.HeaderTimeout < 0 || c.BodyGrace < 0 || c.MinBodyRate < 0 || c.MaxConnections < 0 || c.BatchWindow < 0 || c.ResponsesRetention < 0 {
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
	// Objects stores uploaded files and model files; without it the Files,
	// Vector stores and model upload APIs answer 503 storage_unavailable.
	Objects objstore.Store
	// Listener, when set, is served instead of listening on Config.Listen.
	Listener net.Listener
	// Ready, when set, must also report true for /readyz to answer 200 (the
	// all-in-one process uses it to wait for every service).
	Ready func() bool
	// RoutingClock, when set, is the clock of engine cooldowns (tests);
	// default time.Now.
	RoutingClock func() time.Time
}

// Service is one edge replica.
type Service struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	tracer  trace.Tracer
	metrics *inference.Metrics
	// modelGauges reads the directory of the running domains.
	modelGauges *modelMetrics
	modMetrics  *moderations.Metrics
	// connMetrics count client connections.
	connMetrics *connMetrics

	ready    atomic.Bool
	draining atomic.Bool
	// leaving is set for the DrainDelay before draining: readiness is off
	// and connections close after their response, requests are served.
	leaving atomic.Bool
	addr    atomic.Value
	// api serves the domains once Run has opened what they need; before,
	// only health and metrics answer.
	api atomic.Pointer[http.Handler]

	// streamCtx ends streams still open when the shutdown grace is over.
	streamCtx  context.Context
	endStreams context.CancelCauseFunc
	handler    http.Handler
	booting    http.Handler
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
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 90 * time.Second
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = 10 * time.Second
	}
	if cfg.BodyGrace == 0 {
		cfg.BodyGrace = 30 * time.Second
	}
	if cfg.MinBodyRate == 0 {
		cfg.MinBodyRate = 64 << 10
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = 10000
	}
	if cfg.BatchWindow == 0 {
		cfg.BatchWindow = DefaultBatchWindow
	}
	switch {
	case cfg.BatchMaxEnqueuedLines == 0:
		cfg.BatchMaxEnqueuedLines = DefaultBatchMaxEnqueuedLines
	case cfg.BatchMaxEnqueuedLines < 0:
		cfg.BatchMaxEnqueuedLines = 0
	}
	cfg.BatchMaxEnqueuedTokens = max(cfg.BatchMaxEnqueuedTokens, 0)
	if cfg.InstanceID == "" {
		cfg.InstanceID = "edge-" + events.NewID()[:8]
	}
	if cfg.PII == nil {
		cfg.PII = guard.MaskPII
	}
	if cfg.Classifier == nil {
		builtin := guard.NewBuiltin(guard.BuiltinConfig{})
		cfg.Classifier = builtin
		if cfg.ClassifierURL != "" {
			ext, err := guard.NewHTTP(guard.HTTPConfig{URL: cfg.ClassifierURL, Timeout: cfg.ClassifierTimeout})
			if err != nil {
				return nil, fmt.Errorf("edge: admission classifier: %w", err)
			}
			mode := cfg.ClassifierMode
			switch mode {
			case "":
				mode = "max"
			case "max", "external_only":
			default:
				return nil, fmt.Errorf("edge: admission classifier mode %q is not max or external_only", mode)
			}
			cfg.Classifier = guard.Combine(mode, ext, builtin)
		}
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Tracer == nil {
		deps.Tracer = noop.NewTracerProvider()
	}
	m, err := inference.NewMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("edge: metrics: %w", err)
	}
	cm, err := newConnMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("edge: metrics: %w", err)
	}
	mm, err := moderations.NewMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("edge: metrics: %w", err)
	}
	wm, err := newModelMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("edge: metrics: %w", err)
	}
	s := &Service{
		cfg: cfg, deps: deps,
		log:         deps.Logger.With("service", "edge", "instance", cfg.InstanceID),
		tracer:      deps.Tracer.Tracer("aiforge/edge"),
		metrics:     m,
		modMetrics:  mm,
		connMetrics: cm,
		modelGauges: wm,
	}
	s.streamCtx, s.endStreams = context.WithCancelCause(context.Background())
	boot := http.NewServeMux()
	s.healthRoutes(boot)
	boot.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		contracts.Write(w, contracts.ErrServiceUnavailable("edge", "is starting"))
	})
	s.booting = boot
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.leaving.Load() {
			w.Header().Set("Connection", "close")
		}
		// The API answers once the directory holds every key and model:
		// before, a valid key would be refused as unknown (401), so a
		// restarted edge answers 503 "is starting" until then.
		if h := s.api.Load(); h != nil && s.ready.Load() {
			(*h).ServeHTTP(w, r)
			return
		}
		s.booting.ServeHTTP(w, r)
	})
	return s, nil
}

// Handler is the HTTP handler (for tests and embedding).
func (s *Service) Handler() http.Handler { return s.handler }

// Ready reports whether the edge serves traffic.
func (s *Service) Ready() bool {
	return s.ready.Load() && !s.leaving.Load() && !s.draining.Load() && (s.deps.Ready == nil || s.deps.Ready())
}

// Addr is the address the edge listens on, once Run started.
func (s *Service) Addr() string {
	if a, ok := s.addr.Load().(string); ok {
		return a
	}
	return ""
}

func (s *Service) healthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.Ready() {
			httpapi.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{}))
}

// maxBody is the body limit: the configured one, but never more than the
// bus can carry in one message (with room for headers).
func (s *Service) maxBody() int64 {
	limit := s.cfg.MaxBodyBytes
	if bus := s.deps.NC.MaxPayload() - 64<<10; bus > 0 && bus < limit {
		limit = bus
	}
	return limit
}

// domains is what Run opened for the APIs.
type domains struct {
	dir        *directory.View
	inference  *inference.Service
	vectors    *vectorstores.Service
	cache      *semcache.Cache
	mux        *http.ServeMux
	closeFuncs []func()
}

// open opens the buckets, the bus client and the directory, and mounts
// every API.
func (s *Service) open(ctx context.Context) (*domains, error) {
	js := s.deps.JS
	store, err := registry.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	cat, err := catalog.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	workers, err := registry.OpenWorkers(ctx, js)
	if err != nil {
		return nil, err
	}
	kvs := map[string]jetstream.KeyValue{}
	for _, b := range []string{events.BucketUploads, events.BucketBudgets, events.BucketRateLimits, events.BucketFiles, events.BucketVectorStores, events.BucketVectorStoreFiles,
		events.BucketBatches, events.BucketBatchQueues, events.BucketSemanticCache, events.BucketResponses, events.BucketPrompts, events.BucketContainers} {
		if kvs[b], err = js.KeyValue(ctx, b); err != nil {
			return nil, fmt.Errorf("bucket %s: %w", b, err)
		}
	}
	client, err := bridge.NewClient(s.deps.NC, bridge.ClientConfig{
		NoWorkerWait: s.cfg.NoWorkerWait, HeartbeatTimeout: s.cfg.HeartbeatTimeout,
		FailoverWait: s.cfg.FailoverWait, Logger: s.log,
	})
	if err != nil {
		return nil, err
	}
	rerankClient, err := rerank.NewClient(s.deps.NC, bridge.ClientConfig{
		NoWorkerWait: s.cfg.NoWorkerWait, HeartbeatTimeout: s.cfg.HeartbeatTimeout,
		FailoverWait: s.cfg.FailoverWait, Logger: s.log,
	})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	d := &domains{mux: http.NewServeMux(), closeFuncs: []func(){func() { _ = client.Close() }, func() { _ = rerankClient.Close() }}}
	// Revoking a key (on any replica) ends its requests in flight here.
	d.dir = directory.New(store, cat, directory.Options{Logger: s.log, Workers: workers, Routers: true, OnChange: func(c directory.Change) {
		if c.Kind == directory.KindKey && c.Deleted {
			d.inference.Revoke(c.ID)
		}
	}})
	s.modelGauges.view.Store(d.dir)
	d.cache, err = semcache.New(semcache.Deps{KV: kvs[events.BucketSemanticCache], Embed: client, JS: js, InstanceID: s.cfg.InstanceID,
		Logger: s.log, Registerer: s.deps.Registerer})
	if err != nil {
		return nil, err
	}
	routes := routing.New(routing.Deps{Directory: d.dir, Embed: client, JS: js, InstanceID: s.cfg.InstanceID, Logger: s.log})
	d.inference = inference.New(inference.Deps{
		Routes: routes, Cache: d.cache,
		Client: client, Directory: d.dir, JS: js,
		Budgets: kvs[events.BucketBudgets], Rates: kvs[events.BucketRateLimits],
		Metrics: s.metrics, Tracer: s.tracer, Logger: s.log, InstanceID: s.cfg.InstanceID,
		MaxBody: s.maxBody(), Draining: s.draining.Load, Streams: s.streamCtx, HoldTTL: s.cfg.ReservationTTL,
		Routing:    inference.RoutingConfig{CooldownFailures: s.cfg.CooldownFailures, Cooldown: s.cfg.Cooldown, Now: s.deps.RoutingClock},
		Classifier: s.cfg.Classifier, PII: s.cfg.PII,
	})
	fileAPI := files.New(files.Deps{Objects: s.deps.Objects, KV: kvs[events.BucketFiles], Keys: d.dir, Logger: s.log, MaxFileBytes: s.cfg.MaxFileBytes})
	d.vectors = vectorstores.New(vectorstores.Deps{
		StoresKV: kvs[events.BucketVectorStores], FilesKV: kvs[events.BucketVectorStoreFiles], FileAPI: fileAPI,
		Directory: d.dir, Storage: s.deps.Objects != nil, JS: js, NC: s.deps.NC, Rerank: rerankClient, Logger: s.log, InstanceID: s.cfg.InstanceID,
	})

	sandboxes := containers.NewClient(s.deps.NC, containers.ClientConfig{})

	s.healthRoutes(d.mux)
	d.inference.Routes(d.mux)
	responses.New(responses.Deps{Inference: d.inference, Search: d.vectors, Sandbox: sandboxes,
		Responses: kvs[events.BucketResponses], Prompts: kvs[events.BucketPrompts], Retention: s.cfg.ResponsesRetention}).Routes(d.mux)
	moderations.New(moderations.Deps{Classifier: s.cfg.Classifier, Keys: d.dir, Tenants: d.dir.Tenant, MaxBody: s.maxBody(),
		Logger: s.log, Metrics: s.modMetrics}).Routes(d.mux)
	fileAPI.Routes(d.mux)
	batches.New(batches.Deps{
		Batches: kvs[events.BucketBatches], Queues: kvs[events.BucketBatchQueues], Files: fileAPI, Keys: d.dir,
		Storage: s.deps.Objects != nil, Logger: s.log, Window: s.cfg.BatchWindow,
		MaxEnqueuedLines: s.cfg.BatchMaxEnqueuedLines, MaxEnqueuedTokens: s.cfg.BatchMaxEnqueuedTokens,
	}).Routes(d.mux)
	d.vectors.Routes(d.mux)
	containers.New(containers.Deps{Client: sandboxes, Keys: d.dir, Objects: s.deps.Objects, Rates: kvs[events.BucketRateLimits], Logger: s.log}).Routes(d.mux)
	models.New(models.Deps{
		Catalog: cat, Uploads: kvs[events.BucketUploads], Objects: s.deps.Objects, JS: js, Directory: d.dir,
		AdminKey: s.cfg.AdminKey, Logger: s.log, InstanceID: s.cfg.InstanceID, UploadPartBytes: s.cfg.UploadPartBytes,
	}).Routes(d.mux)
	tenantBuckets, err := tenantbucket.OpenStore(ctx, js)
	if err != nil {
		return nil, err
	}
	admin.New(admin.Deps{Store: store, Directory: d.dir, AdminKey: s.cfg.AdminKey, Logger: s.log, SecretsKey: s.cfg.SecretsKey, Budgets: kvs[events.BucketBudgets],
		BatchQueues: kvs[events.BucketBatchQueues], NC: s.deps.NC, Cache: d.cache, TenantBuckets: tenantBuckets}).Routes(d.mux)
	s.sealLegacyEngineKeys(ctx, store)
	reports.New(reports.Deps{NC: s.deps.NC, JS: js, Keys: d.dir, AdminKey: s.cfg.AdminKey, Logger: s.log, InstanceID: s.cfg.InstanceID}).Routes(d.mux)
	con, err := console.New(console.Deps{API: d.mux, AdminKey: s.cfg.AdminKey, Batches: kvs[events.BucketBatches], VectorStores: kvs[events.BucketVectorStores],
		VectorStoreFiles: kvs[events.BucketVectorStoreFiles], Containers: kvs[events.BucketContainers], JS: js, Logger: s.log, SecureCookies: s.cfg.ConsoleSecureCookies})
	if err != nil {
		return nil, err
	}
	con.Routes(d.mux)
	return d, nil
}

// sealLegacyEngineKeys seals the engine keys that bindings written before
// keys were sealed keep in clear. A failure is logged, not fatal: those
// bindings keep working, and the next start tries again.
func (s *Service) sealLegacyEngineKeys(ctx context.Context, store *registry.Store) {
	if s.cfg.SecretsKey == nil {
		ms, err := store.ListModels(ctx)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.HasClearEngineKey() {
				s.log.Warn("a model's engine api key is stored in clear; give the edge the workers' secrets public key to seal it", "model", m.Name)
			}
		}
		return
	}
	done, err := store.SealLegacyEngineKeys(ctx, *s.cfg.SecretsKey)
	for _, name := range done {
		s.log.Info("sealed an engine api key stored in clear by an older version", "model", name)
	}
	if err != nil {
		s.log.Error("sealing engine api keys stored in clear", "err", err)
	}
}

// serveWithin bounds how long a starting edge holds its bound listener
// unserved while its directory syncs.
const serveWithin = 10 * time.Second

// Run serves until ctx ends, then drains: readiness turns false, no new
// requests are accepted, open streams get ShutdownGrace to finish and are
// then ended with an SSE error.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Ensure(ctx, s.deps.JS, s.cfg.Streams); err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	d, err := s.open(ctx)
	if err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	defer func() {
		for _, f := range d.closeFuncs {
			f()
		}
	}()
	api := httpapi.OpenAIShaped(d.mux)
	s.api.Store(&api)

	watchCtx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.dir.Run(watchCtx) })
	wg.Go(func() { _ = d.cache.Run(watchCtx) })
	wg.Go(func() {
		if err := d.vectors.RunDocStatus(watchCtx); err != nil {
			s.log.Error("document status consumer ended", "err", err)
		}
	})
	defer func() { stopWatch(); wg.Wait() }()

	ln := s.deps.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("edge: listen: %w", err)
		}
	}
	s.addr.Store(ln.Addr().String())
	ln = &limitListener{Listener: ln, max: int64(s.cfg.MaxConnections), metrics: s.connMetrics}
	// No ReadTimeout: it would cut large uploads and long streams alike;
	// bodyDeadline bounds bodies by their size instead.
	srv := &http.Server{
		Handler:           bodyDeadline(s.handler, s.cfg.BodyGrace, s.cfg.MinBodyRate),
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	serve := sync.OnceFunc(func() { go func() { serveErr <- srv.Serve(ln) }() })

	// Ready once the directory delivered its initial state. Until then the
	// listener is bound but not served, for up to serveWithin: a client
	// that connects meanwhile waits in the accept queue for the moment it
	// takes (well under a second) instead of getting 503 "is starting"; an
	// edge whose directory takes longer serves, and answers that.
	synced := make(chan error, 1)
	go func() { synced <- d.dir.WaitSynced(ctx) }()
	early := time.NewTimer(serveWithin)
	defer early.Stop()
	select {
	case <-synced:
		serve()
	case <-early.C:
		s.log.Warn("the key and model directory is not synced yet: serving, 503 \"is starting\" until it is", "after", serveWithin.String())
		serve()
		select {
		case err := <-serveErr:
			return fmt.Errorf("edge: serve: %w", err)
		case <-synced:
		}
	case <-ctx.Done():
		serve()
	}
	if ctx.Err() == nil {
		s.ready.Store(true)
		s.log.Info("edge ready", "addr", ln.Addr().String())
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			return fmt.Errorf("edge: serve: %w", err)
		}
	}
	if s.cfg.DrainDelay > 0 {
		s.leaving.Store(true)
		s.log.Info("edge leaving: readiness off, connections close after their response", "drain_delay", s.cfg.DrainDelay.String())
		t := time.NewTimer(s.cfg.DrainDelay)
		select {
		case <-t.C:
		case err := <-serveErr:
			t.Stop()
			return fmt.Errorf("edge: serve: %w", err)
		}
	}
	s.draining.Store(true)
	s.log.Info("edge draining", "grace", s.cfg.ShutdownGrace.String())
	graceCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(graceCtx); err != nil {
		s.endStreams(inference.ErrShuttingDown)
		shortCtx, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel2()
		if err := srv.Shutdown(shortCtx); err != nil {
			_ = srv.Close()
		}
	}
	s.endStreams(inference.ErrShuttingDown)
	_ = s.deps.NC.Flush()
	s.log.Info("edge stopped")
	return nil
}
