package inference

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/events"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/guard"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/telemetry"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
	"github.com/aiforge/aiforge/services/edge/internal/semcache"
)

// Call is one generation to serve.
type Call struct {
	Key *registry.Key
	// Endpoint is the engine endpoint the worker calls
	// (events.EndpointChatCompletions, ...); usage is recorded under it.
	Endpoint string
	// Operation names the API in metrics and spans; default Endpoint.
	Operation string
	Request   Request
	// Body goes to the engine unchanged.
	Body []byte
	// Start is when the request arrived; default now.
	Start time.Time
	// Router and RouteClass are set when the requested model was a
	// router (hooks.go); Request.Model is then the class's model.
	Router, RouteClass string
	// probe is the semantic cache's miss, to keep the answer of.
	probe *semcache.Probe
	// Segments, when set, are what admission judges instead of the body's
	// messages (the Responses API marks the file_search chunks it puts in
	// the prompt as guard.SourceDocument).
	Segments []guard.Segment
	// Bridge are headers for the worker (the admission verdict, the route
	// class: bridge.HdrAdmissionAction, HdrRouter...).
	Bridge map[string]string
	// Attributes are added to the request's span (the Responses API's
	// prompt template and version).
	Attributes []attribute.KeyValue
	// requestID, when set by admission, is the request's id.
	requestID string
}

// Renderer writes a generation's answer in the shape of its API.
type Renderer interface {
	// Chunk writes one streamed payload of the engine; first is true for
	// the first, before which nothing was written.
	Chunk(w http.ResponseWriter, payload []byte, first bool) error
	// Done ends a stream that finished well.
	Done(w http.ResponseWriter)
	// Complete answers a request that was not streamed with the engine's
	// status, content type and body.
	Complete(w http.ResponseWriter, status int, contentType string, body []byte)
	// Fail answers a failed request: as an error event when started (a
	// stream's first chunk was written), else as an error response. err
	// is the bridge's error, apiErr its OpenAI form.
	Fail(w http.ResponseWriter, apiErr *contracts.Error, err error, started bool)
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// refusal is an answer given before a request reaches a worker.
type refusal struct {
	*contracts.Error
	model string
}

func (s *Service) handler(endpoint string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if ref := s.read(w, r, endpoint, start); ref != nil {
			s.refuse(w, endpoint, ref)
		}
	}
}

func (s *Service) refuse(w http.ResponseWriter, operation string, ref *refusal) {
	s.count(operation, ref.model, ref.Error)
	contracts.Write(w, ref.Error)
}

// count records a refusal under the model's label. The label is the
// model's name only for a served model (a bounded set); any other name a
// client sends is counted under UnknownModel, so clients cannot grow the
// metrics without bound.
func (s *Service) count(operation, model string, e *contracts.Error) {
	model = s.label(model)
	s.d.Metrics.requests.WithLabelValues(model, operation, strconv.Itoa(e.Status)).Inc()
	s.d.Metrics.errors.WithLabelValues(model, e.Code).Inc()
}

// UnknownModel is the metrics label of requests for a model name that is
// not served.
const UnknownModel = "unknown"

func (s *Service) label(model string) string {
	if model == "" {
		return ""
	}
	if _, ok := s.d.Directory.Served(model); ok {
		return model
	}
	return UnknownModel
}

// Authenticate returns the API key r presents, or nil.
func (s *Service) Authenticate(r *http.Request) *registry.Key { return httpapi.KeyOf(s.d.Directory, r) }

// read authenticates, reads and checks an OpenAI inference request and
// serves it; it returns the refusal to write when it never reached a worker.
func (s *Service) read(w http.ResponseWriter, r *http.Request, endpoint string, start time.Time) *refusal {
	if s.d.Draining() {
		return &refusal{Error: contracts.ErrShuttingDown()}
	}
	key := s.Authenticate(r)
	if key == nil {
		return &refusal{Error: contracts.ErrInvalidAPIKey()}
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 1<<20 {
			bufPool.Put(buf)
		}
	}()
	limit := s.d.MaxBody
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		s.count(endpoint, "", httpapi.BodyError(w, r, err))
		return nil
	}
	body := buf.Bytes()
	p, perr := parseInference(endpoint, body)
	if perr != nil {
		return &refusal{Error: perr}
	}
	return s.generate(w, r, Call{Key: key, Endpoint: endpoint, Request: p, Body: body, Start: start}, openAI{})
}

// Generate admits c (shutdown, model, key, rate limits, budgets) and
// serves it through out. Every answer, refusals included, is written.
func (s *Service) Generate(w http.ResponseWriter, r *http.Request, c Call, out Renderer) {
	if c.Start.IsZero() {
		c.Start = time.Now()
	}
	if c.Operation == "" {
		c.Operation = c.Endpoint
	}
	if ref := s.generate(w, r, c, out); ref != nil {
		s.refuse(w, c.Operation, ref)
	}
}

func (s *Service) generate(w http.ResponseWriter, r *http.Request, c Call, out Renderer) *refusal {
	if c.Operation == "" {
		c.Operation = c.Endpoint
	}
	model := c.Request.Model
	if s.d.Draining() {
		return &refusal{Error: contracts.ErrShuttingDown(), model: model}
	}
	if len(model) > MaxModelName {
		return &refusal{Error: errModelTooLong()}
	}
	admitted := false
	if s.d.Routes != nil {
		// A router's request is judged before its class is picked: a tool
		// class answers without going further down this path.
		if rt, ok := s.d.Routes.Router(model); ok && c.Key.Allows(rt.Name) {
			var ref *refusal
			if c, ref = s.admit(w, r, c); ref != nil {
				return ref
			}
			admitted = true
		}
		handled, ref := s.routeClass(w, r, &c, out)
		if handled || ref != nil {
			return ref
		}
		model = c.Request.Model
	}
	m, ok := s.d.Directory.Served(model)
	if !ok {
		return &refusal{Error: contracts.ErrModelNotFound(model), model: model}
	}
	if c.Router == "" && !s.d.Directory.Permits(c.Key, model) {
		return &refusal{Error: contracts.ErrModelNotAllowed(model), model: model}
	}
	if e := kindMismatch(m, c.Endpoint); e != nil {
		return &refusal{Error: e, model: model}
	}
	if c.Request.MaxTokens > MaxOutputTokens {
		return &refusal{Error: tooManyTokens(orDefault(c.Request.MaxTokensParam, "max_tokens")), model: model}
	}
	// Admission (prompt guard, PII) before any hold or worker call.
	var ref *refusal
	if !admitted {
		if c, ref = s.admit(w, r, c); ref != nil {
			return ref
		}
	}
	var tenant registry.Limits
	if t, ok := s.d.Directory.Tenant(c.Key.Tenant); ok {
		tenant = t.Limits
	}
	release, cerr := s.conc.acquire(c.Key, tenant)
	if cerr != nil {
		return &refusal{Error: cerr, model: model}
	}
	defer release()
	if ref = s.admitRate(r.Context(), w, c.Key, c.Endpoint, c.Request); ref != nil {
		return ref
	}
	if s.lookupCache(w, r, &c, out) {
		return nil
	}
	// The requested model's budget reservation is made here, so that a
	// budget refusal is answered as before any routing; a fallback's is
	// made when it is tried (its own price).
	adm, ref := s.reserve(r.Context(), c.Key, c.Endpoint, c.Request, model, orDefault(c.requestID, newRequestID()))
	if ref != nil {
		return ref
	}
	s.serve(w, r, c, adm, out)
	return nil
}

// withCap is body with max_tokens set to capTokens when that is positive.
func withCap(body []byte, capTokens int64) ([]byte, error) {
	if capTokens <= 0 {
		return body, nil
	}
	return withMaxTokens(body, capTokens)
}

func (s *Service) serve(w http.ResponseWriter, r *http.Request, c Call, adm admitted, out Renderer) {
	key, p, start := c.Key, c.Request, c.Start
	reqID := adm.id
	w.Header().Set("X-Request-Id", reqID)

	ctx := telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.d.Tracer.Start(ctx, "edge "+c.Operation, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", genAIOperation(c.Endpoint)),
			attribute.String("gen_ai.provider.name", "aiforge"),
			attribute.String("gen_ai.system", "aiforge"),
			attribute.String("gen_ai.request.model", p.Model),
			attribute.Bool("gen_ai.request.stream", p.Stream),
			attribute.String("aiforge.operation", c.Operation),
			attribute.String("aiforge.tenant.id", key.Tenant),
			attribute.String("aiforge.key.id", key.ID), // the id, never the key
			attribute.String("aiforge.request_id", reqID),
		))
	if p.MaxTokens > 0 {
		span.SetAttributes(attribute.Int64("gen_ai.request.max_tokens", p.MaxTokens))
	}
	if p.Choices > 1 {
		span.SetAttributes(attribute.Int64("gen_ai.request.choice.count", p.Choices))
	}
	if c.Router != "" {
		span.SetAttributes(attribute.String("aiforge.router", c.Router), attribute.String("aiforge.route_class", c.RouteClass))
	}
	defer span.End()
	span.SetAttributes(c.Attributes...)
	// The prompt and, at the end, the answer, for a tenant that opted in
	// (content.go).
	var content *OutputRecorder
	if t, ok := s.d.Directory.Tenant(key.Tenant); ok && t.TraceContent {
		span.SetAttributes(inputAttributes(c.Endpoint, c.Body)...)
		content = NewOutputRecorder(c.Endpoint)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	untrack := s.track(key.ID, &flight{cancel: cancel})
	defer untrack()
	stopAfter := context.AfterFunc(s.d.Streams, func() { cancel(context.Cause(s.d.Streams)) })
	defer stopAfter()

	hdr := nats.Header{}
	for k, v := range c.Bridge {
		hdr.Set(k, v)
	}
	telemetry.Propagator.Inject(ctx, telemetry.NATSCarrier(hdr))
	routeHeaders(c, hdr)

	m := s.d.Metrics
	inFlight := m.inFlight.WithLabelValues(p.Model)
	inFlight.Inc()
	defer inFlight.Dec()

	var (
		started bool
		buf     *bytes.Buffer
		sink    func([]byte) error
		flush   func() error
		// served is the model of the attempt in progress; log the
		// attempts so far, for the response headers.
		served string
		log    attemptLog
	)
	if p.Stream {
		flush = http.NewResponseController(w).Flush
		var last time.Time
		ttft := m.ttft.WithLabelValues(p.Model)
		itl := m.itl.WithLabelValues(p.Model)
		sink = func(payload []byte) error {
			now := time.Now()
			first := !started
			if first {
				started = true
				ttft.Observe(now.Sub(start).Seconds())
				log.setHeaders(w.Header(), served, http.StatusOK)
			} else {
				itl.Observe(now.Sub(last).Seconds())
			}
			last = now
			return out.Chunk(w, payload, first)
		}
	} else {
		buf = bufPool.Get().(*bytes.Buffer)
		buf.Reset()
		defer bufPool.Put(buf)
		sink = func(part []byte) error {
			buf.Write(part)
			return nil
		}
	}
	if content != nil && p.Stream {
		inner := sink
		sink = func(payload []byte) error {
			content.Chunk(payload)
			return inner(payload)
		}
	}
	sink, assembled := cacheSink(c, sink)
	ch := s.route(ctx, c, adm, hdr, flush, sink, &served, &log)
	res, err := ch.res, ch.err
	if ch.retried {
		m.failovers.WithLabelValues(p.Model).Inc()
	}
	if err == nil && served != p.Model {
		m.fallbacks.WithLabelValues(p.Model, served).Inc()
	}

	status := http.StatusOK
	switch {
	case err == nil && p.Stream:
		out.Done(w)
		_ = http.NewResponseController(w).Flush()
		s.keepAnswer(c, served, http.StatusOK, nil, assembled)
	case err == nil:
		status = res.Status
		if status == 0 {
			status = http.StatusOK
		}
		ct := res.ContentType
		if ct == "" {
			ct = "application/json"
		}
		log.setHeaders(w.Header(), served, status)
		out.Complete(w, status, ct, buf.Bytes())
		s.keepAnswer(c, served, status, buf.Bytes(), nil)
	default:
		apiErr := s.mapError(ctx, err, orDefault(served, p.Model))
		status = apiErr.Status
		span.SetStatus(codes.Error, apiErr.Code)
		m.errors.WithLabelValues(p.Model, apiErr.Code).Inc()
		cause := context.Cause(ctx)
		if r.Context().Err() != nil && !errors.Is(cause, ErrKeyRevoked) && !errors.Is(cause, ErrShuttingDown) {
			status = 499 // client closed the request
		} else {
			if !started {
				log.setHeaders(w.Header(), ch.answeredBy, 0)
			}
			out.Fail(w, apiErr, err, started)
			if started {
				_ = http.NewResponseController(w).Flush()
			}
		}
		var be *bridge.Error
		switch {
		case res.DataFrames == 0 && len(ch.adm.reservations) > 0:
			// Nothing reached the client, so nothing was spent; the
			// worker, if one took it, may not report a failure a retry
			// could have followed. Releasing is idempotent with the
			// settlement of a usage event that does come.
			go s.release(ch.adm.id, ch.adm.reservations)
		case errors.As(err, &be) && be.Code == contracts.CodeWorkerLost && res.DataFrames > 0:
			s.recordLostUsage(c, served, ch.adm.id, res, span, ch.adm.reservations)
		}
	}
	if content != nil {
		switch {
		case p.Stream && (err == nil || started):
			span.SetAttributes(content.Attributes(err != nil)...)
		case !p.Stream && err == nil && status == http.StatusOK:
			content.Body(buf.Bytes())
			span.SetAttributes(content.Attributes(false)...)
		}
	}
	if served != "" {
		span.SetAttributes(attribute.String("gen_ai.response.model", served))
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	m.requests.WithLabelValues(p.Model, c.Operation, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(p.Model, c.Operation).Observe(time.Since(start).Seconds())
}

// openAI renders the OpenAI endpoints: the engine's SSE chunks or body as
// they are.
type openAI struct{}

func (openAI) Chunk(w http.ResponseWriter, payload []byte, first bool) error {
	if first {
		StartSSE(w)
	}
	return contracts.WriteEvent(w, payload)
}

func (openAI) Done(w http.ResponseWriter) { _ = contracts.WriteDone(w) }

func (openAI) Complete(w http.ResponseWriter, status int, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (openAI) Fail(w http.ResponseWriter, apiErr *contracts.Error, err error, started bool) {
	if started {
		_ = contracts.WriteErrorEvent(w, apiErr)
		return
	}
	WriteError(w, apiErr, err)
}

// StartSSE writes the headers of a 200 event stream.
func StartSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}

// WriteError answers with the engine's own OpenAI-shaped error when the
// worker passed one through, else with apiErr.
func WriteError(w http.ResponseWriter, apiErr *contracts.Error, err error) {
	var be *bridge.Error
	if errors.As(err, &be) && len(be.Body) > 0 {
		if _, ok := contracts.ParseError(be.Status, be.Body); ok {
			w.Header().Set("Content-Type", "application/json")
			// The worker's Retry-After (model_warming: the rest of its
			// engine's cold start); a 503 without one gets the default.
			contracts.SetRetryAfter(w.Header(), be.Status, be.RetryAfter)
			w.WriteHeader(be.Status)
			_, _ = w.Write(be.Body)
			return
		}
	}
	contracts.Write(w, apiErr)
}

// Serves reports whether model is a served name.
func (s *Service) Serves(model string) bool {
	_, ok := s.d.Directory.Served(model)
	return ok
}

// genAIOperation is gen_ai.operation.name for an engine endpoint (the
// OpenTelemetry GenAI semantic conventions' values).
func genAIOperation(endpoint string) string {
	switch endpoint {
	case events.EndpointChatCompletions:
		return "chat"
	case events.EndpointCompletions:
		return "text_completion"
	case events.EndpointEmbeddings:
		return "embeddings"
	}
	return endpoint
}
