package engine

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
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/telemetry"
)

var (
	hdrJSON = []string{"application/json"}
	hdrSSE  = []string{"text/event-stream"}

	rawTrue  = json.RawMessage("true")
	rawFalse = json.RawMessage("false")
	rawFloat = json.RawMessage(`"float"`)
)

// errRequestTimeout is the cause of a request that ran past RequestTimeout,
// errTTFTTimeout of a stream whose first chunk did not come within
// TTFTTimeout.
var (
	errRequestTimeout = errors.New("worker: engine request timed out")
	errTTFTTimeout    = errors.New("worker: engine sent no first token in time")
)

// Bounds on what is read from an engine.
const (
	maxResponseBytes = 256 << 20
	maxErrorBytes    = 64 << 10
)

// fail sends an error frame and records the outcome.
func (c *Call) fail(w *bridge.ResponseWriter, e *bridge.Error) {
	c.Outcome = OutcomeError
	c.Code = e.Code
	c.Retryable = e.Retryable && w.Sent() == 0
	_ = w.Fail(e)
}

// engineFailure is the answer to an engine that failed: retryable on another
// replica while nothing reached the client.
func (c *Call) engineFailure(w *bridge.ResponseWriter, msg string) {
	c.fail(w, &bridge.Error{Status: http.StatusBadGateway, Code: contracts.CodeEngineError, Message: msg,
		Body: contracts.ErrEngine(msg).Body(), Retryable: w.Sent() == 0})
}

// interrupted handles a request whose context ended: the request timeout
// (504), an edge cancel, or a shutdown past its drain timeout. It reports
// false when ctx is still live.
func (c *Call) interrupted(ctx context.Context, w *bridge.ResponseWriter) bool {
	if ctx.Err() == nil {
		return false
	}
	switch context.Cause(ctx) {
	case errRequestTimeout, errTTFTTimeout:
		msg := "The engine did not finish the request in time."
		if context.Cause(ctx) == errTTFTTimeout {
			msg = "The engine sent no first token in time."
		}
		c.fail(w, &bridge.Error{Status: http.StatusGatewayTimeout, Code: contracts.CodeEngineTimeout, Message: msg,
			Body: contracts.ErrEngineTimeout(msg).Body()})
		return true
	}
	c.Outcome = OutcomeCanceled
	c.Code = CodeCanceled
	if w.Canceled() {
		_ = w.Fail(&bridge.Error{Status: 499, Code: CodeCanceled, Message: "request canceled by the client"})
		return true
	}
	// Shutdown: let the edge try another replica if nothing was sent.
	e := contracts.ErrShuttingDown()
	c.Retryable = w.Sent() == 0
	_ = w.Fail(&bridge.Error{Status: e.Status, Code: e.Code, Message: e.Message, Body: e.Body(), Retryable: true})
	return true
}

// sendFailed handles an error from w.Data or w.Body.
func (c *Call) sendFailed(ctx context.Context, w *bridge.ResponseWriter, err error) {
	if c.interrupted(ctx, w) {
		return
	}
	code := contracts.CodeInternal
	if errors.Is(err, bridge.ErrCreditTimeout) {
		code = CodeClientStalled
	}
	c.fail(w, &bridge.Error{Status: http.StatusBadGateway, Code: code, Message: "worker could not send the response: " + err.Error()})
}

// Forward sends c's request to the engine and relays its answer to w,
// recording in c how it ended, the usage the engine reported and the
// stream's timings; it always sends the final frame.
func (ec *Client) Forward(ctx context.Context, c *Call, w *bridge.ResponseWriter) {
	if c.Endpoint == Rerank {
		ec.forwardRerank(ctx, c, w)
		return
	}
	body, b64, err := ec.rewriteRequest(c.Req, c.Endpoint, c.Stream)
	if err != nil {
		e := contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not a JSON object: "+err.Error())
		c.fail(w, &bridge.Error{Status: e.Status, Code: e.Code, Message: e.Message, Body: e.Body()})
		return
	}
	ctx, cancel := context.WithTimeoutCause(ctx, ec.cfg.RequestTimeout, errRequestTimeout)
	defer cancel()
	var firstToken func() bool // stops the TTFT timer
	if d := ec.cfg.TTFTTimeout; d > 0 && c.Stream {
		var cancelTTFT context.CancelCauseFunc
		ctx, cancelTTFT = context.WithCancelCause(ctx)
		defer cancelTTFT(nil)
		firstToken = time.AfterFunc(d, func() { cancelTTFT(errTTFTTimeout) }).Stop
	}
	accept := hdrJSON
	if c.Stream {
		accept = hdrSSE
	}
	resp := ec.send(ctx, c, w, ec.urls[c.Endpoint], body, accept)
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	if c.Stream {
		if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
			ec.unexpectedWhole(ctx, c, w, resp)
			return
		}
		ec.relayStream(ctx, c, w, resp.Body, firstToken)
		return
	}
	ec.relayWhole(ctx, c, w, resp, b64)
}

// engineStatus answers an engine's non-200 answer with an OpenAI-shaped
// error (string codes, param where known, the engine's message without its
// key); only failures another replica may not share are retryable.
// send sends body to the engine at url with the engine's headers (its key,
// the trace context) and returns its 200 answer; any other outcome it has
// answered on w (unreachable, interrupted, the engine's error status) and
// it returns nil.
func (ec *Client) send(ctx context.Context, c *Call, w *bridge.ResponseWriter, url string, body []byte, accept []string) *http.Response {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		c.fail(w, &bridge.Error{Status: http.StatusInternalServerError, Code: contracts.CodeInternal, Message: "worker: build engine request"})
		return nil
	}
	h := hreq.Header
	h["Content-Type"] = hdrJSON
	h["Accept"] = accept
	if ec.authHeader != "" {
		h["Authorization"] = []string{ec.authHeader}
	}
	telemetry.Propagator.Inject(ctx, propagation.HeaderCarrier(h))
	resp, err := ec.client.Do(hreq)
	if err != nil {
		if !c.interrupted(ctx, w) {
			c.engineFailure(w, "The engine could not be reached: "+UnwrapURLError(err).Error())
		}
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		ec.engineStatus(ctx, c, w, resp)
		return nil
	}
	return resp
}

func (ec *Client) engineStatus(ctx context.Context, c *Call, w *bridge.ResponseWriter, resp *http.Response) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	if err != nil && c.interrupted(ctx, w) {
		return
	}
	ec.engineError(c, w, resp.StatusCode, body)
}

// unexpectedWhole answers a stream request the engine answered with JSON
// instead of an event stream: an error object (some engines answer errors
// with 200), or a failure.
func (ec *Client) unexpectedWhole(ctx context.Context, c *Call, w *bridge.ResponseWriter, resp *http.Response) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	if err != nil && c.interrupted(ctx, w) {
		return
	}
	if isErrorEvent(body) {
		ec.engineError(c, w, 0, body)
		return
	}
	c.engineFailure(w, "The engine answered a stream request with a JSON body, not an event stream.")
}

// engineError fails the call with the engine's error (status 0: one
// reported inside a 200 answer).
func (ec *Client) engineError(c *Call, w *bridge.ResponseWriter, status int, body []byte) {
	e, retryable := ec.mapEngineError(status, body, c.Endpoint)
	c.fail(w, &bridge.Error{Status: e.Status, Code: e.Code, Message: e.Message, Body: e.Body(), Retryable: retryable})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// relayWhole reads a non-streamed answer, rewrites it and sends it.
func (ec *Client) relayWhole(ctx context.Context, c *Call, w *bridge.ResponseWriter, resp *http.Response, b64 bool) {
	body, err := readBody(resp, maxResponseBytes)
	if err != nil {
		if c.interrupted(ctx, w) {
			return
		}
		c.engineFailure(w, "The engine's answer was cut short: "+err.Error())
		return
	}
	if isErrorEvent(body) {
		ec.engineError(c, w, 0, body) // an error answered with 200 (LM Studio, some proxies)
		return
	}
	u, err := findUsage(body)
	if err != nil {
		c.engineFailure(w, "The engine answered malformed JSON: "+err.Error())
		return
	}
	c.setUsage(u)
	if c.TraceFinish {
		c.noteFinish(body)
	}
	if b64 {
		body, err = embeddingsToBase64(body, ec.servedJSON)
		if err != nil {
			c.engineFailure(w, "The engine answered malformed embeddings: "+err.Error())
			return
		}
	} else {
		body = ec.rewriteModelWhole(body)
		if c.Endpoint != Embeddings {
			body = contracts.CompleteChoices(body, c.Endpoint == Chat)
		}
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	if err := w.Body(ctx, http.StatusOK, ct, body); err != nil {
		c.sendFailed(ctx, w, err)
		return
	}
	c.Outcome = OutcomeOK
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
type streamBufs struct{ usage, model, pending []byte }

var bufPool = sync.Pool{New: func() any {
	return &streamBufs{usage: make([]byte, 0, 1024), model: make([]byte, 0, 4096)}
}}

// stream is the state of one relayed stream.
type stream struct {
	ec         *Client
	c          *Call
	w          *bridge.ResponseWriter
	bufs       *streamBufs
	firstToken func() bool
	last       time.Time
}

// relayStream forwards SSE data payloads as they arrive, in OpenAI's
// layout: an engine error event (llama-server's `error:` line, `event:
// error`, or an error object as data) ends the stream with an OpenAI error;
// usage the engine put on chunks with choices (llama-server on its last,
// Ollama zeros on every completion chunk) is nulled there, and the last of
// it goes out in a chunk of its own with "choices": [] just before [DONE]
// when the client asked for include_usage and the engine sent no usage
// chunk of its own; a client that did not ask gets no usage.
// firstToken, when set, is called at the first chunk (it stops the TTFT
// timer).
func (ec *Client) relayStream(ctx context.Context, c *Call, w *bridge.ResponseWriter, body io.Reader, firstToken func() bool) {
	rd := newSSEReader(body)
	bufs := bufPool.Get().(*streamBufs)
	defer func() {
		if cap(bufs.usage) <= 1<<20 && cap(bufs.model) <= 1<<20 && cap(bufs.pending) <= 1<<20 {
			bufs.pending = bufs.pending[:0]
			bufPool.Put(bufs)
		}
	}()
	st := stream{ec: ec, c: c, w: w, bufs: bufs, firstToken: firstToken}
	includeUsage := c.Req.IncludeUsage
	// vLLM's continuous_usage_stats asks for usage on every chunk: the
	// client gets the engine's layout as it is.
	continuous := includeUsage && continuousUsage(c.Req.Body)
	// Usage: only the engine's final count is known usage. That is the
	// usage of its usage chunk ("choices": [], OpenAI's layout), or failing
	// one, the last usage seen before [DONE] (llama-server puts it on its
	// last chunk with choices). Usage on a chunk with choices is provisional
	// until then: Ollama puts all-zero usage on every completion chunk,
	// vLLM's continuous_usage_stats a running count; a stream cut before the
	// final count is estimated (Call.Estimate).
	final := false   // the engine's usage chunk came
	pending := false // bufs.pending holds the last chunk with choices and usage
	pendingAt := 0   // the offset of its usage object
	for {
		ev, err := rd.Next()
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
		p := ev.data
		if len(p) == 0 && !ev.error {
			continue // an empty data field: nothing to forward
		}
		if ev.error || isErrorEvent(p) {
			ec.engineError(c, w, 0, p)
			return
		}
		if bytes.Equal(p, contracts.DoneMarker) {
			if !final && c.partialSeen && c.credible(&c.partial) {
				c.setUsage(&c.partial) // the last usage before [DONE] was the count
			}
			if !final && pending {
				// Usage on a chunk with choices (llama-server): it goes to
				// the client in a chunk of its own.
				bufs.usage = usageChunk(bufs.usage[:0], bufs.pending, pendingAt)
				if len(bufs.usage) > 0 && !st.send(ctx, bufs.usage) {
					return
				}
			}
			if err := w.End(http.StatusOK, "text/event-stream"); err != nil {
				c.sendFailed(ctx, w, err)
				return
			}
			c.Outcome = OutcomeOK
			return
		}
		if at := usageAt(p); at >= 0 {
			var chunk struct {
				Choices []json.RawMessage `json:"choices"`
				Usage   *Usage            `json:"usage"`
			}
			if err := json.Unmarshal(p, &chunk); err == nil && chunk.Usage != nil {
				switch {
				case len(chunk.Choices) == 0:
					// The engine's usage chunk, in OpenAI's layout: final.
					final, pending = true, false
					if c.credible(chunk.Usage) {
						c.setUsage(chunk.Usage)
					}
					if !includeUsage {
						continue // the usage-only chunk the client did not ask for
					}
				case continuous:
					c.partial, c.partialSeen = *chunk.Usage, true // the client gets it as it is
				default:
					// Usage on a chunk with choices is not OpenAI's layout:
					// the choices go now with "usage": null; the usage, if
					// no usage chunk follows, in a chunk of its own at the
					// end, when the client asked for it.
					c.partial, c.partialSeen = *chunk.Usage, true
					if includeUsage {
						bufs.pending = append(bufs.pending[:0], p...)
						pendingAt, pending = at, true
					}
					bufs.usage = blankUsage(bufs.usage[:0], p, at)
					p = bufs.usage
				}
			}
		}
		if !st.send(ctx, p) {
			return
		}
	}
}

var continuousKey = []byte(`"continuous_usage_stats"`)

// continuousUsage reports whether a request's stream_options ask for
// continuous_usage_stats (vLLM: usage on every chunk).
func continuousUsage(body []byte) bool {
	if !bytes.Contains(body, continuousKey) {
		return false
	}
	var req struct {
		StreamOptions *struct {
			Continuous bool `json:"continuous_usage_stats"`
		} `json:"stream_options"`
	}
	return json.Unmarshal(body, &req) == nil && req.StreamOptions != nil && req.StreamOptions.Continuous
}

// send forwards one chunk with the served model name put in; false means
// the call has failed (and its final frame is out).
func (st *stream) send(ctx context.Context, p []byte) bool {
	c, w, ec := st.c, st.w, st.ec
	content := hasContent(p)
	if c.TraceFinish {
		c.noteFinish(p)
	}
	if ec.modelNeedle != nil {
		if i := bytes.Index(p, ec.modelNeedle); i >= 0 {
			out := append(st.bufs.model[:0], p[:i]...)
			out = append(out, ec.modelRepl...)
			out = append(out, p[i+len(ec.modelNeedle):]...)
			st.bufs.model, p = out, out
		}
	}
	now := time.Now()
	if w.Sent() == 0 {
		if st.firstToken != nil && !st.firstToken() && ctx.Err() != nil {
			c.interrupted(ctx, w) // the timer fired first
			return false
		}
		c.TTFT = now.Sub(c.Started)
		ec.ttft.Observe(c.TTFT.Seconds())
	} else {
		ec.itl.Observe(now.Sub(st.last).Seconds())
	}
	st.last = now
	if err := w.Data(ctx, p); err != nil {
		c.sendFailed(ctx, w, err)
		return false
	}
	if content {
		c.Chunks++
	}
	return true
}

// usageChunk appends to dst OpenAI's usage chunk for the chunk p whose usage
// object starts at offset at: p's id, object, created, model and
// system_fingerprint, "choices": [] and the usage as the engine wrote it.
// It appends nothing when p is not a JSON object.
func usageChunk(dst, p []byte, at int) []byte {
	end := objectEnd(p, at)
	if end < 0 {
		return dst
	}
	var h struct {
		ID                json.RawMessage `json:"id"`
		Object            json.RawMessage `json:"object"`
		Created           json.RawMessage `json:"created"`
		Model             json.RawMessage `json:"model"`
		SystemFingerprint json.RawMessage `json:"system_fingerprint"`
	}
	if json.Unmarshal(p, &h) != nil {
		return dst
	}
	dst = append(dst, '{')
	for _, f := range [...]struct {
		key string
		v   json.RawMessage
	}{{`"id":`, h.ID}, {`"object":`, h.Object}, {`"created":`, h.Created}, {`"model":`, h.Model}, {`"system_fingerprint":`, h.SystemFingerprint}} {
		if len(f.v) > 0 {
			dst = append(dst, f.key...)
			dst = append(dst, f.v...)
			dst = append(dst, ',')
		}
	}
	dst = append(dst, `"choices":[],"usage":`...)
	dst = append(dst, p[at:end]...)
	return append(dst, '}')
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
func findUsage(body []byte) (*Usage, error) {
	if i := bytes.LastIndex(body, usageKey); i >= 0 {
		j := skipSpace(body, i+len(usageKey))
		if j < len(body) && body[j] == '{' {
			if end := objectEnd(body, j); end > 0 {
				var u Usage
				if err := json.Unmarshal(body[j:end], &u); err == nil {
					return &u, nil
				}
			}
		}
	}
	var whole struct {
		Usage *Usage `json:"usage"`
	}
	if err := json.Unmarshal(body, &whole); err != nil {
		return nil, err
	}
	return whole.Usage, nil
}

// rewriteModelWhole puts the served model name into a whole answer.
func (ec *Client) rewriteModelWhole(body []byte) []byte {
	if ec.modelNeedle == nil {
		return body
	}
	if i := bytes.Index(body, ec.modelNeedle); i >= 0 {
		out := make([]byte, 0, len(body)-len(ec.modelNeedle)+len(ec.modelRepl))
		out = append(out, body[:i]...)
		out = append(out, ec.modelRepl...)
		return append(out, body[i+len(ec.modelNeedle):]...)
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
	m["model"] = ec.servedJSON
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
func (ec *Client) rewriteRequest(req *bridge.Request, ep Endpoint, stream bool) (body []byte, b64 bool, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(req.Body, &m); err != nil {
		return nil, false, err
	}
	if m == nil {
		return nil, false, errors.New("null body")
	}
	m["model"] = ec.upstreamJSON
	switch {
	case ep == Embeddings:
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
