package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/ingest/chunk"
	"github.com/aiforge/aiforge/services/ingest/extract"
)

// Config configures the ingest service.
type Config struct {
	// MaxFileBytes bounds a file read into memory for parsing. Default 256 MiB.
	MaxFileBytes int64
	// MaxDeliver is how often a transient failure (object store, bus) is
	// retried before the file is failed. Default 8.
	MaxDeliver int
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	if c.MaxFileBytes < 0 || c.MaxDeliver < 0 {
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
}

// Service parses and chunks the files added to vector stores.
type Service struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	tok  chunk.Tokenizer
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
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	tok, err := chunk.NewTiktoken()
	if err != nil {
		return nil, fmt.Errorf("ingest: tokenizer: %w", err)
	}
	return &Service{cfg: cfg, deps: deps, log: deps.Logger.With("service", "ingest"), tok: tok}, nil
}

// Run consumes ingest requests until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	reg := events.NewRegistry(func() events.Event { return &events.DocIngestRequestedV1{} })
	c, err := events.NewConsumer(s.deps.JS, reg, events.ConsumerConfig{
		Stream: events.StreamDocs, Durable: "ingest", MaxDeliver: s.cfg.MaxDeliver, Logger: s.log,
		FilterSubjects: []string{events.DocsIngestRequestedAll},
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

// ChunksKey is where a file's chunks for a content hash are stored.
func ChunksKey(ref events.DocRef, sha string) string {
	return objstore.TenantPrefix(ref.Tenant) + "chunks/" + ref.StoreID + "/" + ref.FileID + "/" + sha + ".jsonl"
}

func (s *Service) handle(ctx context.Context, req *events.DocIngestRequestedV1) error {
	ev, err := s.process(ctx, req)
	var p *permanent
	if errors.As(err, &p) {
		s.log.Info("file failed", "tenant", req.Tenant, "vector_store_id", req.StoreID, "file_id", req.FileID, "err", p.err)
		f := events.DocFailedV1{DocRef: req.DocRef, Stage: "ingest", Code: p.code, Message: p.err.Error()}
		_, perr := events.Publish(ctx, s.deps.JS, f,
			events.Envelope{ID: req.DocRef.EventID("failed-ingest"), Source: "ingest", Tenant: req.Tenant})
		return perr
	}
	if err != nil {
		return err // transient: retried with backoff
	}
	_, err = events.Publish(ctx, s.deps.JS, *ev,
		events.Envelope{ID: req.DocRef.EventID("chunked"), Source: "ingest", Tenant: req.Tenant})
	return err
}

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
	format := extract.Sniff(req.Filename, data)
	ex, ok := extract.ForFormat(format)
	if !ok {
		return nil, &permanent{"unsupported_file", fmt.Errorf("unsupported file type for %q (supported: PDF, HTML, Markdown, plain text, DOCX)", req.Filename)}
	}
	doc, err := ex.Extract(ctx, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, &permanent{"invalid_file", fmt.Errorf("the %s file could not be parsed: %w", format, err)}
	}
	chunks, err := chunk.Split(ctx, doc, chunk.Options{MaxTokens: req.Chunking.MaxTokens, OverlapTokens: req.Chunking.OverlapTokens}, s.tok)
	if err != nil {
		return nil, &permanent{"invalid_file", err}
	}
	if len(chunks) == 0 {
		return nil, &permanent{"invalid_file", errors.New("the file has no text to index")}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, c := range chunks {
		_ = enc.Encode(events.DocChunk{Index: c.Index, Text: c.Text, Tokens: c.Tokens, Pages: c.Pages, HeadingPath: c.HeadingPath, Hash: c.Hash})
	}
	if _, err := s.deps.Objects.Put(ctx, key, &buf, int64(buf.Len()), "application/x-ndjson"); err != nil {
		return nil, err
	}
	out.ChunksKey, out.Chunks, out.Pages, out.Warnings = key, len(chunks), doc.Pages, doc.Warnings
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
