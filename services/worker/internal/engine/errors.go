package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/aiforge/aiforge/pkg/contracts"
)

// engineError is what an engine said about a failure, in whichever of the
// engines' shapes it came:
//
//	OpenAI, vLLM >= 0.10: {"error":{"message","type","param","code":"string"|null}}
//	llama-server:         {"error":{"code":400,"message","type":"exceed_context_size_error"}}
//	                      (in a stream its inner object, on an `error:` line)
//	vLLM < 0.10:          {"object":"error","message","type":"BadRequestError","param","code":400}
//	Ollama, TGI, vLLM 401: {"error":"message"} ({"error_type"} beside it for TGI)
//	FastAPI:              {"detail":"message"} or {"detail":[{...}]}
type engineError struct {
	Message string
	Type    string
	Param   string
	Code    string // a string code; numeric ones go to Status
	Status  int    // the numeric code, when the body has one
}

// parseEngineError reads an engine's error body; ok is false when it has
// no message in any known shape.
func parseEngineError(body []byte) (e engineError, ok bool) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return e, false
	}
	var top struct {
		Error     json.RawMessage `json:"error"`
		ErrorType string          `json:"error_type"`
		Object    string          `json:"object"`
		Detail    json.RawMessage `json:"detail"`
		engineFields
	}
	if json.Unmarshal(body, &top) != nil {
		return e, false
	}
	switch {
	case len(top.Error) > 0 && top.Error[0] == '"':
		_ = json.Unmarshal(top.Error, &e.Message)
		e.Type = top.ErrorType
	case len(top.Error) > 0 && top.Error[0] == '{':
		var in engineFields
		if json.Unmarshal(top.Error, &in) != nil {
			return e, false
		}
		e = in.engineError()
	case top.Message != "":
		e = top.engineFields.engineError() // vLLM's top-level error, or an unwrapped llama one
	case len(top.Detail) > 0:
		if json.Unmarshal(top.Detail, &e.Message) != nil {
			e.Message = string(top.Detail)
		}
	}
	return e, e.Message != ""
}

type engineFields struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Param   json.RawMessage `json:"param"`
	Code    json.RawMessage `json:"code"`
}

func (f engineFields) engineError() engineError {
	e := engineError{Message: f.Message, Type: f.Type}
	_ = json.Unmarshal(f.Param, &e.Param) // a string, or null
	var code string
	if json.Unmarshal(f.Code, &code) == nil {
		if n, err := strconv.Atoi(code); err == nil {
			e.Status = n // "400": a status, not a code
		} else {
			e.Code = code
		}
	} else if n, err := strconv.Atoi(string(f.Code)); err == nil {
		e.Status = n
	}
	return e
}

// Phrases of the engines' context overflow messages (lower case).
var contextPhrases = []string{
	"maximum context length",             // OpenAI, vLLM, SGLang
	"exceeds the available context size", // llama-server
	"exceed_context_size",
	"context_length_exceeded",
	"context length exceeded",
	"exceeds the context length", // Ollama
	"exceeds maximum context length",
	"exceeds the maximum context",
	"input length exceeds",
	"context window",
	"too long to fit into the model",         // vLLM
	"longer than the maximum model length",   // vLLM
	"longer than the model's context length", // SGLang
	"is too large to process",                // llama-server embeddings (batch size)
	"tokens + `max_new_tokens` must be <=",   // TGI
	"prompt is too long",                     // Anthropic
}

func (e engineError) contextOverflow() bool {
	if e.Code == contracts.CodeContextLengthExceeded || e.Type == "exceed_context_size_error" {
		return true
	}
	m := strings.ToLower(e.Message)
	for _, p := range contextPhrases {
		if strings.Contains(m, p) {
			return true
		}
	}
	return false
}

// requestFaultPhrases are phrases (lower case) of 500 answers in which an
// engine reports a fault of the request, with the request field it is
// about. Ollama answers these 500 (v0.6.5's llm/server.go Completion: a
// response_format whose schema is not an object, or one it cannot turn
// into a grammar).
var requestFaultPhrases = [...]struct{ phrase, param string }{
	{"invalid format: ", "response_format"},
	{"invalid json schema in format", "response_format"},
}

// requestFault reports whether a 500's error is one the engine attributes
// to the request, and the field it is about ("" unknown): such a failure is
// deterministic, so it is answered as the client's error (400) and never
// retried on another replica, which would fail the same way. The rule is
// conservative, since a wrong answer turns an engine failure another
// replica might have served into a client error: only an error typed
// invalid_request_error (OpenAI's type for the request's faults; an engine
// that types a 500 so says the request is at fault) or a message of
// requestFaultPhrases. Every other 500 (Ollama answers 500 for runner
// crashes, out of memory and load failures too, with type api_error), a
// 502/503/504, 429 and transport failures stay retryable.
func (e engineError) requestFault() (param string, ok bool) {
	m := strings.ToLower(e.Message)
	for _, f := range requestFaultPhrases {
		if strings.Contains(m, f.phrase) {
			return f.param, true
		}
	}
	if e.Type == contracts.TypeInvalidRequest {
		return e.Param, true
	}
	return "", false
}

// passCodes are the string codes of an engine's 4xx passed on as they are
// (OpenAI's own); any other becomes invalid_request.
var passCodes = map[string]bool{
	contracts.CodeInvalidRequest: true, contracts.CodeInvalidJSON: true, contracts.CodeMissingParam: true,
	contracts.CodeInvalidType: true, contracts.CodeBodyTooLarge: true,
	"invalid_value": true, "unsupported_value": true, "unsupported_parameter": true, "unknown_parameter": true,
	"invalid_prompt": true, "invalid_image_url": true, "invalid_image": true, "content_filter": true,
	"string_above_max_length": true, "array_above_max_length": true, "empty_array": true,
	"integer_above_max_value": true, "integer_below_min_value": true,
	"decimal_above_max_value": true, "decimal_below_min_value": true,
}

// promptParam is the request field a context overflow is about.
func promptParam(ep Endpoint) string {
	switch ep {
	case Completions:
		return "prompt"
	case Embeddings:
		return "input"
	case Rerank:
		return "documents"
	}
	return "messages"
}

var (
	reURLUserinfo = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)[^/\s@"']+@`)
	reBearer      = regexp.MustCompile(`(?i)(bearer\s+)[^\s"',;]+`)
)

// scrub makes an engine's message safe to pass on: the engine key and any
// credentials in URLs are replaced, and it is bounded.
func (ec *Client) scrub(msg string) string {
	if k := ec.cfg.Engine.APIKey; k != "" {
		msg = strings.ReplaceAll(msg, k, "[redacted]")
	}
	if strings.Contains(msg, "@") {
		msg = reURLUserinfo.ReplaceAllString(msg, "${1}[redacted]@")
	}
	if strings.Contains(strings.ToLower(msg), "bearer") {
		msg = reBearer.ReplaceAllString(msg, "${1}[redacted]")
	}
	return truncate(strings.TrimSpace(msg), 512)
}

// mapEngineError turns an engine's failure (status, body) into the error
// the client gets, and says whether another replica may be tried: only
// failures of this engine's state are (overload, 5xx), never the
// deterministic ones (a 4xx: the request or the binding is wrong; a 500
// the engine attributes to the request, see requestFault). status
// is 0 for an error the engine reported inside a 200 (a stream's error
// event), where the body's numeric code, if any, stands in for it.
func (ec *Client) mapEngineError(status int, body []byte, ep Endpoint) (*contracts.Error, bool) {
	ee, shaped := parseEngineError(body)
	if status == 0 || status == http.StatusOK {
		status = http.StatusInternalServerError
		if ee.Status >= 400 && ee.Status <= 599 {
			status = ee.Status
		}
	}
	msg := ee.Message
	if !shaped {
		msg = string(bytes.TrimSpace(body))
	}
	msg = ec.scrub(msg)
	withMsg := func(s string) string {
		if msg == "" {
			return s
		}
		return s + ": " + msg
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return &contracts.Error{Status: http.StatusBadGateway, Type: contracts.TypeServer, Code: contracts.CodeUpstreamAuth,
			Message: withMsg(fmt.Sprintf("The engine refused the engine API key aiforge holds for it (status %d); check the model's engine binding", status))}, false
	case status == http.StatusTooManyRequests:
		e := contracts.ErrOverloaded(ec.cfg.Served)
		if msg != "" {
			e.Message = "The engine is overloaded: " + msg
		}
		return e, true
	case shaped && ee.contextOverflow():
		return &contracts.Error{Status: http.StatusBadRequest, Type: contracts.TypeInvalidRequest, Code: contracts.CodeContextLengthExceeded,
			Param: promptParam(ep), Message: msg}, false
	case status == http.StatusNotFound:
		return contracts.ErrEngine(withMsg("The engine does not serve the upstream model or path (status 404); check the model's engine binding")), false
	case status >= 400 && status < 500:
		e := &contracts.Error{Status: status, Type: contracts.TypeInvalidRequest, Code: ee.Code, Param: ee.Param, Message: msg}
		if !passCodes[e.Code] {
			e.Code = contracts.CodeInvalidRequest // codes are metric labels: only known ones pass
		}
		if !shaped {
			e.Message = withMsg("The engine rejected the request")
		}
		return e, false
	case status == http.StatusNotImplemented:
		return contracts.ErrEngine(withMsg("The engine does not support this request (status 501)")), false
	case status == http.StatusInternalServerError && shaped:
		if param, ok := ee.requestFault(); ok {
			// The engine blames the request: another replica would too.
			e := &contracts.Error{Status: http.StatusBadRequest, Type: contracts.TypeInvalidRequest,
				Code: ee.Code, Param: param, Message: msg}
			if !passCodes[e.Code] {
				e.Code = contracts.CodeInvalidRequest
			}
			return e, false
		}
	}
	return contracts.ErrEngine(withMsg(fmt.Sprintf("The engine failed (status %d)", status))), true
}
