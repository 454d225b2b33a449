package edge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/telemetry"
)

func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{}))

	mux.HandleFunc("POST /v1/chat/completions", s.inference(events.EndpointChatCompletions))
	mux.HandleFunc("POST /v1/completions", s.inference(events.EndpointCompletions))
	mux.HandleFunc("POST /v1/embeddings", s.inference(events.EndpointEmbeddings))
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("GET /v1/models/{id...}", s.getModel)

	s.adminRoutes(mux)
	s.reportRoutes(mux)
	s.fileRoutes(mux)
	s.vectorStoreRoutes(mux)

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // sets the path values
			return
		}
		{
			// Unknown paths and wrong methods answer in OpenAI's shape too.
			rec := &statusProbe{}
			h.ServeHTTP(rec, r)
			if rec.status == http.StatusMethodNotAllowed {
				contracts.Write(w, contracts.ErrMethodNotAllowed(r.Method))
				return
			}
			contracts.Write(w, contracts.ErrNotFound(fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path)))
		}
	})
}

// statusProbe captures the status the mux would answer for an unmatched
// request, without writing anything.
type statusProbe struct {
	status int
	h      http.Header
}

func (p *statusProbe) Header() http.Header {
	if p.h == nil {
		p.h = http.Header{}
	}
	return p.h
}
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.status = code }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		contracts.Write(w, contracts.ErrInternal("could not encode the response"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// authenticate returns the key of the request or writes a 401.
func (s *Service) authenticate(w http.ResponseWriter, r *http.Request) *registry.Key {
	if k := s.authenticateKey(r); k != nil {
		return k
	}
	contracts.Write(w, contracts.ErrInvalidAPIKey())
	return nil
}

// authenticateKey returns the key presented by r, or nil.
func (s *Service) authenticateKey(r *http.Request) *registry.Key {
	secret, ok := bearer(r)
	if !ok {
		return nil
	}
	id, ok := registry.KeyIDOf(secret)
	if !ok {
		return nil
	}
	if k := s.lookupKey(id); k != nil && k.Verify(secret) {
		return k
	}
	return nil
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	return strings.TrimSpace(h[7:]), true
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Parent is the base model of a LoRA adapter (as vLLM lists them).
	Parent string `json:"parent,omitempty"`
	// Catalog and Version name the catalog version served: an adapter's
	// newest published version, or a model's deployment.
	Catalog string `json:"aiforge_catalog,omitempty"`
	Version int    `json:"aiforge_version,omitempty"`
}

func toModelObject(m registry.Model) modelObject {
	owner := m.OwnedBy
	if owner == "" {
		owner = "aiforge"
	}
	return modelObject{ID: m.Name, Object: "model", Created: m.CreatedAt.Unix(), OwnedBy: owner}
}

func (s *Service) listModels(w http.ResponseWriter, r *http.Request) {
	k := s.authenticate(w, r)
	if k == nil {
		return
	}
	s.modelsMu.RLock()
	served := make([]registry.Model, 0, len(s.models))
	for _, m := range s.models {
		if k.Allows(m.Name) {
			served = append(served, m)
		}
	}
	s.modelsMu.RUnlock()
	for _, a := range s.cv.adapterList() {
		if !k.Allows(a.name) {
			continue
		}
		if m, ok := s.lookupModel(a.name); ok && m.Name == a.name {
			served = append(served, m)
		}
	}
	data := make([]modelObject, 0, len(served))
	seen := make(map[string]bool, len(served))
	for _, m := range served {
		if !seen[m.Name] { // a registered model shadows an adapter's name
			seen[m.Name] = true
			data = append(data, s.modelObjectOf(m))
		}
	}
	sortModels(data)
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func sortModels(d []modelObject) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j].ID < d[j-1].ID; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

func (s *Service) getModel(w http.ResponseWriter, r *http.Request) {
	k := s.authenticate(w, r)
	if k == nil {
		return
	}
	id := r.PathValue("id")
	m, ok := s.lookupModel(id)
	if !ok {
		contracts.Write(w, contracts.ErrModelNotFound(id))
		return
	}
	if !k.Allows(id) {
		contracts.Write(w, contracts.ErrModelNotAllowed(id))
		return
	}
	writeJSON(w, http.StatusOK, s.modelObjectOf(m))
}

// inferFields are the request fields the edge reads; the body itself goes
// to the engine unchanged, so tools, response_format and unknown fields pass
// through.
type inferFields struct {
	Model         json.RawMessage `json:"model"`
	Stream        json.RawMessage `json:"stream"`
	StreamOptions json.RawMessage `json:"stream_options"`
	Messages      json.RawMessage `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	Input         json.RawMessage `json:"input"`
	MaxTokens     json.RawMessage `json:"max_tokens"`
	MaxCompletion json.RawMessage `json:"max_completion_tokens"`
}

type parsed struct {
	model        string
	stream       bool
	includeUsage bool
	// maxTokens is the requested output bound (0 when unset).
	maxTokens int64
	// inputBytes is the size of the prompt field: an upper bound of its
	// tokens, used to reserve budget and count tokens per minute.
	inputBytes int64
}

func isNull(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }

func parseInference(endpoint string, body []byte) (parsed, *contracts.Error) {
	var p parsed
	var f inferFields
	if err := json.Unmarshal(body, &f); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return p, contracts.ErrBadRequest("", contracts.CodeInvalidType, "The request body must be a JSON object.")
			}
			return p, contracts.ErrBadRequest(te.Field, contracts.CodeInvalidType, fmt.Sprintf("Invalid type for '%s': expected %s.", te.Field, te.Type))
		}
		return p, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not valid JSON: "+trimJSONErr(err))
	}
	if isNull(f.Model) {
		return p, contracts.ErrBadRequest("model", contracts.CodeMissingParam, "Missing required parameter: 'model'.")
	}
	if err := json.Unmarshal(f.Model, &p.model); err != nil || p.model == "" {
		return p, contracts.ErrBadRequest("model", contracts.CodeInvalidType, "Invalid 'model': expected a non-empty string.")
	}
	if !isNull(f.Stream) {
		if err := json.Unmarshal(f.Stream, &p.stream); err != nil {
			return p, contracts.ErrBadRequest("stream", contracts.CodeInvalidType, "Invalid 'stream': expected a boolean.")
		}
	}
	if !isNull(f.StreamOptions) {
		var so struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if err := json.Unmarshal(f.StreamOptions, &so); err != nil {
			return p, contracts.ErrBadRequest("stream_options", contracts.CodeInvalidType, "Invalid 'stream_options': expected an object with a boolean 'include_usage'.")
		}
		if !p.stream {
			return p, contracts.ErrBadRequest("stream_options", contracts.CodeInvalidRequest, "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
		}
		p.includeUsage = so.IncludeUsage != nil && *so.IncludeUsage
	}
	for _, mt := range []struct {
		name string
		raw  json.RawMessage
	}{{"max_tokens", f.MaxTokens}, {"max_completion_tokens", f.MaxCompletion}} {
		if isNull(mt.raw) {
			continue
		}
		var n int64
		if err := json.Unmarshal(mt.raw, &n); err != nil || n < 0 {
			return p, contracts.ErrBadRequest(mt.name, contracts.CodeInvalidType, fmt.Sprintf("Invalid '%s': expected a non-negative integer.", mt.name))
		}
		p.maxTokens = max(p.maxTokens, n)
	}
	p.inputBytes = int64(len(f.Messages) + len(f.Prompt) + len(f.Input))
	switch endpoint {
	case events.EndpointChatCompletions:
		if isNull(f.Messages) {
			return p, contracts.ErrBadRequest("messages", contracts.CodeMissingParam, "Missing required parameter: 'messages'.")
		}
		if f.Messages[0] != '[' {
			return p, contracts.ErrBadRequest("messages", contracts.CodeInvalidType, "Invalid 'messages': expected an array.")
		}
		if bytes.Equal(bytes.TrimSpace(f.Messages[1:]), []byte("]")) {
			return p, contracts.ErrBadRequest("messages", contracts.CodeInvalidRequest, "Invalid 'messages': empty array. Expected an array with minimum length 1.")
		}
	case events.EndpointCompletions:
		if isNull(f.Prompt) {
			return p, contracts.ErrBadRequest("prompt", contracts.CodeMissingParam, "Missing required parameter: 'prompt'.")
		}
	case events.EndpointEmbeddings:
		if isNull(f.Input) {
			return p, contracts.ErrBadRequest("input", contracts.CodeMissingParam, "Missing required parameter: 'input'.")
		}
		if p.stream {
			return p, contracts.ErrBadRequest("stream", contracts.CodeInvalidRequest, "Embeddings cannot be streamed.")
		}
	}
	return p, nil
}

func trimJSONErr(err error) string {
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (s *Service) inference(endpoint string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if apiErr := s.admit(w, r, endpoint, start); apiErr != nil {
			s.metrics.requests.WithLabelValues(apiErr.model, endpoint, strconv.Itoa(apiErr.Status)).Inc()
			s.metrics.errors.WithLabelValues(apiErr.model, apiErr.Code).Inc()
			contracts.Write(w, apiErr.Error)
		}
	}
}

// refusal is an answer given before a request reaches a worker.
type refusal struct {
	*contracts.Error
	model string
}

// admit authenticates, reads and checks a request and serves it; it returns
// the refusal to write when the request never reached a worker.
func (s *Service) admit(w http.ResponseWriter, r *http.Request, endpoint string, start time.Time) *refusal {
	if s.draining.Load() {
		return &refusal{Error: contracts.ErrShuttingDown()}
	}
	key := s.authenticateKey(r)
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
	limit := s.maxBody()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &refusal{Error: contracts.ErrBodyTooLarge(limit)}
		}
		return &refusal{Error: contracts.ErrBadRequest("", contracts.CodeInvalidRequest, "Could not read the request body.")}
	}
	body := buf.Bytes()
	p, perr := parseInference(endpoint, body)
	if perr != nil {
		return &refusal{Error: perr}
	}
	if _, ok := s.lookupModel(p.model); !ok {
		return &refusal{Error: contracts.ErrModelNotFound(p.model), model: p.model}
	}
	if !key.Allows(p.model) {
		return &refusal{Error: contracts.ErrModelNotAllowed(p.model), model: p.model}
	}
	adm, ref := s.admitSpend(r.Context(), w, key, endpoint, p)
	if ref != nil {
		return ref
	}
	s.serveInference(w, r, key, endpoint, p, body, start, adm)
	return nil
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

func (s *Service) serveInference(w http.ResponseWriter, r *http.Request, key *registry.Key, endpoint string, p parsed, body []byte, start time.Time, adm admitted) {
	reqID := newRequestID()
	w.Header().Set("X-Request-Id", reqID)

	ctx := telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, "edge "+endpoint, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", endpoint),
			attribute.String("gen_ai.request.model", p.model),
			attribute.String("aiforge.tenant", key.Tenant),
			attribute.String("aiforge.request_id", reqID),
		))
	defer span.End()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	untrack := s.track(key.ID, &flight{cancel: cancel})
	defer untrack()
	stopAfter := context.AfterFunc(s.streamCtx, func() { cancel(context.Cause(s.streamCtx)) })
	defer stopAfter()

	hdr := nats.Header{}
	telemetry.Propagator.Inject(ctx, telemetry.NATSCarrier(hdr))
	req := &bridge.OutRequest{
		Model: p.model, ID: reqID, Tenant: key.Tenant, KeyID: key.ID, Endpoint: endpoint,
		Stream: p.stream, IncludeUsage: p.includeUsage, Body: body, Header: hdr,
		Reservations: adm.reservations,
	}

	inFlight := s.metrics.inFlight.WithLabelValues(p.model)
	inFlight.Inc()
	defer inFlight.Dec()

	var (
		res     bridge.Result
		err     error
		started bool
		out     *bytes.Buffer
	)
	if p.stream {
		rc := http.NewResponseController(w)
		req.Flush = rc.Flush
		var last time.Time
		ttft := s.metrics.ttft.WithLabelValues(p.model)
		itl := s.metrics.itl.WithLabelValues(p.model)
		res, err = s.client.Do(ctx, req, func(payload []byte) error {
			now := time.Now()
			if !started {
				started = true
				h := w.Header()
				h.Set("Content-Type", "text/event-stream")
				h.Set("Cache-Control", "no-cache")
				h.Set("Connection", "keep-alive")
				h.Set("X-Accel-Buffering", "no")
				w.WriteHeader(http.StatusOK)
				ttft.Observe(now.Sub(start).Seconds())
			} else {
				itl.Observe(now.Sub(last).Seconds())
			}
			last = now
			return contracts.WriteEvent(w, payload)
		})
	} else {
		out = bufPool.Get().(*bytes.Buffer)
		out.Reset()
		defer bufPool.Put(out)
		res, err = s.client.Do(ctx, req, func(part []byte) error {
			out.Write(part)
			return nil
		})
	}
	if res.Retried {
		s.metrics.failovers.WithLabelValues(p.model).Inc()
	}

	status := http.StatusOK
	switch {
	case err == nil && p.stream:
		_ = contracts.WriteDone(w)
		_ = http.NewResponseController(w).Flush()
	case err == nil:
		status = res.Status
		if status == 0 {
			status = http.StatusOK
		}
		ct := res.ContentType
		if ct == "" {
			ct = "application/json"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
		w.WriteHeader(status)
		_, _ = w.Write(out.Bytes())
	default:
		apiErr := s.mapError(ctx, err, p.model)
		status = apiErr.Status
		span.SetStatus(codes.Error, apiErr.Code)
		s.metrics.errors.WithLabelValues(p.model, apiErr.Code).Inc()
		cause := context.Cause(ctx)
		if r.Context().Err() != nil && !errors.Is(cause, errKeyRevoked) && !errors.Is(cause, errShuttingDown) {
			status = 499 // client closed the request
		} else if started {
			_ = contracts.WriteErrorEvent(w, apiErr)
			_ = http.NewResponseController(w).Flush()
		} else {
			writeAPIError(w, apiErr, err)
		}
		var be *bridge.Error
		switch {
		case errors.Is(err, bridge.ErrNoWorker) && len(adm.reservations) > 0:
			go s.release(adm.reservations)
		case errors.As(err, &be) && be.Code == contracts.CodeWorkerLost && res.DataFrames > 0:
			s.recordLostUsage(key, endpoint, p, reqID, res, start, span, adm.reservations)
		}
	}
	s.metrics.requests.WithLabelValues(p.model, endpoint, strconv.Itoa(status)).Inc()
	s.metrics.duration.WithLabelValues(p.model, endpoint).Observe(time.Since(start).Seconds())
}

// writeAPIError answers with the engine's own OpenAI-shaped error when the
// worker passed one through, else with the catalog error.
func writeAPIError(w http.ResponseWriter, apiErr *contracts.Error, err error) {
	var be *bridge.Error
	if errors.As(err, &be) && len(be.Body) > 0 {
		if _, ok := contracts.ParseError(be.Status, be.Body); ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(be.Status)
			_, _ = w.Write(be.Body)
			return
		}
	}
	contracts.Write(w, apiErr)
}

func (s *Service) mapError(ctx context.Context, err error, model string) *contracts.Error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errKeyRevoked):
		return contracts.ErrKeyRevoked()
	case errors.Is(cause, errShuttingDown):
		return contracts.ErrShuttingDown()
	}
	if errors.Is(err, bridge.ErrNoWorker) {
		return contracts.ErrNoWorker(model)
	}
	var be *bridge.Error
	if errors.As(err, &be) {
		if len(be.Body) > 0 {
			if e, ok := contracts.ParseError(be.Status, be.Body); ok {
				return e
			}
		}
		msg := be.Message
		switch be.Code {
		case contracts.CodeNoWorker:
			return contracts.ErrNoWorker(model)
		case contracts.CodeWorkerLost:
			return contracts.ErrWorkerLost()
		case contracts.CodeEngineTimeout:
			return contracts.ErrEngineTimeout(orDefault(msg, "The engine did not answer in time."))
		case "overloaded":
			return contracts.ErrOverloaded(model)
		}
		if be.Status >= 400 && be.Status < 500 {
			return &contracts.Error{Status: be.Status, Type: contracts.TypeInvalidRequest, Code: orDefault(be.Code, contracts.CodeInvalidRequest), Message: orDefault(msg, "The engine rejected the request.")}
		}
		return contracts.ErrEngine(orDefault(msg, "The engine failed to answer."))
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return contracts.ErrEngineTimeout("The request was canceled before the engine answered.")
	}
	return contracts.ErrInternal("The request failed inside the gateway.")
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// recordLostUsage publishes the usage of what was streamed when the worker
// vanished and could not report it. The event id is the request id, so if
// the worker did report after all, JetStream keeps one of the two.
func (s *Service) recordLostUsage(key *registry.Key, endpoint string, p parsed, reqID string, res bridge.Result, start time.Time, span trace.Span, rs []events.Reservation) {
	v1 := events.UsageRecordedV1{
		RequestID: reqID, Tenant: key.Tenant, KeyID: key.ID, Model: p.model, Endpoint: endpoint, Stream: p.stream,
		CompletionTokens: int64(res.DataFrames), Estimated: true, Status: events.UsageStatusError,
		ErrorCode: contracts.CodeWorkerLost, LatencyMS: float64(time.Since(start).Microseconds()) / 1000,
		WorkerID: res.WorkerID, Reporter: s.cfg.InstanceID, StartedAt: start.UTC(), FinishedAt: time.Now().UTC(),
	}
	ev := events.UsageRecordedV2{UsageRecordedV1: v1, Reservations: rs}
	env := events.Envelope{ID: reqID, Source: s.cfg.InstanceID, Tenant: key.Tenant}
	env.TraceParent = telemetry.TraceParent(trace.ContextWithSpanContext(context.Background(), span.SpanContext()))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for attempt := 0; attempt < 5; attempt++ {
			if _, err := events.Publish(ctx, s.deps.JS, ev, env); err == nil {
				return
			} else if attempt == 4 {
				s.log.Error("could not record usage of a lost stream", "request_id", reqID, "err", err)
			}
			time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
		}
	}()
}
