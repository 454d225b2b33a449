// Package batch is the batch service: OpenAI's Batch API behind the edge.
//
// The edge stores a batch record (pkg/batch.Record, events.BucketBatches)
// with status validating, and moves it to cancelling; the batch service
// writes everything else, always by compare-and-set. It watches the bucket,
// so on start the watch's initial state resumes every batch that is not
// final, wherever it stopped.
//
// A batch goes through:
//
//  1. Validation: the input file is streamed from the object store twice
//     (bounded by the Batch API's limits): once to check every line, once
//     to publish each as an events.BatchLineV1 on the BATCH stream with
//     its LineID as envelope id, so a validation redone after a crash
//     stores each line once. Errors fail the batch with errors.data[].
//  2. Dispatch: a durable pull consumer per batch takes its lines; the
//     dispatcher keeps per (tenant, model) a FIFO of batches with lines
//     held ready, tells the fair-share scheduler the waiting lines and
//     each model's capacity per worker class (events.BucketWorkers), and
//     sends each admitted line through the bridge on the batch family
//     (bridge.FamilyBatch), lines admitted together for one model to the
//     same replica (batch-union). A retryable failure is handed back to
//     JetStream with a delay (not counted as failed) until the last
//     attempt. The answer becomes an events.BatchResultV1 (envelope id
//     LineID), published before the line is acknowledged.
//  3. Finalization: once every line has a result (or at expiry, or on
//     cancel, after the lines in flight finished and every line left got
//     a batch_expired or batch_cancelled result), the results are read
//     back, the first per line kept, and the output file (2xx answers) and
//     error file (the rest) written in input order under ids derived from
//     the batch id; the record gets its final status; the batch's lines,
//     results and consumer are removed.
//
// A line's LineID is also its request id at the worker and the id of its
// usage event, so a line run twice (the batch service killed mid-line) is
// billed once, and the first-result rule puts each custom_id once in the
// files. Every final status publishes events.BatchFinishedV1, from which
// the tenant's webhook is delivered (durable consumer "batch-webhooks").
package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Service is one batch service replica.
type Service struct {
	cfg    Config
	deps   Deps
	log    *slog.Logger
	m      *metrics
	tracer trace.Tracer

	batches jetstream.KeyValue
	files   jetstream.KeyValue
	reg     *registry.Store
	stream  jetstream.Stream
	client  *bridge.Client
	disp    *dispatcher

	lineReg   *events.Registry
	resultReg *events.Registry

	running atomic.Bool
	ready   atomic.Bool

	mu      sync.Mutex
	runners map[string]*runner // by record key
	wg      sync.WaitGroup
	ctx     context.Context // the runners' context, set by Run

	// onStop, a test hook, is called when a batch's dispatch stops.
	onStop func(batchID string)
}

// New validates cfg and deps and returns a stopped service.
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
	if deps.Scheduler == nil {
		deps.Scheduler = defaultScheduler(cfg)
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("batch: metrics: %w", err)
	}
	s := &Service{
		cfg: cfg, deps: deps, log: deps.Logger.With("service", "batch"), m: m,
		tracer:    deps.Tracer.Tracer("github.com/aiforge/aiforge/services/batch"),
		lineReg:   events.NewRegistry(func() events.Event { return new(events.BatchLineV1) }),
		resultReg: events.NewRegistry(func() events.Event { return new(events.BatchResultV1) }),
		runners:   map[string]*runner{},
	}
	s.disp = newDispatcher(s)
	return s, nil
}

// Ready reports whether the service has resumed the batches it found.
func (s *Service) Ready() bool { return s.ready.Load() }

// Run watches the batches and serves them until ctx ends; then it stops
// dispatching, hands the lines it holds back to JetStream and returns.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("batch: Run called twice")
	}
	js := s.deps.JS
	var err error
	if s.batches, err = js.KeyValue(ctx, events.BucketBatches); err != nil {
		return fmt.Errorf("batch: bucket %s: %w", events.BucketBatches, err)
	}
	if s.files, err = js.KeyValue(ctx, events.BucketFiles); err != nil {
		return fmt.Errorf("batch: bucket %s: %w", events.BucketFiles, err)
	}
	queues, err := js.KeyValue(ctx, events.BucketBatchQueues)
	if err != nil {
		return fmt.Errorf("batch: bucket %s: %w", events.BucketBatchQueues, err)
	}
	workers, err := registry.OpenWorkers(ctx, js)
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if s.reg, err = registry.Open(ctx, js); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if s.stream, err = js.Stream(ctx, events.StreamBatch); err != nil {
		return fmt.Errorf("batch: stream %s: %w", events.StreamBatch, err)
	}
	if s.client, err = bridge.NewClient(s.deps.NC, bridge.ClientConfig{Family: bridge.FamilyBatch, Logger: s.log}); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	defer func() { _ = s.client.Close() }()

	hooks, err := s.webhookConsumer()
	if err != nil {
		return err
	}

	qsub, err := s.deps.NC.QueueSubscribe(events.BatchQuery, s.cfg.QueueGroup, s.onQuery)
	if err != nil {
		return fmt.Errorf("batch: subscribe %s: %w", events.BatchQuery, err)
	}
	defer func() { _ = qsub.Unsubscribe() }()

	bg, stop := context.WithCancel(ctx)
	defer stop()
	s.mu.Lock()
	s.ctx = bg
	s.mu.Unlock()

	errc := make(chan error, 5)
	var wg sync.WaitGroup
	goRun := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(bg); err != nil && bg.Err() == nil {
				errc <- fmt.Errorf("batch: %s: %w", name, err)
			}
		}()
	}
	goRun("dispatcher", s.disp.run)
	goRun("workers watch", func(ctx context.Context) error { return workers.Watch(ctx, s.disp.onWorker) })
	goRun("queues watch", func(ctx context.Context) error { return s.watchQueues(ctx, queues) })
	goRun("webhooks", hooks.Run)
	goRun("batches watch", s.watchBatches)

	var failure error
	select {
	case <-ctx.Done():
	case failure = <-errc:
		s.log.Error("batch: stopping", "err", failure)
	}
	stop()
	s.wg.Wait() // runners: they stop dispatching and hand their lines back
	wg.Wait()
	return failure
}

// watchBatches follows the batch records: every record that is not final
// has a runner.
func (s *Service) watchBatches(ctx context.Context) error {
	return kv.Watch(ctx, s.batches, func(c kv.Change[json.RawMessage], initialDone bool) {
		if initialDone {
			s.cleanupOrphans(ctx)
			s.ready.Store(true)
			return
		}
		if !strings.HasPrefix(c.Key, "b.") {
			return // idempotency keys
		}
		if c.Deleted {
			s.mu.Lock()
			r := s.runners[c.Key]
			s.mu.Unlock()
			if r != nil {
				r.cancel()
			}
			return
		}
		var rec api.Record
		if c.Err != nil || json.Unmarshal(c.Value, &rec) != nil || rec.ID == "" || rec.Tenant == "" {
			s.log.Warn("batch: a batch record that does not decode; skipped", "key", c.Key)
			return
		}
		s.onRecord(c.Key, rec, c.Revision)
	})
}

// onRecord hands a record to its runner, starting one for a batch that is
// not final.
func (s *Service) onRecord(key string, rec api.Record, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runners[key]; r != nil {
		r.update(rec, rev)
		return
	}
	if api.Final(rec.Status) || s.ctx == nil || s.ctx.Err() != nil {
		return
	}
	r := newRunner(s, key, rec, rev)
	s.runners[key] = r
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r.run()
		s.mu.Lock()
		if s.runners[key] == r {
			delete(s.runners, key)
		}
		s.mu.Unlock()
	}()
}

// cleanupOrphans removes the consumers (and the lines and results) of
// batches that are final or gone: a service stopped between a batch's
// final status and its cleanup leaves them behind.
func (s *Service) cleanupOrphans(ctx context.Context) {
	lister := s.stream.ListConsumers(ctx)
	var orphans []*jetstream.ConsumerInfo
	for info := range lister.Info() {
		key := info.Config.Metadata[metaBatchKey]
		if key == "" {
			continue
		}
		rec, _, err := kv.Get[api.Record](ctx, s.batches, key)
		if errors.Is(err, kv.ErrNotFound) || (err == nil && api.Final(rec.Status)) {
			orphans = append(orphans, info)
		}
	}
	if err := lister.Err(); err != nil && ctx.Err() == nil {
		s.log.Warn("batch: list consumers", "err", err)
	}
	for _, info := range orphans {
		id := info.Config.Metadata[metaBatchID]
		if id == "" {
			continue
		}
		s.cleanup(ctx, id, info.Config.Metadata[metaTenant])
	}
}

// onQuery answers events.BatchQuery.
func (s *Service) onQuery(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	var req api.QueryRequest
	var reply api.QueuesReply
	switch err := json.Unmarshal(m.Data, &req); {
	case err != nil:
		reply.Error = "the batch query is not valid JSON"
	case req.Kind == api.QueryQueues || req.Kind == "":
		reply = s.disp.status()
	default:
		reply.Error = fmt.Sprintf("unknown query kind %q (want %q)", req.Kind, api.QueryQueues)
	}
	if reply.Pools == nil {
		reply.Pools = []api.PoolStatus{}
	}
	if reply.Queues == nil {
		reply.Queues = []api.QueueStatus{}
	}
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}
