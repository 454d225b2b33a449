package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/telemetry"
)

// Endpoint indexes into endpointNames.
const (
	epChat = iota
	epCompletions
	epEmbeddings
)

func endpointIndex(ep string) int {
	for i, n := range endpointNames {
		if n == ep {
			return i
		}
	}
	return -1
}

var (
	spanNames   = [...]string{"worker chat.completions", "worker completions", "worker embeddings"}
	genAIOpName = [...]string{"chat", "text_completion", "embeddings"}

	hdrJSON = []string{"application/json"}
	hdrSSE  = []string{"text/event-stream"}

	rawTrue  = json.RawMessage("true")
	rawFalse = json.RawMessage("false")
	rawFloat = json.RawMessage(`"float"`)
)

// Error codes of the worker beyond the contracts catalog.
const (
	codeCanceled      = "canceled"
	codeClientStalled = "client_stalled"
)

// errRequestTimeout is the cause of a request that ran past RequestTimeout.
var errRequestTimeout = errors.New("worker: engine request timed out")

// Bounds on what is read from an engine.
const (
	maxResponseBytes = 256 << 20
	maxErrorBytes    = 64 << 10
)

// call is the state of one request.
type call struct {
	req     *bridge.Request
	ep      int
	stream  bool
	started time.Time

	outcome   int
	code      string
	retryable bool // the failure was marked retryable before any data

	usage      usageJSON
	usageKnown bool
	chunks     int64 // forwarded chunks carrying content (the estimate)
	ttft       time.Duration
}

// usageJSON is an OpenAI usage object.
type usageJSON struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (c *call) setUsage(u *usageJSON) {
	if u == nil {
		return
	}
	c.usage = *u
	c.usageKnown = true
}

// handle is the bridge handler: one request, forwarded to the engine.
func (s *Service) handle(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
	c := call{req: req, ep: endpointIndex(req.Endpoint), started: req.ReceivedAt}
	if c.started.IsZero() {
		c.started = time.Now()
	}
	if c.ep < 0 {
		s.metrics.errorCode(contracts.CodeInvalidRequest)
		_ = w.Fail(&bridge.Error{Status: http.StatusBadRequest, Code: contracts.CodeInvalidRequest,
			Body: contracts.ErrBadRequest("", "", fmt.Sprintf("The endpoint %q is not served by workers.", req.Endpoint)).Body()})
		return
	}
	c.stream = req.Stream && c.ep != epEmbeddings

	ctx = telemetry.Propagator.Extract(ctx, telemetry.NATSCarrier(req.Header))
	ctx, span := s.tracer.Start(ctx, spanNames[c.ep], trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("gen_ai.operation.name", genAIOpName[c.ep]),
			attribute.String("gen_ai.request.model", s.cfg.Model),
			attribute.String("gen_ai.response.model", s.cfg.Engine.Model),
			attribute.Bool("gen_ai.request.stream", c.stream),
			attribute.String("aiforge.request_id", req.ID),
			attribute.String("aiforge.tenant", req.Tenant),
			attribute.String("aiforge.worker_id", s.cfg.WorkerID),
		)
	}

	s.forward(ctx, &c, w)
	// The final frame is out: nothing below adds latency for the client.
	s.finish(ctx, &c, w, span)
}

// fail sends an error frame and records the outcome.
func (c *call) fail(w *bridge.ResponseWriter, e *bridge.Error) {
	c.outcome = outcomeError
	c.code = e.Code
	c.retryable = e.Retryable && w.Sent() == 0
	_ = w.Fail(e)
}

// engineFailure is the answer to an engine that failed: retryable on another
// replica while nothing reached the client.
func (c *call) engineFailure(w *bridge.ResponseWriter, msg string) {
	c.fail(w, &bridge.Error{Status: http.StatusBadGateway, Code: contracts.CodeEngineError, Message: msg,
		Body: contracts.ErrEngine(msg).Body(), Retryable: w.Sent() == 0})
}

// interrupted handles a request whose context ended: the request timeout
// (504), an edge cancel, or a shutdown past its drain timeout. It reports
// false when ctx is still live.
func (c *call) interrupted(ctx context.Context, w *bridge.ResponseWriter) bool {
	if ctx.Err() == nil {
		return false
	}
	if context.Cause(ctx) == errRequestTimeout {
		msg := "The engine did not finish the request in time."
		c.fail(w, &bridge.Error{Status: http.StatusGatewayTimeout, Code: contracts.CodeEngineTimeout, Message: msg,
			Body: contracts.ErrEngineTimeout(msg).Body()})
		return true
	}
	c.outcome = outcomeCanceled
	c.code = codeCanceled
	if w.Canceled() {
		_ = w.Fail(&bridge.Error{Status: 499, Code: codeCanceled, Message: "request canceled by the client"})
		return true
	}
	// Shutdown: let the edge try another replica if nothing was sent.
	e := contracts.ErrShuttingDown()
	c.retryable = w.Sent() == 0
	_ = w.Fail(&bridge.Error{Status: e.Status, Code: e.Code, Message: e.Message, Body: e.Body(), Retryable: true})
	return true
}

// sendFailed handles an error from w.Data or w.Body.
func (c *call) sendFailed(ctx context.Context, w *bridge.ResponseWriter, err error) {
	if c.interrupted(ctx, w) {
		return
	}
	code := contracts.CodeInternal
	if errors.Is(err, bridge.ErrCreditTimeout) {
		code = codeClientStalled
	}
	c.fail(w, &bridge.Error{Status: http.StatusBadGateway, Code: code, Message: "worker could not send the response: " + err.Error()})
}

// forward sends the request to the engine and relays its answer; it always
// sends the final frame.
func (s *Service) forward(ctx context.Context, c *call, w *bridge.ResponseWriter) {
	body, b64, err := s.rewriteRequest(c.req, c.ep, c.stream)
	if err != nil {
		e := contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not a JSON object: "+err.Error())
		c.fail(w, &bridge.Error{Status: e.Status, Code: e.Code, Message: e.Message, Body: e.Body()})
		return
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.RequestTimeout, errRequestTimeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.urls[c.ep], bytes.NewReader(body))
	if err != nil {
		c.fail(w, &bridge.Error{Status: http.StatusInternalServerError, Code: contracts.CodeInternal, Message: "worker: build engine request"})
		return
	}
	h := hreq.Header
	h["Content-Type"] = hdrJSON
	if c.stream {
		h["Accept"] = hdrSSE
	} else {
		h["Accept"] = hdrJSON
	}
	if s.authHeader != "" {
		h["Authorization"] = []string{s.authHeader}
	}
	telemetry.Propagator.Inject(ctx, propagation.HeaderCarrier(h))

	resp, err := s.client.Do(hreq)
	if err != nil {
		if c.interrupted(ctx, w) {
			return
		}
		c.engineFailure(w, "The engine could not be reached: "+unwrapURLError(err).Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.engineStatus(ctx, c, w, resp)
		return
	}
	if c.stream {
		s.relayStream(ctx, c, w, resp.Body)
		return
	}
	s.relayWhole(ctx, c, w, resp, b64)
}

// engineStatus answers an engine's non-200 answer.
func (s *Service) engineStatus(ctx context.Context, c *call, w *bridge.ResponseWriter, resp *http.Response) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	if err != nil && c.interrupted(ctx, w) {
		return
	}
	apiErr, shaped := contracts.ParseError(resp.StatusCode, body)
	st := resp.StatusCode
	switch {
	case st == http.StatusTooManyRequests:
		e := contracts.ErrOverloaded(s.cfg.Model)
		if shaped {
			e.Message = apiErr.Message
		}
		c.fail(w, &bridge.Error{Status: st, Code: contracts.CodeOverloaded, Message: e.Message, Body: e.Body(), Retryable: true})
	case st == http.StatusUnauthorized || st == http.StatusForbidden || st == http.StatusNotFound:
		// The client's request is fine: this replica's binding is not.
		c.engineFailure(w, fmt.Sprintf("The engine refused the worker's request (status %d); check the model binding.", st))
	case st >= 400 && st < 500:
		if !shaped {
			msg := "The engine rejected the request: " + truncate(string(bytes.TrimSpace(body)), 512)
			apiErr = &contracts.Error{Status: st, Type: contracts.TypeInvalidRequest, Code: contracts.CodeInvalidRequest, Message: msg}
			body = apiErr.Body()
		}
		code := apiErr.Code
		if _, numeric := strconv.Atoi(code); code == "" || numeric == nil {
			code = contracts.CodeInvalidRequest // vLLM puts the HTTP status there
		}
		c.fail(w, &bridge.Error{Status: st, Code: code, Message: apiErr.Message, Body: body})
	default:
		msg := fmt.Sprintf("The engine failed (status %d)", st)
		if shaped {
			msg += ": " + truncate(apiErr.Message, 512)
		}
		c.engineFailure(w, msg)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// relayWhole reads a non-streamed answer, rewrites it and sends it.
func (s *Service) relayWhole(ctx context.Context, c *call, w *bridge.ResponseWriter, resp *http.Response, b64 bool) {
	body, err := readBody(resp, maxResponseBytes)
	if err != nil {
		if c.interrupted(ctx, w) {
			return
		}
		c.engineFailure(w, "The engine's answer was cut short: "+err.Error())
		return
	}
	u, err := findUsage(body)
	if err != nil {
		c.engineFailure(w, "The engine answered malformed JSON: "+err.Error())
		return
	}
	c.setUsage(u)
	if b64 {
		body, err = embeddingsToBase64(body, s.servedJSON)
		if err != nil {
			c.engineFailure(w, "The engine answered malformed embeddings: "+err.Error())
			return
		}
	} else {
		body = s.rewriteModelWhole(body)
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	if err := w.Body(ctx, http.StatusOK, ct, body); err != nil {
		c.sendFailed(ctx, w, err)
		return
	}
	c.outcome = outcomeOK
}

func readBody(resp *http.Response, limit int64) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= limit {
		b := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("answer larger than %d bytes", limit)
	}
	return b, nil
}

// streamBufs are the scratch buffers of one stream, recycled.
type streamBufs struct{ usage, model []byte }

var bufPool = sync.Pool{New: func() any {
	return &streamBufs{usage: make([]byte, 0, 1024), model: make([]byte, 0, 4096)}
}}

// relayStream forwards SSE data payloads as they arrive.
func (s *Service) relayStream(ctx context.Context, c *call, w *bridge.ResponseWriter, body io.Reader) {
	rd := contracts.NewSSEReader(body)
	bufs := bufPool.Get().(*streamBufs)
	defer func() {
		if cap(bufs.usage) <= 1<<20 && cap(bufs.model) <= 1<<20 {
			bufPool.Put(bufs)
		}
	}()
	includeUsage := c.req.IncludeUsage
	var last time.Time
	for {
		p, err := rd.Next()
		if err != nil {
			if c.interrupted(ctx, w) {
				return
			}
			if err == io.EOF {
				c.engineFailure(w, "The engine ended the stream without [DONE].")
			} else {
				c.engineFailure(w, "The engine stream broke: "+err.Error())
			}
			return
		}
		if bytes.Equal(p, contracts.DoneMarker) {
			if err := w.End(http.StatusOK, "text/event-stream"); err != nil {
				c.sendFailed(ctx, w, err)
				return
			}
			c.outcome = outcomeOK
			return
		}
		if isErrorEvent(p) {
			msg := "The engine failed mid-stream."
			if e, ok := contracts.ParseError(http.StatusBadGateway, p); ok {
				msg = "The engine failed mid-stream: " + truncate(e.Message, 512)
			} else if m := vllmErrorMessage(p); m != "" {
				msg = "The engine failed mid-stream: " + truncate(m, 512)
			}
			c.engineFailure(w, msg)
			return
		}
		if at := usageAt(p); at >= 0 {
			var chunk struct {
				Choices []json.RawMessage `json:"choices"`
				Usage   *usageJSON        `json:"usage"`
			}
			if err := json.Unmarshal(p, &chunk); err == nil {
				c.setUsage(chunk.Usage)
				if !includeUsage {
					if len(chunk.Choices) == 0 {
						continue // the usage-only chunk the client did not ask for
					}
					bufs.usage = blankUsage(bufs.usage[:0], p, at)
					p = bufs.usage
				}
			}
		}
		content := hasContent(p)
		if s.modelNeedle != nil {
			if i := bytes.Index(p, s.modelNeedle); i >= 0 {
				out := append(bufs.model[:0], p[:i]...)
				out = append(out, s.modelRepl...)
				out = append(out, p[i+len(s.modelNeedle):]...)
				bufs.model, p = out, out
			}
		}
		now := time.Now()
		if w.Sent() == 0 {
			c.ttft = now.Sub(c.started)
			s.metrics.ttft.Observe(c.ttft.Seconds())
		} else {
			s.metrics.itl.Observe(now.Sub(last).Seconds())
		}
		last = now
		if err := w.Data(ctx, p); err != nil {
			c.sendFailed(ctx, w, err)
			return
		}
		if content {
			c.chunks++
		}
	}
}

var (
	usageKey     = []byte(`"usage":`)
	errorPrefix  = []byte(`{"error"`)
	objectError  = []byte(`"object":"error"`)
	contentKeys  = [...][]byte{[]byte(`content":`), []byte(`"text":`), []byte(`"arguments":`)}
	modelKeyJSON = []byte(`"model"`)
)

// usageAt returns the offset of a non-null usage object in a chunk (the
// offset of its '{'), or -1. It never decodes.
func usageAt(p []byte) int {
	i := bytes.Index(p, usageKey)
	if i < 0 {
		return -1
	}
	j := skipSpace(p, i+len(usageKey))
	if j < len(p) && p[j] == '{' {
		return j
	}
	return -1
}

func skipSpace(p []byte, j int) int {
	for j < len(p) && (p[j] == ' ' || p[j] == '\t' || p[j] == '\n' || p[j] == '\r') {
		j++
	}
	return j
}

// blankUsage appends p to dst with the usage object at offset at replaced
// by null.
func blankUsage(dst, p []byte, at int) []byte {
	end := objectEnd(p, at)
	if end < 0 {
		return append(dst, p...)
	}
	dst = append(dst, p[:at]...)
	dst = append(dst, "null"...)
	return append(dst, p[end:]...)
}

// objectEnd returns the offset just past the JSON object starting at p[at].
func objectEnd(p []byte, at int) int {
	depth := 0
	inStr := false
	for i := at; i < len(p); i++ {
		ch := p[i]
		if inStr {
			switch ch {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch ch {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// isErrorEvent reports whether a stream payload is an error object rather
// than a chunk: {"error":{...}} (OpenAI) or {"object":"error",...} (older
// vLLM).
func isErrorEvent(p []byte) bool {
	i := skipSpace(p, 0)
	return bytes.HasPrefix(p[i:], errorPrefix) || bytes.Contains(p, objectError)
}

func vllmErrorMessage(p []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(p, &e)
	return e.Message
}

// hasContent reports whether a chunk carries generated text: a non-empty
// content, reasoning_content, text or tool-call arguments string.
func hasContent(p []byte) bool {
	for _, k := range contentKeys {
		for rest := p; ; {
			i := bytes.Index(rest, k)
			if i < 0 {
				break
			}
			j := skipSpace(rest, i+len(k))
			if j+1 < len(rest) && rest[j] == '"' && rest[j+1] != '"' {
				return true
			}
			rest = rest[j:]
		}
	}
	return false
}

// findUsage reads the top-level usage object of a whole answer. Engines put
// it last, so it decodes from the last "usage" key instead of the whole
// body, falling back to a full decode.
func findUsage(body []byte) (*usageJSON, error) {
	if i := bytes.LastIndex(body, usageKey); i >= 0 {
		j := skipSpace(body, i+len(usageKey))
		if j < len(body) && body[j] == '{' {
			if end := objectEnd(body, j); end > 0 {
				var u usageJSON
				if err := json.Unmarshal(body[j:end], &u); err == nil {
					return &u, nil
				}
			}
		}
	}
	var whole struct {
		Usage *usageJSON `json:"usage"`
	}
	if err := json.Unmarshal(body, &whole); err != nil {
		return nil, err
	}
	return whole.Usage, nil
}

// rewriteModelWhole puts the served model name into a whole answer.
func (s *Service) rewriteModelWhole(body []byte) []byte {
	if s.modelNeedle == nil {
		return body
	}
	if i := bytes.Index(body, s.modelNeedle); i >= 0 {
		out := make([]byte, 0, len(body)-len(s.modelNeedle)+len(s.modelRepl))
		out = append(out, body[:i]...)
		out = append(out, s.modelRepl...)
		return append(out, body[i+len(s.modelNeedle):]...)
	}
	if !bytes.Contains(body, modelKeyJSON) {
		return body
	}
	// Not compact JSON: decode the top level.
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return body
	}
	if _, ok := m["model"]; !ok {
		return body
	}
	m["model"] = s.servedJSON
	out, err := marshalNoEscape(m)
	if err != nil {
		return body
	}
	return out
}

// rewriteRequest turns the client's body into the engine's: the upstream
// model name; for streams stream_options.include_usage forced on (merged
// with the client's options); for base64 embeddings a float request (the
// worker encodes). Every other field is kept as it is.
func (s *Service) rewriteRequest(req *bridge.Request, ep int, stream bool) (body []byte, b64 bool, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(req.Body, &m); err != nil {
		return nil, false, err
	}
	if m == nil {
		return nil, false, errors.New("null body")
	}
	m["model"] = s.upstreamJSON
	switch {
	case ep == epEmbeddings:
		if v, ok := m["encoding_format"]; ok {
			var f string
			if json.Unmarshal(v, &f) == nil && f == "base64" {
				m["encoding_format"] = rawFloat
				b64 = true
			}
		}
	case stream:
		m["stream"] = rawTrue
		opts := map[string]json.RawMessage{}
		if v, ok := m["stream_options"]; ok {
			if i := skipSpace(v, 0); i < len(v) && v[i] == '{' {
				if err := json.Unmarshal(v, &opts); err != nil {
					return nil, false, fmt.Errorf("stream_options: %w", err)
				}
			}
		}
		opts["include_usage"] = rawTrue
		so, err := marshalNoEscape(opts)
		if err != nil {
			return nil, false, err
		}
		m["stream_options"] = so
	default:
		if v, ok := m["stream"]; ok && !bytes.Equal(v, rawFalse) && string(v) != "null" {
			m["stream"] = rawFalse
		}
	}
	body, err = marshalNoEscape(m)
	return body, b64, err
}

func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// finish records a request after its final frame: metrics, span, and one
// usage event.
func (s *Service) finish(ctx context.Context, c *call, w *bridge.ResponseWriter, span trace.Span) {
	now := time.Now()
	lat := now.Sub(c.started)
	mm := s.metrics
	mm.requests[c.ep][c.outcome].Inc()
	if c.code != "" && c.outcome == outcomeError {
		mm.errorCode(c.code)
	}
	mm.e2e.Observe(lat.Seconds())

	ev := events.UsageRecordedV1{
		RequestID:  c.req.ID,
		Tenant:     c.req.Tenant,
		KeyID:      c.req.KeyID,
		Model:      s.cfg.Model,
		Endpoint:   endpointNames[c.ep],
		Stream:     c.stream,
		Status:     outcomeNames[c.outcome],
		LatencyMS:  float64(lat.Microseconds()) / 1000,
		WorkerID:   s.cfg.WorkerID,
		Reporter:   s.cfg.Source,
		StartedAt:  c.started.UTC(),
		FinishedAt: now.UTC(),
	}
	if c.outcome != outcomeOK {
		ev.ErrorCode = c.code
	}
	if c.stream && w.Sent() > 0 {
		ev.TTFTMS = float64(c.ttft.Microseconds()) / 1000
	}
	switch {
	case c.usageKnown:
		ev.PromptTokens = max(c.usage.PromptTokens, 0)
		ev.CompletionTokens = max(c.usage.CompletionTokens, 0)
		if d := c.usage.PromptTokensDetails; d != nil {
			ev.CachedPromptTokens = min(max(d.CachedTokens, 0), ev.PromptTokens)
		}
	case c.stream && w.Sent() > 0:
		// The engine never said: count what was streamed, and say so.
		ev.CompletionTokens = c.chunks
		ev.Estimated = true
	case c.outcome == outcomeOK:
		ev.Estimated = true // an answer without usage: nothing to count
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
			attribute.String("aiforge.status", ev.Status),
		)
		if c.outcome == outcomeError {
			span.SetAttributes(attribute.String("error.type", c.code))
			span.SetStatus(codes.Error, c.code)
		}
	}
	env := events.Envelope{ID: c.req.ID, Source: s.cfg.Source, Tenant: c.req.Tenant, TraceParent: telemetry.TraceParent(ctx)}
	span.End()

	if c.retryable && !c.req.FinalAttempt() && ev.PromptTokens == 0 && ev.CompletionTokens == 0 {
		// The edge retries this request on another replica under the same
		// request id: an event here would make JetStream drop the retry's
		// (deduplicated by id). Nothing was spent, so nothing is lost; on the
		// final attempt the failure is recorded.
		s.log.Debug("no usage event for a retryable failure", "request_id", c.req.ID, "code", c.code)
		return
	}
	s.publishUsage(events.UsageRecordedV2{UsageRecordedV1: ev, Reservations: c.req.Reservations}, env)
}

// publishUsage publishes a usage event, retrying JetStream errors with
// backoff. It uses its own context so canceled requests are recorded too.
func (s *Service) publishUsage(ev events.UsageRecordedV2, env events.Envelope) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		_, err := events.Publish(ctx, s.deps.JS, ev, env)
		if err == nil {
			return
		}
		if errors.Is(err, events.ErrInvalid) || attempt == 5 || ctx.Err() != nil {
			s.log.Error("could not record usage", "request_id", ev.RequestID, "tenant", ev.Tenant,
				"status", ev.Status, "attempts", attempt, "err", err)
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		backoff *= 2
	}
}

// embeddingsToBase64 encodes every float embedding of an answer as OpenAI
// does for encoding_format=base64 (little-endian float32 bytes), and puts
// the served model name in.
func embeddingsToBase64(body []byte, model json.RawMessage) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	var data []map[string]json.RawMessage
	if err := json.Unmarshal(top["data"], &data); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	var floats []float32
	var raw []byte
	for i, d := range data {
		emb := d["embedding"]
		if j := skipSpace(emb, 0); j >= len(emb) || emb[j] != '[' {
			continue // not a float array (already encoded)
		}
		if err := json.Unmarshal(emb, &floats); err != nil {
			return nil, fmt.Errorf("data[%d].embedding: %w", i, err)
		}
		raw = appendFloat32LE(raw[:0], floats)
		enc := make([]byte, 0, base64.StdEncoding.EncodedLen(len(raw))+2)
		enc = append(enc, '"')
		enc = base64.StdEncoding.AppendEncode(enc, raw)
		d["embedding"] = append(enc, '"')
	}
	encData, err := marshalNoEscape(data)
	if err != nil {
		return nil, err
	}
	top["data"] = encData
	if _, ok := top["model"]; ok {
		top["model"] = model
	}
	return marshalNoEscape(top)
}

func appendFloat32LE(dst []byte, fs []float32) []byte {
	for _, f := range fs {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(f))
	}
	return dst
}
