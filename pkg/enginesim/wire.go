package enginesim

import (
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
