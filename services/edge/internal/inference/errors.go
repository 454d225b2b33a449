package inference

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/telemetry"
	"github.com/aiforge/aiforge/pkg/tokens"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

func (s *Service) mapError(ctx context.Context, err error, model string) *contracts.Error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrKeyRevoked):
		return contracts.ErrKeyRevoked()
	case errors.Is(cause, ErrShuttingDown):
		return contracts.ErrShuttingDown()
	}
	if errors.Is(err, bridge.ErrNoWorker) {
		return s.noWorker(model)
	}
	var be *bridge.Error
	if errors.As(err, &be) {
		if len(be.Body) > 0 {
			if e, ok := contracts.ParseError(be.Status, be.Body); ok {
				// A worker's Retry-After (model_warming: the rest of its
				// engine's cold start) becomes the client's.
				e.RetryAfter = be.RetryAfter
				return e
			}
		}
		msg := be.Message
		switch be.Code {
		case contracts.CodeNoWorker:
			return s.noWorker(model)
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
	// What is left is the bus between the edge and the workers failing.
	return httpapi.StoreError(ctx, err, "event bus", "The request failed inside the gateway.")
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// recordLostUsage publishes the usage of what was streamed by model when
// the worker vanished and could not report it. The event id is the usage
// id of the attempt (reqID), so if
// the worker did report after all, JetStream keeps one of the two.
func (s *Service) recordLostUsage(c Call, model, reqID string, res bridge.Result, span trace.Span, rs []events.Reservation) {
	key, p := c.Key, c.Request
	v1 := events.UsageRecordedV1{
		RequestID: reqID, Tenant: key.Tenant, KeyID: key.ID, Model: model, Endpoint: c.Endpoint, Stream: p.Stream,
		PromptTokens:     tokens.EstimatePrompt(c.Endpoint, c.Body), // the engine read the prompt
		CompletionTokens: int64(res.DataFrames), Estimated: true, Status: events.UsageStatusError,
		ErrorCode: contracts.CodeWorkerLost, LatencyMS: float64(time.Since(c.Start).Microseconds()) / 1000,
		WorkerID: res.WorkerID, Reporter: s.d.InstanceID, StartedAt: c.Start.UTC(), FinishedAt: time.Now().UTC(),
	}
	ev := events.UsageRecordedV2{UsageRecordedV1: v1, Reservations: rs}
	env := events.Envelope{ID: reqID, Source: s.d.InstanceID, Tenant: key.Tenant}
	env.TraceParent = telemetry.TraceParent(trace.ContextWithSpanContext(context.Background(), span.SpanContext()))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, attempts, err := events.PublishRetry(ctx, s.d.JS, ev, env); err != nil {
			s.log.Error("could not record usage of a lost stream", "request_id", reqID, "attempts", attempts, "err", err)
		}
	}()
}

// unavailableWhy says, in words fit for a tenant, why the replicas of a
// model do not serve: their states, never their errors (which name
// internal hosts).
var unavailableWhy = map[string]string{
	registry.WorkerStarting:     "its engine is being checked",
	registry.WorkerUnreachable:  "its engine cannot be reached",
	registry.WorkerUnauthorized: "its engine refuses the key aiforge holds for it",
	registry.WorkerMisnamed:     "its engine does not serve the configured upstream model",
	registry.WorkerUnhealthy:    "its engine failed a health check",
	registry.WorkerDraining:     "its workers are stopping",
}

// noWorker is model_unavailable for model, saying why when its replicas
// report states that explain it (operators see the details in
// GET /admin/v1/models/{name}).
func (s *Service) noWorker(model string) *contracts.Error {
	e := contracts.ErrNoWorker(model)
	states := s.d.Directory.Workers(model)
	var why []string
	for _, st := range states {
		if st.Servable() {
			return e // a replica serves: busy, or the state lags
		}
		if w, ok := unavailableWhy[st.State]; ok && !slices.Contains(why, w) {
			why = append(why, w)
		}
	}
	if len(why) > 0 {
		e.Message = fmt.Sprintf("No worker is serving the model '%s' right now: %s. Retry later.", model, strings.Join(why, "; "))
	}
	return e
}
