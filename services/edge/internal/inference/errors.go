package inference

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/telemetry"
	"github.com/aiforge/aiforge/pkg/tokens"
)

func (s *Service) mapError(ctx context.Context, err error, model string) *contracts.Error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrKeyRevoked):
		return contracts.ErrKeyRevoked()
	case errors.Is(cause, ErrShuttingDown):
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
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for attempt := 0; attempt < 5; attempt++ {
			if _, err := events.Publish(ctx, s.d.JS, ev, env); err == nil {
				return
			} else if attempt == 4 {
				s.log.Error("could not record usage of a lost stream", "request_id", reqID, "err", err)
			}
			time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
		}
	}()
}
