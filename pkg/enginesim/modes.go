package enginesim

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"
)

// NewServer returns an HTTP server of the simulator (Start uses it): with
// SplitWrites it turns TCP_NODELAY off on every connection it accepts.
func (s *Sim) NewServer() *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		ConnContext:       s.ConnContext,
	}
}

// ConnContext is an http.Server ConnContext hook: with SplitWrites it turns
// TCP_NODELAY off on c (Go turns it on for every TCP connection; C and C++
// servers such as llama-server's leave Nagle's algorithm on).
func (s *Sim) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if s.splitWrites {
		if nd, ok := c.(interface{ SetNoDelay(bool) error }); ok {
			_ = nd.SetNoDelay(false)
		}
	}
	return ctx
}

// injected is the error of failure f (g, when known, names the model and
// counts the prompt).
func (s *Sim) injected(f Failure, g *gen) *apiError {
	if f.ContextOverflow {
		e := s.contextOverflow(g)
		if f.Status != 0 {
			e.status = f.Status
		}
		return e
	}
	model := s.models[0]
	if g != nil {
		model = g.model
	}
	switch f.Status {
	case 0, http.StatusInternalServerError:
		return errSimulated
	case http.StatusBadRequest:
		return &apiError{status: f.Status, typ: "invalid_request_error", msg: "enginesim: simulated invalid request"}
	case http.StatusUnauthorized:
		if s.style == StyleLlama {
			return &apiError{status: f.Status, typ: "invalid_request_error", msg: "Invalid API Key", code: "invalid_api_key"}
		}
		return errUnauthorized
	case http.StatusForbidden:
		return &apiError{status: f.Status, typ: "permission_error", msg: "enginesim: simulated permission denied"}
	case http.StatusNotFound:
		return modelNotFound(model)
	case http.StatusTooManyRequests:
		return &apiError{status: f.Status, typ: "rate_limit_error", msg: "enginesim: simulated overload: all slots are busy", code: "rate_limit_exceeded"}
	case http.StatusServiceUnavailable:
		return &apiError{status: f.Status, typ: "server_error", msg: "Loading model"}
	}
	typ := "invalid_request_error"
	if f.Status >= 500 {
		typ = "server_error"
	}
	return &apiError{status: f.Status, typ: typ, msg: "enginesim: simulated engine failure (" + strconv.Itoa(f.Status) + ")"}
}

// contextOverflow is the error of a prompt longer than the context window,
// in the words of the simulator's error style.
func (s *Sim) contextOverflow(g *gen) *apiError {
	nCtx := max(s.contextSize, 1)
	prompt, completion, param := nCtx+1, 16, "messages"
	if g != nil {
		prompt, completion = max(g.promptTokens, prompt), g.completionTokens()
		if g.ep == epCompletions {
			param = "prompt"
		}
	}
	e := &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, nPrompt: prompt, nCtx: nCtx}
	n, c, p := strconv.Itoa(nCtx), strconv.Itoa(completion), strconv.Itoa(prompt)
	switch s.style {
	case StyleLlama:
		e.param = ""
		e.llamaType = "exceed_context_size_error"
		e.msg = "request (" + p + " tokens) exceeds the available context size (" + n + " tokens), try increasing it"
	case StyleVLLM:
		e.param = ""
		e.msg = "This model's maximum context length is " + n + " tokens. However, you requested " + strconv.Itoa(prompt+completion) +
			" tokens (" + p + " in the messages, " + c + " in the completion). Please reduce the length of the messages or completion."
	case StyleOllama:
		e.param = ""
		e.msg = "the input length exceeds the context length"
	default:
		e.code = "context_length_exceeded"
		e.msg = "This model's maximum context length is " + n + " tokens. However, your messages resulted in " + p +
			" tokens. Please reduce the length of the messages."
	}
	return e
}

// appendErrorEvent appends the SSE event that reports e mid-stream in
// mode m: llama-server's `error:` line (its error object unwrapped in
// StyleLlama) followed by `data: [DONE]`, or `event: error` with the error
// body as data.
func (s *Sim) appendErrorEvent(b []byte, m FailureMode, e *apiError) []byte {
	switch m {
	case FailErrorLine:
		b = append(b, "error: "...)
		if s.style == StyleLlama {
			b = appendLlamaError(b, e)
		} else {
			b = appendStyledError(b, e, s.style)
		}
		return append(b, "\n\ndata: [DONE]\n\n"...)
	case FailErrorEvent:
		b = append(b, "event: error\ndata: "...)
		b = appendStyledError(b, e, s.style)
		return append(b, "\n\n"...)
	}
	b = append(b, "data: "...)
	b = appendStyledError(b, e, s.style)
	return append(b, "\n\n"...)
}
