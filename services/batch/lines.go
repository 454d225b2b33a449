package batch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/aiforge/aiforge/pkg/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
)

// maxAnswerBytes bounds one line's answer.
const maxAnswerBytes = 64 << 20

var errAnswerTooLarge = fmt.Errorf("the answer is larger than %d bytes", maxAnswerBytes)

// prepareLine is the request a line sends: its endpoint at the worker and
// its body, never streamed; a /v1/responses line runs as a chat completion.
func prepareLine(url string, body []byte) (endpoint string, out []byte, err error) {
	switch url {
	case api.EndpointChatCompletions:
		endpoint = events.EndpointChatCompletions
	case api.EndpointCompletions:
		endpoint = events.EndpointCompletions
	case api.EndpointEmbeddings:
		endpoint = events.EndpointEmbeddings
	case api.EndpointResponses:
		chat, _, err := contracts.ResponsesToChat(body)
		return events.EndpointChatCompletions, chat, err
	default:
		return "", nil, fmt.Errorf("endpoint %q is not served in batches", url)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return "", nil, err
	}
	_, s1 := m["stream"]
	_, s2 := m["stream_options"]
	if !s1 && !s2 {
		return endpoint, body, nil
	}
	delete(m, "stream")
	delete(m, "stream_options")
	out, err = json.Marshal(m)
	return endpoint, out, err
}

// retryable reports whether a failure may go away on another attempt.
func retryable(err error) bool {
	if errors.Is(err, bridge.ErrNoWorker) {
		return true
	}
	var be *bridge.Error
	if !errors.As(err, &be) {
		return false
	}
	if be.Retryable {
		return true
	}
	switch be.Code {
	case contracts.CodeOverloaded, contracts.CodeWorkerLost, contracts.CodeNoWorker, contracts.CodeShuttingDown:
		return true
	}
	return false
}

// backoff is the delay before the retry after delivery n.
func (s *Service) backoff(n uint64) time.Duration {
	d := s.cfg.RetryBackoff
	for i := uint64(1); i < n && d < s.cfg.MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, s.cfg.MaxRetryBackoff)
}

// serveLine runs one line on a worker (worker "": the model's queue
// group), publishes its result and acknowledges it, or hands it back for
// a later attempt. It returns the tokens the line spent.
func (s *Service) serveLine(ctx context.Context, r *runner, l *line, worker string) int64 {
	ev := l.ev
	id := events.LineID(ev.BatchID, ev.Index)
	log := r.log.With("line", ev.Index)
	attempt := uint64(1)
	if md, err := l.msg.Metadata(); err == nil {
		attempt = md.NumDelivered
	}
	final := attempt >= uint64(s.cfg.LineAttempts)
	res := &events.BatchResultV1{BatchID: ev.BatchID, Tenant: ev.Tenant, Index: ev.Index, CustomID: ev.CustomID, RequestID: id}

	// One span per attempt, the parent of the worker's: a trace per line
	// (or, when the line carries one, the trace it was queued in).
	ctx = telemetry.Propagator.Extract(ctx, telemetry.NATSCarrier(l.msg.Headers()))
	ctx, span := s.tracer.Start(ctx, "batch line", trace.WithSpanKind(trace.SpanKindClient))
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("http.response.status_code", res.StatusCode))
			if res.ErrorCode != "" {
				span.SetStatus(codes.Error, res.ErrorCode)
				span.SetAttributes(attribute.String("error.type", res.ErrorCode))
			} else if res.StatusCode >= 400 {
				span.SetStatus(codes.Error, strconv.Itoa(res.StatusCode))
			}
		}
		span.End()
	}()
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("aiforge.batch.id", ev.BatchID), attribute.Int64("aiforge.batch.line", ev.Index),
			attribute.Int64("aiforge.batch.attempt", int64(attempt)),
			attribute.String("gen_ai.request.model", ev.Model), attribute.String("aiforge.request_id", id),
			attribute.String("aiforge.tenant.id", ev.Tenant), attribute.String("aiforge.key.id", ev.KeyID),
		)
	}

	endpoint, body, err := prepareLine(ev.URL, ev.Body)
	if err != nil {
		// Validated already: only a line stored by something else.
		res.StatusCode = http.StatusBadRequest
		res.Body = contracts.ErrBadRequest("body", contracts.CodeInvalidRequest, "The request line cannot be run: "+err.Error()).Body()
	} else {
		s.m.dispatched.WithLabelValues(ev.Model).Inc()
		start := time.Now()
		req := &bridge.OutRequest{Model: ev.Model, ID: id, Tenant: ev.Tenant, KeyID: ev.KeyID, Endpoint: endpoint, Body: body,
			Header: nats.Header{bridge.HdrBatchID: []string{ev.BatchID}}, Worker: worker}
		var answer bytes.Buffer
		out, err := s.client.Once(ctx, req, final, func(p []byte) error {
			if answer.Len()+len(p) > maxAnswerBytes {
				return errAnswerTooLarge
			}
			answer.Write(p)
			return nil
		})
		s.m.duration.WithLabelValues(ev.Model).Observe(time.Since(start).Seconds())
		switch {
		case ctx.Err() != nil:
			// The service stops: another replica (or this one, restarted)
			// runs it again under the same id.
			_ = l.msg.Nak()
			return 0
		case err == nil:
			res.StatusCode = out.Status
			res.Body = answer.Bytes()
			if res.StatusCode == 0 {
				res.StatusCode = http.StatusOK
			}
		case retryable(err) && !final:
			s.m.retried.WithLabelValues(ev.Model).Inc()
			delay := s.backoff(attempt)
			log.Info("batch: line failed retryably; retrying later", "attempt", attempt, "err", err, "in", delay)
			_ = l.msg.NakWithDelay(delay)
			return 0
		default:
			var be *bridge.Error
			switch {
			case retryable(err):
				res.ErrorCode = api.CodeLineFailed
				res.ErrorMessage = fmt.Sprintf("The request failed after %d attempts: %s", attempt, errMessage(err))
			case errors.As(err, &be):
				res.StatusCode = be.Status
				if len(be.Body) > 0 && json.Valid(be.Body) {
					res.Body = be.Body
				} else {
					res.Body = (&contracts.Error{Status: be.Status, Type: errType(be.Status), Code: be.Code, Message: be.Message}).Body()
				}
			default:
				res.ErrorCode = api.CodeLineFailed
				res.ErrorMessage = "The request failed: " + err.Error()
			}
		}
	}
	if res.Succeeded() {
		res.Tokens = usageTokens(res.Body)
		if ev.URL == api.EndpointResponses {
			if b, err := contracts.ChatToResponse("resp_"+digest(id), time.Now().Unix(), ev.Model, res.Body); err == nil {
				res.Body = b
			}
		}
	}
	if len(res.Body) > 0 && !json.Valid(res.Body) {
		res.Body, _ = json.Marshal(string(res.Body))
	}
	res.FinishedAt = time.Now().UTC()
	if err := s.spill(ctx, res); err != nil {
		log.Warn("batch: store a large answer; retrying the line", "err", err)
		_ = l.msg.NakWithDelay(s.backoff(attempt))
		return res.Tokens
	}
	if _, err := events.Publish(ctx, s.deps.JS, res, events.Envelope{ID: resultMsgID(ev.BatchID, ev.Index), Source: s.cfg.Source, Tenant: ev.Tenant}); err != nil {
		log.Warn("batch: publish a line's result; retrying the line", "err", err)
		_ = l.msg.NakWithDelay(s.backoff(attempt))
		return res.Tokens
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := l.msg.DoubleAck(actx); err != nil {
		log.Debug("batch: ack a line (its result is stored; a redelivery is acknowledged then)", "err", err)
	}
	cancel()
	if r.markDone(res) {
		if res.Succeeded() {
			s.m.completed.WithLabelValues(ev.Model).Inc()
		} else {
			s.m.failed.WithLabelValues(ev.Model).Inc()
		}
	}
	return res.Tokens
}

// spill moves a body too large for one bus message to the object store.
func (s *Service) spill(ctx context.Context, res *events.BatchResultV1) error {
	limit := s.cfg.InlineBodyLimit
	if limit == 0 {
		limit = s.deps.NC.MaxPayload() - 64<<10
	}
	if int64(len(res.Body)) <= limit {
		return nil
	}
	key := bodyPrefix(res.Tenant, res.BatchID) + strconv.FormatInt(res.Index, 10)
	if _, err := s.deps.Objects.Put(ctx, key, bytes.NewReader(res.Body), int64(len(res.Body)), "application/json"); err != nil {
		return err
	}
	res.BodyObject, res.Body = key, nil
	return nil
}

func errMessage(err error) string {
	var be *bridge.Error
	if errors.As(err, &be) {
		if e, ok := contracts.ParseError(be.Status, be.Body); ok {
			return e.Message
		}
		if be.Message != "" {
			return be.Message
		}
		return be.Code
	}
	return err.Error()
}

func errType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return contracts.TypeRateLimit
	case status >= 500:
		return contracts.TypeServer
	}
	return contracts.TypeInvalidRequest
}

// usageTokens reads the tokens an answer spent from its usage.
func usageTokens(body []byte) int64 {
	var a struct {
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			TotalTokens      int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &a) != nil || a.Usage == nil {
		return 0
	}
	if a.Usage.TotalTokens > 0 {
		return a.Usage.TotalTokens
	}
	return a.Usage.PromptTokens + a.Usage.CompletionTokens
}

// digest is a short stable id derived from s.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:12])
}
