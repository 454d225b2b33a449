// Package retriever indexes embedded files and answers searches. It follows
// the document flow (embedded files are indexed, removed files deleted) and
// answers queries on events.RetrieverQuery, embedding the query text with
// the store's model through the workers when the store has one.
package retriever

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/embedding"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/lexical"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/query"
	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/retriever/index"
)

// Config configures the retriever.
type Config struct {
	// QueueGroup shares queries among replicas. Default "retriever".
	QueueGroup string
	// KeyID names the retriever in the usage events of query embeddings.
	KeyID string
}

// Deps are the retriever's collaborators.
type Deps struct {
	NC      *nats.Conn
	JS      jetstream.JetStream
	Objects objstore.Store
	Index   index.Index
	Logger  *slog.Logger
	// Tracer creates the service's spans; default no-op (trace context
	// still flows from event to event).
	Tracer trace.TracerProvider
	// Registerer, when set, receives the metrics of the service's
	// consumers (events.NewConsumerMetrics).
	Registerer prometheus.Registerer
}

// Service indexes and searches.
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
	if deps.NC == nil || deps.JS == nil || deps.Objects == nil || deps.Index == nil {
		return nil, errors.New("retriever: Deps.NC, Deps.JS, Deps.Objects and Deps.Index are required")
	}
	if cfg.QueueGroup == "" {
		cfg.QueueGroup = "retriever"
	}
	if cfg.KeyID == "" {
		cfg.KeyID = "system:retriever"
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
			return nil, fmt.Errorf("%s: metrics: %w", "retriever", err)
		}
	}
	return &Service{cfg: cfg, deps: deps, log: deps.Logger.With("service", "retriever"), analyzer: lexical.NewEnglish(), metrics: cm}, nil
}

// Run indexes and answers queries until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	client, err := embedding.NewClient(s.deps.NC, bridge.ClientConfig{Logger: s.log})
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	s.client = client
	sub, err := s.deps.NC.QueueSubscribe(events.RetrieverQuery, s.cfg.QueueGroup, func(m *nats.Msg) { go s.answer(ctx, m) })
	if err != nil {
		return fmt.Errorf("retriever: subscribe: %w", err)
	}
	defer func() { _ = sub.Drain() }()
	reg := events.NewRegistry(func() events.Event { return &events.DocEmbeddedV1{} }, func() events.Event { return &events.DocRemovedV1{} })
	c, err := events.NewConsumer(s.deps.JS, reg, events.ConsumerConfig{
		Stream: events.StreamDocs, Durable: "retriever", Logger: s.log,
		FilterSubjects: []string{events.DocsEmbeddedAll, events.DocsRemovedAll},
		Tracer:         s.tracer(),
		Metrics:        s.metrics,
	}, func(ctx context.Context, _ events.Envelope, ev events.Event) error {
		switch e := ev.(type) {
		case *events.DocEmbeddedV1:
			return s.indexFile(ctx, e)
		case *events.DocRemovedV1:
			return s.deps.Index.DeleteFile(ctx, e.Tenant, e.StoreID, e.FileID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

func (s *Service) indexFile(ctx context.Context, e *events.DocEmbeddedV1) error {
	r, _, err := s.deps.Objects.Get(ctx, e.VectorsKey)
	if err != nil {
		return err
	}
	defer r.Close()
	var chunks []index.Chunk
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var c events.DocChunk
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return s.fail(ctx, e, "server_error", "the file's vectors could not be read")
		}
		chunks = append(chunks, index.Chunk{
			ID: index.ChunkID(e.Tenant, e.StoreID, e.FileID, c.Index), Tenant: e.Tenant, StoreID: e.StoreID, FileID: e.FileID,
			Index: c.Index, Text: c.Text, Dense: c.Dense, Terms: c.Terms, Length: c.Length, Pages: c.Pages, HeadingPath: c.HeadingPath,
		})
	}
	if err := sc.Err(); err != nil {
		return err
	}
	attrs, live, err := s.fileAttributes(ctx, e.DocRef)
	if err != nil {
		return err
	}
	if !live {
		// Removed from the store or cancelled while it was processed:
		// index nothing, and drop what an earlier version left.
		return s.deps.Index.DeleteFile(ctx, e.Tenant, e.StoreID, e.FileID)
	}
	for i := range chunks {
		chunks[i].Attributes = attrs
	}
	// An edited file replaces its chunks: drop the old ones first.
	if err := s.deps.Index.DeleteFile(ctx, e.Tenant, e.StoreID, e.FileID); err != nil {
		return err
	}
	if err := s.deps.Index.Upsert(ctx, chunks); err != nil {
		if errors.Is(err, index.ErrInvalid) {
			return s.fail(ctx, e, "invalid_file", err.Error())
		}
		return err
	}
	_, err = events.Publish(ctx, s.deps.JS,
		events.DocIndexedV1{DocRef: e.DocRef, Chunks: len(chunks), ContentSHA256: e.ContentSHA256},
		events.Envelope{ID: e.DocRef.EventID("indexed"), Source: "retriever", Tenant: e.Tenant})
	return err
}

// fileAttributes reads the vector store file's attributes (they may change
// after ingestion started); live is false when the file left the store or
// its processing was cancelled. A record that does not decode is an error
// (the file is retried, then dead-lettered and failed), never a file
// indexed without its attributes.
func (s *Service) fileAttributes(ctx context.Context, ref events.DocRef) (attrs map[string]any, live bool, err error) {
	bucket, err := s.deps.JS.KeyValue(ctx, events.BucketVectorStoreFiles)
	if err != nil {
		return nil, false, err
	}
	rec, _, err := kv.Get[vectorstore.FileRecord](ctx, bucket, vectorstore.FileKey(ref.Tenant, ref.StoreID, ref.FileID))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return rec.Attributes, rec.Live(), nil
}

func (s *Service) fail(ctx context.Context, e *events.DocEmbeddedV1, code, msg string) error {
	_, err := events.Publish(ctx, s.deps.JS,
		events.DocFailedV1{DocRef: e.DocRef, Stage: "index", Code: code, Message: msg},
		events.Envelope{ID: e.DocRef.EventID("failed-index"), Source: "retriever", Tenant: e.Tenant})
	return err
}

func (s *Service) tracer() trace.Tracer {
	return s.deps.Tracer.Tracer("github.com/aiforge/aiforge/services/retriever")
}

func (s *Service) answer(ctx context.Context, m *nats.Msg) {
	var req query.SearchRequest
	reply := query.SearchReply{}
	ctx = telemetry.Propagator.Extract(ctx, telemetry.NATSCarrier(m.Header))
	ctx, span := s.tracer().Start(ctx, "retriever search", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	fail := func(status int, msg, param string) {
		reply.Error = &query.SearchError{Status: status, Message: msg, Param: param}
		span.SetStatus(codes.Error, msg)
	}
	var filter *index.Filter
	err := json.Unmarshal(m.Data, &req)
	span.SetAttributes(attribute.String("aiforge.tenant.id", req.Tenant), attribute.Int("aiforge.search.stores", len(req.StoreIDs)))
	if err != nil || req.Tenant == "" {
		fail(400, "malformed search request", "")
	} else if filter, err = decodeFilter(req.Filter); err != nil {
		fail(400, "malformed filters: "+err.Error(), "filters")
	} else if hits, err := s.search(ctx, req, filter); err != nil {
		if errors.Is(err, index.ErrInvalid) {
			fail(400, err.Error(), "filters")
		} else {
			s.log.Error("search failed", "tenant", req.Tenant, "err", err)
			fail(502, "search failed: "+err.Error(), "")
		}
	} else {
		reply.Hits = hits
	}
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}

// decodeFilter reads OpenAI's attribute filter; nil when there is none.
func decodeFilter(raw json.RawMessage) (*index.Filter, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f index.Filter
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

func (s *Service) search(ctx context.Context, req query.SearchRequest, filter *index.Filter) ([]query.SearchHit, error) {
	text := ""
	for i, q := range req.Queries {
		if i > 0 {
			text += "\n"
		}
		text += q
	}
	// The question is analysed for BM25F: the user's terms, question words
	// at a low weight, WordNet synonyms at a lower one, the terms' order for
	// the proximity boost, and a phrase when it has only stop words.
	qt := s.analyzer.Query(text, lexical.QueryOptions{})
	q := index.Query{Tenant: req.Tenant, StoreIDs: req.StoreIDs, TermWeights: qt.Weights, Ordered: qt.Ordered, Phrase: qt.Words,
		Filter: filter, Limit: req.Limit, Mode: req.Mode, ScoreThreshold: req.ScoreThreshold}
	if h := req.HybridSearch; h != nil {
		if field, err := h.Validate(); err != nil {
			return nil, index.Invalidf("ranking_options.hybrid_search.%s: %v", field, err)
		}
		q.Fusion = index.Fusion{Method: h.Fusion, DenseWeight: h.EmbeddingWeight, SparseWeight: h.TextWeight, RRFK: h.RRFK}
	}
	if req.EmbeddingModel != "" {
		v, err := s.embedQuery(ctx, req.Tenant, req.EmbeddingModel, text)
		if err != nil {
			// Keyword search still answers when the embedding engine is down.
			s.log.Warn("query embedding failed; keyword search only", "model", req.EmbeddingModel, "err", err)
		} else {
			q.Dense = v
		}
	}
	if q.Dense == nil && q.Mode == index.ModeDense {
		q.Mode = index.ModeSparse
	}
	hits, err := s.deps.Index.Search(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]query.SearchHit, 0, len(hits))
	for _, h := range hits {
		c := h.Chunk
		out = append(out, query.SearchHit{StoreID: c.StoreID, FileID: c.FileID, ChunkIndex: c.Index, Score: h.Score, Text: c.Text,
			Pages: c.Pages, HeadingPath: c.HeadingPath, Attributes: c.Attributes})
	}
	return out, nil
}

func (s *Service) embedQuery(ctx context.Context, tenant, model, text string) ([]float32, error) {
	v, err := embedding.Embed(ctx, s.client, embedding.Request{Model: model, Tenant: tenant, KeyID: s.cfg.KeyID, Inputs: []string{text}})
	if err != nil {
		return nil, err
	}
	return v[0], nil
}
