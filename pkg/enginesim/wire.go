package enginesim

import (
	"errors"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"
)

// apiError is an OpenAI-shaped error:
// {"error":{"message":..,"type":..,"param":..|null,"code":..|null}}.
type apiError struct {
	status int
	typ    string
	msg    string
	param  string // "" = null
	code   string // "" = null
	// llamaType is llama-server's type where it differs from the one its
	// status implies (exceed_context_size_error); nPrompt and nCtx, when
	// nCtx > 0, are the token counts llama-server adds to a context
	// overflow.
	llamaType     string
	nPrompt, nCtx int
}

// ErrorStyle is the shape of the simulator's error bodies: real engines
// disagree on it.
type ErrorStyle int

const (
	// StyleOpenAI: {"error":{"message","type","param","code"}}, code a
	// string or null (OpenAI, and vLLM since 0.10).
	StyleOpenAI ErrorStyle = iota
	// StyleLlama: llama-server's {"error":{"code":400,"message","type"}},
	// a numeric code and llama's own types (exceed_context_size_error);
	// in a stream its error object goes unwrapped on an `error:` line.
	StyleLlama
	// StyleVLLM: older vLLM's top-level
	// {"object":"error","message","type":"BadRequestError","param","code":400},
	// and {"error":"Unauthorized"} for a wrong key.
	StyleVLLM
	// StyleOllama: Ollama's native {"error":"message"}.
	StyleOllama
)

var styleNames = [...]string{"openai", "llama", "vllm", "ollama"}

func (st ErrorStyle) String() string {
	if st >= 0 && int(st) < len(styleNames) {
		return styleNames[st]
	}
	return "ErrorStyle(" + strconv.Itoa(int(st)) + ")"
}

// ParseErrorStyle returns the style named s (openai, llama, vllm, ollama).
func ParseErrorStyle(s string) (ErrorStyle, error) {
	for i, n := range styleNames {
		if n == s {
			return ErrorStyle(i), nil
		}
	}
	return 0, errors.New("enginesim: unknown error style " + strconv.Quote(s) + " (openai, llama, vllm, ollama)")
}

func (e *apiError) llamaKind() string {
	if e.llamaType != "" {
		return e.llamaType
	}
	switch e.status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusNotImplemented:
		return "not_supported_error"
	case http.StatusServiceUnavailable:
		return "unavailable_error"
	}
	if e.status < 500 {
		return "invalid_request_error"
	}
	return "server_error"
}

func (e *apiError) vllmKind() string {
	switch e.status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusNotImplemented:
		return "NotImplementedError"
	}
	if e.status < 500 {
		return "BadRequestError"
	}
	return "InternalServerError"
}

// appendLlamaError appends llama-server's error object (not wrapped).
func appendLlamaError(b []byte, e *apiError) []byte {
	b = append(b, `{"code":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.llamaKind())
	if e.nCtx > 0 {
		b = append(b, `,"n_prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(e.nPrompt), 10)
		b = append(b, `,"n_ctx":`...)
		b = strconv.AppendInt(b, int64(e.nCtx), 10)
	}
	return append(b, '}')
}

// appendStyledError appends e's body in style st.
func appendStyledError(b []byte, e *apiError, st ErrorStyle) []byte {
	switch st {
	case StyleLlama:
		b = append(b, `{"error":`...)
		b = appendLlamaError(b, e)
		return append(b, '}')
	case StyleVLLM:
		if e.status == http.StatusUnauthorized {
			return append(b, `{"error":"Unauthorized"}`...)
		}
		b = append(b, `{"object":"error","message":`...)
		b = appendJSONString(b, e.msg)
		b = append(b, `,"type":`...)
		b = appendJSONString(b, e.vllmKind())
		b = append(b, `,"param":`...)
		b = appendJSONStringOrNull(b, e.param)
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, int64(e.status), 10)
		return append(b, '}')
	case StyleOllama:
		b = append(b, `{"error":`...)
		b = appendJSONString(b, e.msg)
		return append(b, '}')
	}
	return appendError(b, e)
}

var (
	errUnauthorized = &apiError{status: http.StatusUnauthorized, typ: "invalid_request_error",
		msg: "Incorrect API key provided.", code: "invalid_api_key"}
	errSimulated = &apiError{status: http.StatusInternalServerError, typ: "server_error",
		msg: "enginesim: simulated engine failure", code: "simulated_failure"}
)

func badRequest(msg, param string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: msg, param: param}
}

func modelNotFound(model string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
		msg:   "The model `" + model + "` does not exist or you do not have access to it.",
		param: "model", code: "model_not_found"}
}

func notFound(r *http.Request) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
		msg: "Invalid URL (" + r.Method + " " + r.URL.Path + ")", code: "unknown_url"}
}

func appendError(b []byte, e *apiError) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, e.msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.typ)
	b = append(b, `,"param":`...)
	b = appendJSONStringOrNull(b, e.param)
	b = append(b, `,"code":`...)
	b = appendJSONStringOrNull(b, e.code)
	return append(b, "}}"...)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, appendError(nil, e))
}

// writeError answers e in the simulator's error style.
func (s *Sim) writeError(w http.ResponseWriter, e *apiError) {
	s.writeJSON(w, e.status, appendStyledError(nil, e, s.style))
}

// writeJSON answers body; with SplitWrites the headers go out in a write of
// their own before it.
func (s *Sim) writeJSON(w http.ResponseWriter, status int, body []byte) {
	if !s.splitWrites {
		writeJSON(w, status, body)
		return
	}
	h := w.Header()
	h["Content-Type"] = hdrJSON
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_ = http.NewResponseController(w).Flush()
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = hdrJSON
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// bufPool recycles response buffers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > 1<<20 {
		return // do not keep huge buffers alive
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

func appendJSONStringOrNull(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendJSONString(b, s)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal, escaping as
// encoding/json does (minus HTML escaping); invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
