package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiforge/aiforge/pkg/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	api "github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/services/sandbox/runtime"
)

// maxInFlight bounds the calls served at once (beyond: 429); execs are
// bounded further by one per container.
const maxInFlight = 512

// endTimeout bounds the bucket write and usage publish of a container
// that ends while the service stops.
const endTimeout = 10 * time.Second

// Service is one sandbox service replica.
type Service struct {
	cfg    Config
	deps   Deps
	log    *slog.Logger
	m      *metrics
	tracer trace.Tracer
	now    func() time.Time
	pool   pool
	rt     *runtime.Runtime // closed by Run when the service built it
	sizes  map[runtime.Class]int

	records jetstream.KeyValue // events.BucketContainers
	files   jetstream.KeyValue // events.BucketFiles

	running atomic.Bool
	ready   atomic.Bool
	readyc  chan struct{}   // closed once the service answers calls
	idTime  atomic.Int64    // the last time in an ordered id: they increase
	base    context.Context // the handlers' context: Run's

	mu         sync.Mutex
	containers map[string]*container // live ones, by id
	perTenant  map[string]int        // live containers and creates in progress
	closing    bool
	handlers   sync.WaitGroup
	sem        chan struct{}
}

// New validates cfg and deps and returns a stopped service. It builds the
// sandbox runtime and its warm pool from cfg unless deps.Runtime is set;
// when runsc cannot run here the service is still made, and answers
// creates 503 sandbox_unavailable with the reason logged.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := errors.Join(cfg.Validate(), deps.validate()); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	log := deps.Logger.With("service", "sandbox", "node", cfg.Node)
	sizes, _ := ParsePool(cfg.Pool) // checked by Validate
	if len(sizes) == 0 {
		// "none": say zero explicitly, or the runtime keeps its default.
		sizes[runtime.Class{MemoryBytes: 1 << 30, Network: api.NetworkDisabled}] = 0
	}
	rt := deps.Runtime
	var p pool
	owned := false
	if rt == nil {
		r, err := runtime.New(runtime.Config{
			Runsc: cfg.Runsc, Platform: cfg.Platform, StateDir: cfg.StateDir, CPUs: cfg.CPUs, Pids: cfg.Pids,
			DiskBytes: cfg.DiskBytes, MaxOutputBytes: cfg.MaxOutputBytes, HostUsr: cfg.HostUsr, Python: cfg.Python, Log: log,
		})
		switch {
		case errors.Is(err, runtime.ErrUnavailable):
			log.Error("sandbox: the runtime cannot run here; creates are answered 503 sandbox_unavailable", "err", err)
			p = unavailablePool{err: err}
		case err != nil:
			return nil, fmt.Errorf("sandbox: runtime: %w", err)
		default:
			rt, owned = r, true
		}
	}
	if rt != nil {
		rp, err := runtime.NewPool(rt, runtime.PoolConfig{Sizes: sizes, MaxSandboxes: cfg.MaxSandboxes})
		if err != nil {
			if owned {
				_ = rt.Close()
			}
			return nil, fmt.Errorf("sandbox: pool: %w", err)
		}
		p = runtimePool{p: rp}
	}
	s, err := newService(cfg, deps, p)
	if err != nil {
		if owned {
			_ = rt.Close()
		}
		return nil, err
	}
	if owned {
		s.rt = rt
	}
	s.sizes = sizes
	return s, nil
}

// newService makes the service over a pool (New's, or a test's).
func newService(cfg Config, deps Deps, p pool) (*Service, error) {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Tracer == nil {
		deps.Tracer = noop.NewTracerProvider()
	}
	s := &Service{
		tracer: deps.Tracer.Tracer("github.com/aiforge/aiforge/services/sandbox"),
		cfg:    cfg, deps: deps, log: deps.Logger.With("service", "sandbox", "node", cfg.Node), now: deps.Now, pool: p,
		containers: map[string]*container{}, perTenant: map[string]int{}, sem: make(chan struct{}, maxInFlight),
		readyc: make(chan struct{}),
	}
	m, err := newMetrics(deps.Registerer, func() runtime.PoolStats { return s.pool.Stats() })
	if err != nil {
		return nil, fmt.Errorf("sandbox: metrics: %w", err)
	}
	s.m = m
	return s, nil
}

// Ready reports whether the service answers calls.
func (s *Service) Ready() bool { return s.ready.Load() }

// Run serves until ctx ends: it marks the containers a previous process
// of this node left running as expired, keeps the warm pool filled,
// answers creates and lists (queue group events.SandboxQueue) and the
// calls on its own containers, and expires idle ones. When ctx ends it
// stops taking calls, closes every sandbox, marks its containers expired
// (their sandboxes are gone) and returns.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("sandbox: Run called twice")
	}
	var err error
	if s.records, err = s.deps.JS.KeyValue(ctx, events.BucketContainers); err != nil {
		return fmt.Errorf("sandbox: bucket %s: %w", events.BucketContainers, err)
	}
	if s.files, err = s.deps.JS.KeyValue(ctx, events.BucketFiles); err != nil {
		return fmt.Errorf("sandbox: bucket %s: %w", events.BucketFiles, err)
	}
	s.base = ctx
	if err := s.expireStale(ctx); err != nil {
		return err
	}

	poolCtx, stopPool := context.WithCancel(context.WithoutCancel(ctx))
	poolDone := make(chan error, 1)
	go func() { poolDone <- s.pool.Run(poolCtx) }()
	defer func() {
		stopPool()
		if err := <-poolDone; err != nil {
			s.log.Warn("sandbox: pool", "err", err)
		}
		if s.rt != nil {
			if err := s.rt.Close(); err != nil {
				s.log.Warn("sandbox: runtime close", "err", err)
			}
		}
	}()

	var subs []*nats.Subscription
	defer func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}()
	for _, op := range []string{api.OpCreate, api.OpList} {
		handle := s.onCreate
		if op == api.OpList {
			handle = s.onList
		}
		sub, err := s.deps.NC.QueueSubscribe(events.SandboxRequest(op), events.SandboxQueue, func(m *nats.Msg) { s.spawn(m, op, handle) })
		if err != nil {
			return fmt.Errorf("sandbox: subscribe %s: %w", events.SandboxRequest(op), err)
		}
		subs = append(subs, sub)
	}
	if err := s.deps.NC.FlushTimeout(10 * time.Second); err != nil && ctx.Err() == nil {
		return fmt.Errorf("sandbox: flush: %w", err)
	}
	s.ready.Store(true)
	close(s.readyc)
	s.log.Info("sandbox: serving", "pool", poolString(s.sizes), "max_sandboxes", s.cfg.MaxSandboxes)

	tick := time.NewTicker(s.cfg.SweepInterval)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			s.sweep()
		}
	}

	s.ready.Store(false)
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	subs = nil
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.endAll()
	s.handlers.Wait()
	s.endAll() // any a create in flight registered meanwhile
	return nil
}

// endAll ends every live container as expired: the service stops, and
// their sandboxes with it.
func (s *Service) endAll() {
	s.mu.Lock()
	all := make([]*container, 0, len(s.containers))
	for _, c := range s.containers {
		all = append(all, c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.end(c, api.StatusExpired, false)
		}()
	}
	wg.Wait()
}

// expireStale marks the records of this node still running, left by a
// previous process whose sandboxes died with it, as expired, and bills
// their life up to their last activity.
func (s *Service) expireStale(ctx context.Context) error {
	entries, err := kv.List[api.Record](ctx, s.records)
	if err != nil {
		var de *kv.DecodeError
		if !errors.As(err, &de) {
			return fmt.Errorf("sandbox: list %s: %w", events.BucketContainers, err)
		}
		s.log.Warn("sandbox: records that do not decode are left alone", "err", err)
	}
	for _, e := range entries {
		r := e.Value
		if r.Node != s.cfg.Node || r.Status != api.StatusRunning {
			continue
		}
		rec, written, err := kv.Update(ctx, s.records, e.Key, func(v *api.Record, exists bool) error {
			if !exists || v.Node != s.cfg.Node || v.Status != api.StatusRunning {
				return kv.ErrNoChange
			}
			v.Status = api.StatusExpired
			return nil
		})
		if err != nil {
			return fmt.Errorf("sandbox: expire stale %s: %w", e.Key, err)
		}
		if !written {
			continue
		}
		s.log.Info("sandbox: a container of a previous process expired", "container", rec.ID, "tenant", rec.Tenant)
		mem, _ := api.MemoryBytes(rec.MemoryLimit)
		start := time.Unix(rec.CreatedAt, 0)
		end := time.Unix(max(rec.LastActiveAt, rec.CreatedAt), 0)
		s.publishUsage(lifeUsage(rec.ID, rec.Tenant, rec.KeyID, s.cfg.Node, mem, start, end, 0, 0, false))
	}
	return nil
}

// handler serves one call: it returns the reply body (JSON-encoded) or an
// error that becomes an ErrorBody.
type handler func(ctx context.Context, m *nats.Msg, who caller) (any, error)

// spawn serves m in its own goroutine (a subscription delivers in order:
// a long exec must not hold up the calls behind it), bounded by
// maxInFlight.
func (s *Service) spawn(m *nats.Msg, op string, h handler) {
	s.mu.Lock()
	closing := s.closing
	if !closing {
		s.handlers.Add(1)
	}
	s.mu.Unlock()
	if closing {
		s.answerError(m, op, &api.ErrorBody{Status: http.StatusServiceUnavailable, Code: api.CodeSandboxUnavailable, Message: "the sandbox replica is stopping"})
		return
	}
	select {
	case s.sem <- struct{}{}:
	default:
		s.handlers.Done()
		s.answerError(m, op, &api.ErrorBody{Status: http.StatusTooManyRequests, Code: api.CodeSandboxCapacity,
			Message: fmt.Sprintf("the sandbox replica serves %d calls at once, the most it may; retry later", maxInFlight)})
		return
	}
	go func() {
		defer func() {
			<-s.sem
			s.handlers.Done()
		}()
		s.serve(m, op, h)
	}()
}

func (s *Service) serve(m *nats.Msg, op string, h handler) {
	who, err := callerOf(m)
	ctx := telemetry.Propagator.Extract(s.base, telemetry.NATSCarrier(m.Header))
	ctx, span := s.tracer.Start(ctx, "sandbox "+op, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("aiforge.sandbox.operation", op),
			attribute.String("aiforge.tenant.id", who.tenant), attribute.String("aiforge.key.id", who.keyID))
	}
	var v any
	if err == nil {
		v, err = h(ctx, m, who)
	}
	if err != nil {
		eb, internal := errorBody(err)
		span.SetStatus(codes.Error, eb.Code)
		span.SetAttributes(attribute.String("error.type", eb.Code))
		if internal {
			s.log.Error("sandbox: call failed", "op", op, "tenant", who.tenant, "err", err)
		}
		s.answerError(m, op, eb)
		return
	}
	if err := reply(m, v); err != nil {
		s.log.Warn("sandbox: reply", "op", op, "err", err)
	}
	s.m.requests.WithLabelValues(op, "200").Inc()
}

func (s *Service) answerError(m *nats.Msg, op string, eb *api.ErrorBody) {
	s.m.requests.WithLabelValues(op, strconv.Itoa(eb.Status)).Inc()
	if err := respond(m, eb.Status, errorJSON(eb)); err != nil {
		s.log.Warn("sandbox: reply", "op", op, "err", err)
	}
}

// opOf is the operation of a container subject (its last token).
func opOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// publishUsage publishes a usage event, retrying a few times; a failure
// is logged and counted (the call it bills has been answered already).
func (s *Service) publishUsage(u events.SandboxUsageV1) {
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond) // backoff between publish retries, not test synchronisation
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = events.Publish(ctx, s.deps.JS, u, events.Envelope{ID: u.ID, Tenant: u.Tenant, Source: s.cfg.Source})
		cancel()
		if err == nil || errors.Is(err, events.ErrInvalid) {
			break
		}
	}
	if err != nil {
		s.m.usageFail.Inc()
		s.log.Error("sandbox: usage event not published", "id", u.ID, "tenant", u.Tenant, "container", u.ContainerID, "kind", u.Kind, "err", err)
	}
}

// lifeUsage is a container's whole life as a usage event.
func lifeUsage(id, tenant, keyID, node string, mem int64, start, end time.Time, cpuMS, peak int64, warm bool) events.SandboxUsageV1 {
	if end.Before(start) {
		end = start
	}
	wall := end.Sub(start)
	return events.SandboxUsageV1{
		ID: id + ".life", Tenant: tenant, KeyID: keyID, ContainerID: id, Kind: events.SandboxUsageContainer,
		Status: events.UsageStatusOK, WallMS: wall.Milliseconds(), CPUMS: cpuMS, MemoryLimitBytes: mem, MemoryPeakBytes: peak,
		GBSeconds: gbSeconds(mem, wall), Warm: warm, Node: node, StartedAt: start, FinishedAt: end,
	}
}

func gbSeconds(mem int64, wall time.Duration) float64 {
	return float64(mem) / (1 << 30) * wall.Seconds()
}
