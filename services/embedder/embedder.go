// Package embedder turns a file's chunks into vectors: a sparse lexical
// vector for every chunk (so keyword search works with no embedding engine)
// and, when the vector store names an embedding model, a dense vector from
// that model's workers — the same path as /v1/embeddings, so embedding work
// is metered like any other. When the engine is slow or down the file waits
// (retries with backoff) and completes when it returns.
package embedder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/embedding"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/lexical"
	"github.com/aiforge/aiforge/pkg/objstore"
)

// Config configures the embedder.
type Config struct {
	// BatchSize is the number of chunks per embeddings request. Default 32.
	BatchSize int
	// MaxDeliver bounds retries of a file whose engine keeps failing; the
	// backoff grows to a minute, so files wait out an engine restart.
	// Default 30.
	MaxDeliver int
	// KeyID names the embedder in usage events. Default "system:embedder".
	KeyID string
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	if c.BatchSize < 0 || c.MaxDeliver < 0 {
		return errors.New("embedder: limits must not be negative")
	}
	return nil
}

// Deps are the embedder's collaborators.
type Deps struct {
	NC      *nats.Conn
	JS      jetstream.JetStream
	Objects objstore.Store
	Logger  *slog.Logger
	// Tracer creates the service's spans; default no-op (trace context
	// still flows from event to event).
	Tracer trace.TracerProvider
	// Registerer, when set, receives the metrics of the service's
	// consumers (events.NewConsumerMetrics).
	Registerer prometheus.Registerer
}

// Service embeds chunked files.
type Service struct {
	cfg      Config
	deps     Deps
	metrics  *events.ConsumerMetrics // nil without Deps.Registerer
	log      *slog.Logger
	analyzer *lexical.Analyzer
	client   *bridge.Client
}

// New validates and builds the service.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.NC == nil || deps.JS == nil || deps.Objects == nil {
		return nil, errors.New("embedder: Deps.NC, Deps.JS and Deps.Objects are required")
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 32
	}
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = 30
	}
	if cfg.KeyID == "" {
		cfg.KeyID = "system:embedder"
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Tracer == nil {
		deps.Tracer = noop.NewTracerProvider()
	}
	var cm *events.ConsumerMetrics
	if deps.Registerer != nil {
		var err error
		if cm, err = events.NewConsumerMetrics(deps.Registerer); err != nil {
			return nil, fmt.Errorf("%s: metrics: %w", "embedder", err)
		}
	}
	return &Service{cfg: cfg, deps: deps, log: deps.Logger.With("service", "embedder"), analyzer: lexical.NewEnglish(), metrics: cm}, nil
}

// Run consumes chunked files until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	client, err := embedding.NewClient(s.deps.NC, bridge.ClientConfig{Logger: s.log})
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	s.client = client
	reg := events.NewRegistry(func() events.Event { return &events.DocChunkedV1{} })
	backoff := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}
	c, err := events.NewConsumer(s.deps.JS, reg, events.ConsumerConfig{
		Stream: events.StreamDocs, Durable: "embedder", MaxDeliver: s.cfg.MaxDeliver, Backoff: backoff, Logger: s.log,
		FilterSubjects: []string{events.DocsChunkedAll},
		Tracer:         s.deps.Tracer.Tracer("github.com/aiforge/aiforge/services/embedder"),
		Metrics:        s.metrics,
	}, func(ctx context.Context, _ events.Envelope, ev events.Event) error {
		return s.handle(ctx, ev.(*events.DocChunkedV1))
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// VectorsKey is where a file's vectors for a content hash are stored.
func VectorsKey(ref events.DocRef, sha string) string {
	return objstore.TenantPrefix(ref.Tenant) + "vectors/" + ref.StoreID + "/" + ref.FileID + "/" + sha + ".jsonl"
}

func (s *Service) handle(ctx context.Context, in *events.DocChunkedV1) error {
	chunks, err := readChunks(ctx, s.deps.Objects, in.ChunksKey)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return s.fail(ctx, in.DocRef, in.ContentSHA256, "server_error", "the file's chunks are gone from the object store")
		}
		return err
	}
	for i := range chunks {
		chunks[i].Terms, chunks[i].Length = s.analyzer.TermFreqs(chunks[i].Text)
	}
	dense := in.EmbeddingModel != ""
	if dense {
		for start := 0; start < len(chunks); start += s.cfg.BatchSize {
			batch := chunks[start:min(start+s.cfg.BatchSize, len(chunks))]
			inputs := make([]string, len(batch))
			for i, c := range batch {
				inputs[i] = c.Text
			}
			vecs, err := embedding.Embed(ctx, s.client, embedding.Request{Model: in.EmbeddingModel, Tenant: in.Tenant, KeyID: s.cfg.KeyID, Inputs: inputs})
			if err != nil {
				if errors.Is(err, embedding.ErrRejected) {
					return s.fail(ctx, in.DocRef, in.ContentSHA256, "server_error", err.Error())
				}
				s.log.Warn("embedding engine unavailable; the file waits", "model", in.EmbeddingModel, "file_id", in.FileID, "err", err)
				return err
			}
			for i := range batch {
				batch[i].Dense = vecs[i]
			}
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, c := range chunks {
		_ = enc.Encode(c)
	}
	key := VectorsKey(in.DocRef, in.ContentSHA256)
	if _, err := s.deps.Objects.Put(ctx, key, &buf, int64(buf.Len()), "application/x-ndjson"); err != nil {
		return err
	}
	out := events.DocEmbeddedV1{DocRef: in.DocRef, VectorsKey: key, Chunks: len(chunks), Dense: dense, ContentSHA256: in.ContentSHA256}
	_, err = events.Publish(ctx, s.deps.JS, out,
		events.Envelope{ID: in.DocRef.EventID("embedded"), Source: "embedder", Tenant: in.Tenant})
	return err
}

func (s *Service) fail(ctx context.Context, ref events.DocRef, sha, code, msg string) error {
	_, err := events.Publish(ctx, s.deps.JS,
		events.DocFailedV1{DocRef: ref, Stage: "embed", Code: code, Message: msg},
		events.Envelope{ID: ref.EventID("failed-embed"), Source: "embedder", Tenant: ref.Tenant})
	return err
}

func readChunks(ctx context.Context, store objstore.Store, key string) ([]events.DocChunk, error) {
	r, _, err := store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []events.DocChunk
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var c events.DocChunk
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("embedder: chunks object %s: %w", key, err)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}
