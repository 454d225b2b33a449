package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
)

// Config configures the ingest service.
type Config struct {
	// MaxFileBytes bounds a file read into memory for parsing. Default 256 MiB.
	MaxFileBytes int64
	// MaxDeliver is how often a transient failure (object store, bus) is
	// retried before the file is failed. Default 8. A file that is at fault
	// (unparsable, over a limit) is failed at once, never retried.
	MaxDeliver int
	// Workers is how many files are parsed at once. Default 4.
	Workers int
	// MaxPerTenant is how many of the Workers one tenant's files may hold.
	// Default Workers-1 (at least 1): one slot is always left for the
	// other tenants, so their files never wait behind a tenant's huge ones.
	MaxPerTenant int
	// Window is how many ingest requests are held at once (parsing or
	// waiting for a worker; the consumer's MaxAckPending). Default 64. A
	// tenant's files wait behind those of tenants with fewer files parsing
	// only within this window.
	Window int
	// DocTimeout is the per-document time budget: object store reads,
	// parsing, chunking and the write of the chunks. A file that takes
	// longer is failed (limit "parser.time_budget"). Default 10 minutes.
	// The lease on the request is kept with events.InProgress meanwhile.
	DocTimeout time.Duration
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	if c.MaxFileBytes < 0 || c.MaxDeliver < 0 || c.Workers < 0 || c.MaxPerTenant < 0 || c.Window < 0 || c.DocTimeout < 0 {
		return errors.New("ingest: limits must not be negative")
	}
	return nil
}

// Deps are the service's collaborators.
type Deps struct {
	NC      *nats.Conn
	JS      jetstream.JetStream
	Objects objstore.Store
	Logger  *slog.Logger
	// Parser parses untrusted files. aiforge up and run ingest use a
	// ChildProcess; nil parses in process (InProcess), as tests do.
	Parser Parser
	// Tracer creates the service's spans; default no-op (trace context
	// still flows from event to event).
	Tracer trace.TracerProvider
	// Registerer, when set, receives the metrics of the service's
	// consumers (events.NewConsumerMetrics).
	Registerer prometheus.Registerer
}

// Service parses and chunks the files added to vector stores.
type Service struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	// metrics are the consumer's; nil without Deps.Registerer.
	metrics *events.ConsumerMetrics
	fair    *fairQueue
	// stopping ends when Run's context does: work in progress is abandoned
	// then (its request redelivered later) rather than holding shutdown for
	// up to DocTimeout.
	stopping atomic.Pointer[context.Context]
}

// New validates and builds the service.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.JS == nil || deps.Objects == nil {
		return nil, errors.New("ingest: Deps.JS and Deps.Objects are required")
	}
	if cfg.MaxFileBytes == 0 {
		cfg.MaxFileBytes = 256 << 20
	}
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = 8
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.MaxPerTenant == 0 {
		cfg.MaxPerTenant = max(1, cfg.Workers-1)
	}
	if cfg.Window == 0 {
		cfg.Window = 64
	}
	cfg.Window = max(cfg.Window, cfg.Workers)
	if cfg.DocTimeout == 0 {
		cfg.DocTimeout = 10 * time.Minute
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Tracer == nil {
		deps.Tracer = noop.NewTracerProvider()
	}
	if deps.Parser == nil {
		p, err := NewInProcess()
		if err != nil {
			return nil, err
		}
		deps.Parser = p
	}
	var cm *events.ConsumerMetrics
	if deps.Registerer != nil {
		var err error
		if cm, err = events.NewConsumerMetrics(deps.Registerer); err != nil {
			return nil, fmt.Errorf("%s: metrics: %w", "ingest", err)
		}
	}
	return &Service{cfg: cfg, deps: deps, log: deps.Logger.With("service", "ingest"), fair: newFairQueue(cfg.Workers, cfg.MaxPerTenant), metrics: cm}, nil
}

// Run consumes ingest requests until ctx ends. Up to Window requests are
// held at once; Workers of them are processed, handed out fairly across
// tenants (fairQueue), in delivery order for each file.
func (s *Service) Run(ctx context.Context) error {
	s.stopping.Store(&ctx)
	reg := events.NewRegistry(func() events.Event { return &events.DocIngestRequestedV1{} })
	c, err := events.NewConsumer(s.deps.JS, reg, events.ConsumerConfig{
		Stream: events.StreamDocs, Durable: "ingest", MaxDeliver: s.cfg.MaxDeliver, Logger: s.log,
		FilterSubjects: []string{events.DocsIngestRequestedAll},
		Concurrency:    s.cfg.Window, MaxAckPending: s.cfg.Window,
		Tracer:  s.deps.Tracer.Tracer("github.com/aiforge/aiforge/services/ingest"),
		Metrics: s.metrics,
		OrderKey: func(_ events.Envelope, ev events.Event) string {
			r := ev.(*events.DocIngestRequestedV1)
			return r.Tenant + "/" + r.StoreID + "/" + r.FileID
		},
	}, func(ctx context.Context, env events.Envelope, ev events.Event) error {
		return s.handle(ctx, ev.(*events.DocIngestRequestedV1))
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// permanent marks a failure that retrying cannot fix.
type permanent struct {
	code string
	err  error
}

func (p *permanent) Error() string { return p.err.Error() }

// publishTimeout bounds the publish of a handler's outcome, made with a
// context of its own: the handler's may have expired.
const publishTimeout = 10 * time.Second

// ChunksKey is where a file's chunks for a content hash are stored.
func ChunksKey(ref events.DocRef, sha string) string {
	return objstore.TenantPrefix(ref.Tenant) + "chunks/" + ref.StoreID + "/" + ref.FileID + "/" + sha + ".jsonl"
}

func (s *Service) handle(ctx context.Context, req *events.DocIngestRequestedV1) error {
	// Keep the lease while waiting for a worker and while working.
	hb, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go keepLease(hb)

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	if stopping := s.stopping.Load(); stopping != nil {
		defer context.AfterFunc(*stopping, wcancel)()
	}
	release, err := s.fair.acquire(wctx, req.Tenant)
	if err != nil {
		return err
	}
	defer release()
	dctx, cancel := context.WithTimeout(wctx, s.cfg.DocTimeout)
	defer cancel()
	ev, err := s.process(dctx, req)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && dctx.Err() != nil {
		err = &permanent{"invalid_file", fmt.Errorf("processing the file took longer than the limit parser.time_budget (%s)", s.cfg.DocTimeout)}
	}
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer pcancel()
	var p *permanent
	if errors.As(err, &p) {
		s.log.Info("file failed", "tenant", req.Tenant, "vector_store_id", req.StoreID, "file_id", req.FileID, "err", p.err)
		f := events.DocFailedV1{DocRef: req.DocRef, Stage: "ingest", Code: p.code, Message: p.err.Error()}
		_, perr := events.Publish(pctx, s.deps.JS, f,
			events.Envelope{ID: req.DocRef.EventID("failed-ingest"), Source: "ingest", Tenant: req.Tenant})
		return perr
	}
	if err != nil {
		return err // transient: retried with backoff
	}
	_, err = events.Publish(pctx, s.deps.JS, *ev,
		events.Envelope{ID: req.DocRef.EventID("chunked"), Source: "ingest", Tenant: req.Tenant})
	return err
}

// keepLease tells the bus every few seconds that the handler whose context
// ctx is still works on its message, until ctx ends. Outside a consumer
// (tests calling handle) it does nothing.
func keepLease(ctx context.Context) {
	t := time.NewTicker(leaseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := events.InProgress(ctx); err != nil && ctx.Err() == nil {
				return
			}
		}
	}
}

// leaseEvery is how often keepLease extends the lease: well within the
// consumer's AckWait (30 s).
const leaseEvery = 5 * time.Second

func (s *Service) process(ctx context.Context, req *events.DocIngestRequestedV1) (*events.DocChunkedV1, error) {
	out := &events.DocChunkedV1{DocRef: req.DocRef, ContentSHA256: req.ContentSHA256, EmbeddingModel: req.EmbeddingModel, Attributes: req.Attributes}
	key := ChunksKey(req.DocRef, req.ContentSHA256)
	// An unchanged file was chunked before: nothing to redo.
	if info, err := s.deps.Objects.Stat(ctx, key); err == nil && info.Size > 0 && req.ContentSHA256 != "" {
		if n, err := countLines(ctx, s.deps.Objects, key); err == nil {
			out.ChunksKey, out.Chunks = key, n
			return out, nil
		}
	}
	body, _, err := s.deps.Objects.Get(ctx, req.ObjectKey)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, &permanent{"invalid_file", errors.New("the file's content is gone from the object store")}
		}
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(body, s.cfg.MaxFileBytes+1))
	body.Close()
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > s.cfg.MaxFileBytes {
		return nil, &permanent{"invalid_file", fmt.Errorf("the file is larger than the ingest limit of %d bytes", s.cfg.MaxFileBytes)}
	}
	parsed, err := s.deps.Parser.Parse(ctx, ParseRequest{Filename: req.Filename, MaxTokens: req.Chunking.MaxTokens, OverlapTokens: req.Chunking.OverlapTokens, Data: data})
	var fe *FileError
	if errors.As(err, &fe) {
		return nil, &permanent{fe.Code, fe}
	}
	if err != nil {
		return nil, err
	}
	if parsed.PeakRSS > 0 {
		s.log.Debug("file parsed", "tenant", req.Tenant, "file_id", req.FileID, "chunks", parsed.Chunks, "parser_peak_rss", parsed.PeakRSS)
	}
	if _, err := s.deps.Objects.Put(ctx, key, bytes.NewReader(parsed.JSONL), int64(len(parsed.JSONL)), "application/x-ndjson"); err != nil {
		return nil, err
	}
	out.ChunksKey, out.Chunks, out.Pages, out.Warnings = key, parsed.Chunks, parsed.Pages, parsed.Warnings
	return out, nil
}

func countLines(ctx context.Context, store objstore.Store, key string) (int, error) {
	r, _, err := store.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		n++
	}
	return n, sc.Err()
}
