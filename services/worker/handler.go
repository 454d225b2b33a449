package worker

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/telemetry"
	"github.com/aiforge/aiforge/services/worker/internal/engine"
)

var (
	spanNames   = [engine.NumEndpoints]string{"worker chat.completions", "worker completions", "worker embeddings", "worker rerank"}
	genAIOpName = [engine.NumEndpoints]string{"chat", "text_completion", "embeddings", "rerank"}
)

// handle is the bridge handler: one request, forwarded to the engine.
func (s *Service) handle(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
	ep, ok := engine.ParseEndpoint(req.Endpoint)
	if !ok {
		s.metrics.errorCode(contracts.CodeInvalidRequest)
		_ = w.Fail(&bridge.Error{Status: http.StatusBadRequest, Code: contracts.CodeInvalidRequest,
			Body: contracts.ErrBadRequest("", "", fmt.Sprintf("The endpoint %q is not served by workers.", req.Endpoint)).Body()})
		return
	}
	if req.Family == bridge.FamilyBatch && req.Header.Get(bridge.HdrBatchID) == "" {
		// Its usage could not name its batch (events.UsageRecordedV3):
		// refused before the engine, so nothing is spent or billed.
		s.metrics.errorCode(contracts.CodeInvalidRequest)
		_ = w.Fail(&bridge.Error{Status: http.StatusBadRequest, Code: contracts.CodeInvalidRequest,
			Body: contracts.ErrBadRequest("", "", "A batch line must name its batch ("+bridge.HdrBatchID+").").Body()})
		return
	}
	if s.engine.IsReranker() != (ep == engine.Rerank) {
		// A reranker serves rerank only; rerank is served by rerankers
		// only: refused before the engine, so nothing is spent or billed.
		msg := fmt.Sprintf("The model '%s' is a rerank model: it serves /v1/rerank only.", s.cfg.Model)
		if ep == engine.Rerank {
			msg = fmt.Sprintf("The model '%s' is not a rerank model.", s.cfg.Model)
		}
		s.metrics.errorCode(contracts.CodeInvalidRequest)
		_ = w.Fail(&bridge.Error{Status: http.StatusBadRequest, Code: contracts.CodeInvalidRequest,
			Body: contracts.ErrBadRequest("model", contracts.CodeInvalidRequest, msg).Body()})
		return
	}
	s.begin()
	defer s.end()
	c := engine.Call{Req: req, Endpoint: ep, Started: req.ReceivedAt}
	if c.Started.IsZero() {
		c.Started = time.Now()
	}
	c.Stream = req.Stream && c.Endpoint != engine.Embeddings && c.Endpoint != engine.Rerank

	ctx = telemetry.Propagator.Extract(ctx, telemetry.NATSCarrier(req.Header))
	ctx, span := s.tracer.Start(ctx, spanNames[c.Endpoint], trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("gen_ai.operation.name", genAIOpName[c.Endpoint]),
			attribute.String("gen_ai.provider.name", providerAIForge),
			attribute.String("gen_ai.system", providerAIForge),
			attribute.String("gen_ai.request.model", s.cfg.Model),
			attribute.String("gen_ai.response.model", s.cfg.Model),
			attribute.Bool("gen_ai.request.stream", c.Stream),
			attribute.String("aiforge.request_id", req.ID),
			attribute.String("aiforge.tenant.id", req.Tenant),
			attribute.String("aiforge.key.id", req.KeyID),
			attribute.String("aiforge.worker_id", s.cfg.WorkerID),
			attribute.String("aiforge.request.family", req.Family.String()),
		)
		c.TraceFinish = true
	}

	if be := s.awake(ctx); be != nil {
		// Asleep and not awake in time (model_warming), or its start
		// failed: refused before the engine, so nothing is spent.
		c.Outcome, c.Code, c.Retryable = engine.OutcomeError, be.Code, be.Retryable
		_ = w.Fail(be)
	} else if est, ok := s.admitEngine(&c, w); ok {
		s.forward(ctx, &c, w)
		s.settleEngine(&c, est)
	}
	// The final frame is out: nothing below adds latency for the client.
	s.finish(ctx, &c, w, span)
}

// finish records a request after its final frame: metrics, span, and one
// usage event.
func (s *Service) finish(ctx context.Context, c *engine.Call, w *bridge.ResponseWriter, span trace.Span) {
	now := time.Now()
	lat := now.Sub(c.Started)
	mm := s.metrics
	mm.requests[c.Endpoint][c.Outcome].Inc()
	if c.Code != "" && c.Outcome == engine.OutcomeError {
		mm.errorCode(c.Code)
	}
	if c.Code == contracts.CodeUpstreamAuth {
		select { // check the key now rather than at the next tick
		case s.recheck <- struct{}{}:
		default:
		}
	}
	mm.e2e.Observe(lat.Seconds())

	ev := events.UsageRecordedV1{
		RequestID:  c.Req.ID,
		Tenant:     c.Req.Tenant,
		KeyID:      c.Req.KeyID,
		Model:      s.cfg.Model,
		Endpoint:   c.Endpoint.String(),
		Stream:     c.Stream,
		Status:     c.Outcome.String(),
		LatencyMS:  float64(lat.Microseconds()) / 1000,
		WorkerID:   s.cfg.WorkerID,
		Reporter:   s.cfg.Source,
		StartedAt:  c.Started.UTC(),
		FinishedAt: now.UTC(),
	}
	if c.Outcome != engine.OutcomeOK {
		ev.ErrorCode = c.Code
	}
	if c.Stream && w.Sent() > 0 {
		ev.TTFTMS = float64(c.TTFT.Microseconds()) / 1000
	}
	switch {
	case c.UsageKnown:
		ev.PromptTokens = max(c.Usage.PromptTokens, 0)
		ev.CompletionTokens = max(c.Usage.CompletionTokens, 0)
		if d := c.Usage.PromptTokensDetails; d != nil {
			ev.CachedPromptTokens = min(max(d.CachedTokens, 0), ev.PromptTokens)
		}
	case c.Stream && w.Sent() > 0, c.Outcome == engine.OutcomeOK:
		// The engine never gave its final count (a stream cut before it, an
		// answer without usage): estimate what was streamed and the prompt
		// the engine read, and say so.
		u := c.Estimate()
		ev.PromptTokens, ev.CompletionTokens = u.PromptTokens, u.CompletionTokens
		ev.Estimated = true
	}
	if ev.PromptTokens > 0 {
		mm.prompt.Add(float64(ev.PromptTokens))
	}
	if ev.CompletionTokens > 0 {
		mm.generation.Add(float64(ev.CompletionTokens))
	}

	if span.IsRecording() {
		span.SetAttributes(
			attribute.Int64("gen_ai.usage.input_tokens", ev.PromptTokens),
			attribute.Int64("gen_ai.usage.output_tokens", ev.CompletionTokens),
			attribute.Bool("aiforge.usage.estimated", ev.Estimated),
			attribute.String("aiforge.status", ev.Status),
		)
		if len(c.FinishReasons) > 0 {
			span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", c.FinishReasons))
		}
		if c.Outcome == engine.OutcomeError {
			span.SetAttributes(attribute.String("error.type", c.Code))
			span.SetStatus(codes.Error, c.Code)
		}
	}
	env := events.Envelope{ID: c.Req.ID, Source: s.cfg.Source, Tenant: c.Req.Tenant, TraceParent: telemetry.TraceParent(ctx)}
	span.End()

	if c.Retryable && !c.Req.FinalAttempt() && ev.PromptTokens == 0 && ev.CompletionTokens == 0 {
		// The edge retries this request on another replica under the same
		// request id: an event here would make JetStream drop the retry's
		// (deduplicated by id). Nothing was spent, so nothing is lost; on the
		// final attempt the failure is recorded.
		s.log.Debug("no usage event for a retryable failure", "request_id", c.Req.ID, "code", c.Code)
		return
	}
	v2 := events.UsageRecordedV2{UsageRecordedV1: ev, Reservations: c.Req.Reservations}
	if v5, ok := usageV5(c.Req, v2); ok {
		s.publishUsage(v5, ev, env)
		return
	}
	if v4, ok := usageV4(c.Req, v2); ok {
		s.publishUsage(v4, ev, env)
		return
	}
	if c.Req.Family == bridge.FamilyBatch {
		// A batch line: the same record, marked with its batch so it is
		// priced at the model's batch discount; the request id stays the
		// event id, so a redelivered line is billed once.
		s.publishUsage(events.UsageRecordedV3{UsageRecordedV2: v2, Batch: true, BatchID: c.Req.Header.Get(bridge.HdrBatchID)}, ev, env)
		return
	}
	s.publishUsage(v2, ev, env)
}

// usageV4 is the request's usage as events.UsageRecordedV4 when the edge
// sent an admission verdict or a route class with it (the batch fields as
// V3 would have them); ok is false otherwise, and V2 or V3 is published.
func usageV4(req *bridge.Request, v2 events.UsageRecordedV2) (events.UsageRecordedV4, bool) {
	h := req.Header
	action, router := h.Get(bridge.HdrAdmissionAction), h.Get(bridge.HdrRouter)
	if action == "" && router == "" {
		return events.UsageRecordedV4{}, false
	}
	v4 := events.UsageRecordedV4{UsageRecordedV3: events.UsageRecordedV3{UsageRecordedV2: v2}}
	if req.Family == bridge.FamilyBatch {
		v4.Batch, v4.BatchID = true, h.Get(bridge.HdrBatchID)
	}
	switch action {
	case events.AdmissionAllowed, events.AdmissionFlagged:
		v4.AdmissionAction = action
		v4.AdmissionCategory = h.Get(bridge.HdrAdmissionCategory)
		if f, err := strconv.ParseFloat(h.Get(bridge.HdrAdmissionScore), 64); err == nil && f >= 0 && f <= 1 {
			v4.AdmissionScore = f
		}
	}
	if class := h.Get(bridge.HdrRouteClass); router != "" && class != "" {
		v4.Router, v4.RouteClass = router, class
	}
	if v4.AdmissionAction == "" && v4.Router == "" {
		return events.UsageRecordedV4{}, false // nothing valid to add
	}
	return v4, true
}

// usageV5 is the request's usage as events.UsageRecordedV5 when the edge
// named the stored prompt template (and version) it was made from; the
// admission, route and batch fields as V4 would have them.
func usageV5(req *bridge.Request, v2 events.UsageRecordedV2) (events.UsageRecordedV5, bool) {
	h := req.Header
	id, version := h.Get(bridge.HdrPromptID), h.Get(bridge.HdrPromptVersion)
	if id == "" || version == "" || len(id) > events.MaxPromptRef || len(version) > events.MaxPromptRef {
		return events.UsageRecordedV5{}, false
	}
	v4, ok := usageV4(req, v2)
	if !ok {
		v4 = events.UsageRecordedV4{UsageRecordedV3: events.UsageRecordedV3{UsageRecordedV2: v2}}
		if req.Family == bridge.FamilyBatch {
			v4.Batch, v4.BatchID = true, h.Get(bridge.HdrBatchID)
		}
	}
	return events.UsageRecordedV5{UsageRecordedV4: v4, PromptID: id, PromptVersion: version}, true
}

// publishUsage publishes a usage event (events.UsageRecordedV2, or V3 for
// a batch line), retrying JetStream errors with backoff (at most 1 s apart)
// for up to 30 s: the USAGE stream is without a leader for several seconds
// when its leader's node is lost (deploy/chaos.sh measures 6-11 s), and a
// publish answered "no response from stream" fails at once. The event's
// message id makes a retry of a publish that was stored a duplicate the
// stream drops. It uses its own context so canceled requests are recorded
// too.
func (s *Service) publishUsage(ev events.Event, u events.UsageRecordedV1, env events.Envelope) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, attempts, err := events.PublishRetry(ctx, s.deps.JS, ev, env); err != nil {
		s.log.Error("could not record usage", "request_id", u.RequestID, "tenant", u.Tenant,
			"status", u.Status, "attempts", attempts, "err", err)
	}
}

// providerAIForge is gen_ai.provider.name on the worker's server span (the
// client asked aiforge); providerEngine on its client span to the engine,
// which speaks the OpenAI protocol whatever its make (vLLM, llama-server,
// Ollama ...).
const (
	providerAIForge = "aiforge"
	providerEngine  = "openai_compatible"
)

// forward sends c to the engine under a client span: the engine's own
// span in the trace, named after GenAI semantic conventions
// ("{operation} {model}") with the engine's model name and address. It
// carries no prompt or completion text.
func (s *Service) forward(ctx context.Context, c *engine.Call, w *bridge.ResponseWriter) {
	op := genAIOpName[c.Endpoint]
	ctx, span := s.tracer.Start(ctx, op+" "+s.cfg.Engine.Model, trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if !span.IsRecording() {
		s.engine.Forward(ctx, c, w)
		return
	}
	span.SetAttributes(
		attribute.String("gen_ai.operation.name", op),
		attribute.String("gen_ai.provider.name", providerEngine),
		attribute.String("gen_ai.system", providerEngine),
		attribute.String("gen_ai.request.model", s.cfg.Engine.Model),
		attribute.Bool("gen_ai.request.stream", c.Stream),
	)
	if u, err := url.Parse(s.cfg.Engine.BaseURL); err == nil {
		span.SetAttributes(attribute.String("server.address", u.Hostname()))
		if p, err := strconv.Atoi(u.Port()); err == nil {
			span.SetAttributes(attribute.Int("server.port", p))
		}
	}
	s.engine.Forward(ctx, c, w)
	span.SetAttributes(attribute.String("gen_ai.response.model", s.cfg.Engine.Model))
	if c.UsageKnown {
		span.SetAttributes(
			attribute.Int64("gen_ai.usage.input_tokens", max(c.Usage.PromptTokens, 0)),
			attribute.Int64("gen_ai.usage.output_tokens", max(c.Usage.CompletionTokens, 0)),
		)
	}
	if len(c.FinishReasons) > 0 {
		span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", c.FinishReasons))
	}
	if c.Stream && c.TTFT > 0 {
		span.SetAttributes(attribute.Float64("aiforge.ttft_seconds", c.TTFT.Seconds()))
	}
	if c.Outcome == engine.OutcomeError {
		span.SetAttributes(attribute.String("error.type", c.Code))
		span.SetStatus(codes.Error, c.Code)
	}
}
