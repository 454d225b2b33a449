// Package inference is the one path by which the edge serves generation:
// it admits a request (API key, model, rate limits, budgets), picks a
// worker replica of the model (least outstanding requests or lowest
// latency among its engines, skipping engines in cooldown), bridges it
// over the bus to it, falls back to the model's fallbacks in order before
// the first byte, maps failures to OpenAI errors,
// records the usage of a stream whose worker vanished, tracks requests in
// flight so that revoking a key ends them, ends streams when the shutdown
// grace is over, and keeps the edge's metrics and spans. The OpenAI
// endpoints (chat, completions, embeddings) render through it as they are;
// other APIs (/v1/responses) pass a Renderer of their own.
package inference

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/guard"
	"github.com/aiforge/aiforge/pkg/spend"
	"github.com/aiforge/aiforge/services/edge/internal/routing"
	"github.com/aiforge/aiforge/services/edge/internal/semcache"
)

// Errors that end requests in flight (the causes of their contexts).
var (
	ErrShuttingDown = errors.New("edge: shutting down")
	ErrKeyRevoked   = errors.New("edge: api key revoked")
)

// Deps are what the inference path needs.
type Deps struct {
	Client    *bridge.Client
	Directory *directory.View
	// JS publishes the usage of lost streams.
	JS jetstream.JetStream
	// Budgets and Rates are the spend buckets (events.BucketBudgets,
	// events.BucketRateLimits).
	Budgets, Rates jetstream.KeyValue
	Metrics        *Metrics
	Tracer         trace.Tracer
	Logger         *slog.Logger
	// InstanceID names the edge replica in usage events.
	InstanceID string
	// MaxBody bounds a request body.
	MaxBody int64
	// Draining reports whether the edge stopped taking requests.
	Draining func() bool
	// Streams ends, with cause ErrShuttingDown, when the shutdown grace is
	// over: every request still in flight is ended then.
	Streams context.Context
	// HoldTTL is how long a budget reservation counts when its request's
	// usage never settles (its edge or worker died); default
	// spend.DefaultHoldTTL.
	HoldTTL time.Duration
	// Now is the clock of admission and of engine cooldowns; default
	// time.Now.
	Now func() time.Time
	// Routing tunes the choice between a model's worker replicas and the
	// engines' cooldowns.
	Routing RoutingConfig
	// Routes serves routers (nil: no routers); Cache is the semantic
	// cache (nil: none). See hooks.go.
	Routes *routing.Service
	Cache  *semcache.Cache
	// Classifier judges prompts for admission (guard.NewBuiltin by
	// default, set by the edge); nil admits every prompt unjudged. PII
	// finds and masks personal data (guard.MaskPII); nil finds none.
	Classifier guard.Classifier
	PII        PIIMasker
}

// Service serves inference.
type Service struct {
	d   Deps
	log *slog.Logger

	flightsMu sync.Mutex
	flights   map[string]map[*flight]struct{}

	// conc bounds requests in flight per key and tenant.
	conc concurrency

	router *router

	// verdicts queues admission verdict events for the publisher.
	verdicts chan events.AdmissionVerdictV1
}

// New builds the inference path.
func New(d Deps) *Service {
	if d.HoldTTL <= 0 {
		d.HoldTTL = spend.DefaultHoldTTL
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Service{d: d, log: d.Logger, flights: make(map[string]map[*flight]struct{}), router: newRouter(d.Routing, d.Now),
		verdicts: make(chan events.AdmissionVerdictV1, verdictQueue)}
	if d.JS != nil && d.Streams != nil {
		go s.publishVerdicts(d.Streams.Done())
	}
	return s
}

func (s *Service) now() time.Time { return s.d.Now() }

// Routes mounts the OpenAI inference endpoints.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/chat/completions", s.handler(events.EndpointChatCompletions))
	mux.HandleFunc("POST /v1/completions", s.handler(events.EndpointCompletions))
	mux.HandleFunc("POST /v1/embeddings", s.handler(events.EndpointEmbeddings))
	mux.HandleFunc("POST /v1/rerank", s.rerankHandler)
}

// MaxBody is the request body limit.
func (s *Service) MaxBody() int64 { return s.d.MaxBody }

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

// Revoke ends every request in flight with the key: streams end with an
// api_key_revoked error event.
func (s *Service) Revoke(keyID string) {
	s.flightsMu.Lock()
	fs := make([]*flight, 0, len(s.flights[keyID]))
	for f := range s.flights[keyID] {
		fs = append(fs, f)
	}
	s.flightsMu.Unlock()
	for _, f := range fs {
		f.cancel(ErrKeyRevoked)
	}
	s.log.Info("api key revoked", "key_id", keyID, "streams_ended", len(fs))
}
