// Package contracts holds the synchronous contracts of aiforge: the OpenAI
// error catalog and SSE framing shared by the edge and the workers.
package contracts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Error types, as OpenAI names them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
)

// Stable error codes. Clients match on these; never rename one.
const (
	CodeInvalidAPIKey    = "invalid_api_key"
	CodeKeyRevoked       = "api_key_revoked"
	CodeModelNotAllowed  = "model_not_allowed"
	CodeModelNotFound    = "model_not_found"
	CodeInvalidRequest   = "invalid_request"
	CodeInvalidJSON      = "invalid_json"
	CodeMissingParam     = "missing_required_parameter"
	CodeInvalidType      = "invalid_type"
	CodeBodyTooLarge     = "request_too_large"
	CodeRateLimited      = "rate_limit_exceeded"
	CodeBudgetExceeded   = "budget_exceeded"
	CodeNoWorker         = "model_unavailable"
	CodeEngineError      = "engine_error"
	CodeEngineTimeout    = "engine_timeout"
	CodeWorkerLost       = "worker_lost"
	CodeShuttingDown     = "shutting_down"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeInternal         = "internal_error"
	CodeOverloaded       = "overloaded"
	// CodeModelWarming (503, with Retry-After): the model's engine was
	// asleep (scaled to zero) and did not become healthy within the
	// worker's cold start wait; it goes on starting, so retry after the
	// Retry-After delay.
	CodeModelWarming = "model_warming"
	// CodeStorageUnavailable: the server has no object store configured,
	// so the APIs that keep files cannot work.
	CodeStorageUnavailable = "storage_unavailable"
	// CodeServiceUnavailable: a backing service (usage, retriever) did not
	// answer; the request can be retried.
	CodeServiceUnavailable = "service_unavailable"
	// CodeConcurrencyLimit (429): the key or its tenant already has its
	// maximum of requests in flight.
	CodeConcurrencyLimit = "concurrency_limit_exceeded"
	// CodeRequestTimeout (408): the request body arrived too slowly.
	CodeRequestTimeout = "request_timeout"
	// CodeHeadersTooLarge (431): the request headers are over the limit.
	CodeHeadersTooLarge = "request_headers_too_large"
	// CodeEndpointNotAllowed (403): an internal embedding call asked a
	// worker for another endpoint (the embedding subject family serves
	// embeddings only).
	CodeEndpointNotAllowed = "endpoint_not_allowed"
	// CodeContextLengthExceeded (400): the prompt (with max_tokens) does
	// not fit the model's context window; OpenAI's code, param "messages"
	// (or "prompt"). Before the first byte the edge tries the model's
	// fallbacks first.
	CodeContextLengthExceeded = "context_length_exceeded"
	// CodeUpstreamAuth (502): the engine or provider refused the engine
	// API key aiforge holds for it: a platform misconfiguration, never the
	// client's key.
	CodeUpstreamAuth = "upstream_auth_failed"
	// CodeModelKindMismatch (400): the model is of another kind than the
	// API serves: a rerank model asked for chat, completions or
	// embeddings, or a generation model for /v1/rerank or as a ranker.
	CodeModelKindMismatch = "model_kind_mismatch"
	// CodeTooManyDocuments (400): a rerank over more documents, or more
	// bytes, than one request may hold (pkg/rerank.MaxDocuments,
	// MaxBytes).
	CodeTooManyDocuments = "too_many_documents"
	// CodeInvalidValue (400): a parameter is not one of the values it may
	// take (OpenAI's code for an enum mismatch).
	CodeInvalidValue = "invalid_value"
	// CodeStringTooLong and CodeTooManyProperties (400): a string or an
	// object (metadata) over its bound, OpenAI's codes.
	CodeStringTooLong     = "string_above_max_length"
	CodeTooManyProperties = "object_above_max_properties"
	// CodeInvalidFilePurpose (400): a file given to an API that needs
	// another purpose (a batch's input file must have purpose batch).
	CodeInvalidFilePurpose = "invalid_file_purpose"
	// CodeBatchEnqueuedLimit (429): a batch would take its tenant past
	// its limit of enqueued (unfinished) batch lines or tokens; refused
	// before anything is written. Retrying at once does not help.
	CodeBatchEnqueuedLimit = "batch_enqueued_limit_exceeded"
	// CodeIdempotencyKeyReused (409): an Idempotency-Key already used for
	// a request with another body.
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	// CodeBatchNotCancellable (409): a batch that is finalizing or final.
	CodeBatchNotCancellable = "batch_not_cancellable"
	// CodeMaliciousPrompt (403): admission judged the prompt an injection,
	// jailbreak, system prompt extraction, exfiltration or destructive
	// command, and the tenant's (or key's) policy blocks those; no worker
	// saw the request. The message names the category, never the prompt.
	CodeMaliciousPrompt = "malicious_prompt"
	// CodePIIDetected (400): the prompt holds personal data (emails, phone
	// numbers, IBANs, card numbers, API keys) and the policy blocks those.
	// The message names the kinds, never the values.
	CodePIIDetected = "pii_detected"
)

// Error is an API error in OpenAI's shape with its HTTP status.
type Error struct {
	Status  int
	Message string
	Type    string
	Param   string
	Code    string
	// RetryAfter, when positive, is sent as the Retry-After header, in
	// whole seconds rounded up: how long the client should wait before it
	// tries again. A 503 without one gets DefaultRetryAfter (see Write).
	RetryAfter time.Duration
}

// DefaultRetryAfter is the Retry-After of a 503 that names none: a 503 is
// an answer to retry (OpenAI's SDKs retry it; load balancers move on), and
// the header tells when.
const DefaultRetryAfter = time.Second

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s (%s): %s", e.Status, e.Code, e.Param, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

type wireError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Body returns {"error":{"message","type","param","code"}}; empty param and
// code are null, as OpenAI sends them.
func (e *Error) Body() []byte {
	w := wireError{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		w.Param = &e.Param
	}
	if e.Code != "" {
		w.Code = &e.Code
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Error wireError `json:"error"`
	}{w})
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// ParseError reads an OpenAI-shaped error body; ok is false when body is not
// one.
func ParseError(status int, body []byte) (*Error, bool) {
	var w struct {
		Error *struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Param   *string         `json:"param"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &w); err != nil || w.Error == nil || w.Error.Message == "" {
		return nil, false
	}
	e := &Error{Status: status, Message: w.Error.Message, Type: w.Error.Type}
	if w.Error.Param != nil {
		e.Param = *w.Error.Param
	}
	var code string
	if json.Unmarshal(w.Error.Code, &code) == nil {
		e.Code = code
	} else if n, err := strconv.Atoi(string(w.Error.Code)); err == nil {
		e.Code = strconv.Itoa(n)
	}
	if e.Type == "" {
		e.Type = TypeServer
	}
	return e, true
}

// Write sends e as the response. Its RetryAfter, if any, is the
// Retry-After header; else a Retry-After the handler set is kept, and a 503
// without one gets DefaultRetryAfter.
func Write(w http.ResponseWriter, e *Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	SetRetryAfter(h, e.Status, e.RetryAfter)
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.Body())
}

// SetRetryAfter sets the Retry-After header of an error answer as Write
// does: d when positive, else a Retry-After already set is kept, and a 503
// without one gets DefaultRetryAfter.
func SetRetryAfter(h http.Header, status int, d time.Duration) {
	switch {
	case d > 0:
		h.Set("Retry-After", retryAfterSeconds(d))
	case h.Get("Retry-After") == "" && status == http.StatusServiceUnavailable:
		h.Set("Retry-After", retryAfterSeconds(DefaultRetryAfter))
	}
}

// retryAfterSeconds is d in whole seconds, rounded up: Retry-After's
// delay-seconds.
func retryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// The catalog. Messages never contain secrets.

func ErrInvalidAPIKey() *Error {
	return &Error{Status: http.StatusUnauthorized, Type: TypeInvalidRequest, Code: CodeInvalidAPIKey,
		Message: "Incorrect or missing API key. Pass a valid key as 'Authorization: Bearer <key>'."}
}

func ErrKeyRevoked() *Error {
	return &Error{Status: http.StatusUnauthorized, Type: TypeInvalidRequest, Code: CodeKeyRevoked,
		Message: "The API key used for this request has been revoked."}
}

func ErrModelNotAllowed(model string) *Error {
	return &Error{Status: http.StatusForbidden, Type: TypePermission, Param: "model", Code: CodeModelNotAllowed,
		Message: fmt.Sprintf("This API key is not allowed to use the model '%s'.", model)}
}

func ErrModelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: "model", Code: CodeModelNotFound,
		Message: fmt.Sprintf("The model '%s' does not exist or you do not have access to it.", model)}
}

func ErrBadRequest(param, code, msg string) *Error {
	if code == "" {
		code = CodeInvalidRequest
	}
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Code: code, Message: msg}
}

func ErrBodyTooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: CodeBodyTooLarge,
		Message: fmt.Sprintf("The request body exceeds the limit of %d bytes.", limit)}
}

func ErrNoWorker(model string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: CodeNoWorker,
		Message: fmt.Sprintf("No worker is serving the model '%s' right now. Retry later.", model)}
}

// ErrModelWarming answers a request that waited for an asleep engine to
// start longer than the cold start wait; retryAfter is the expected rest
// of the start (at least a second).
func ErrModelWarming(model string, retryAfter time.Duration) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: CodeModelWarming,
		RetryAfter: max(retryAfter, time.Second),
		Message:    fmt.Sprintf("The model '%s' was scaled to zero and is starting. Retry after the Retry-After delay.", model)}
}

func ErrEngine(msg string) *Error {
	return &Error{Status: http.StatusBadGateway, Type: TypeServer, Code: CodeEngineError, Message: msg}
}

func ErrEngineTimeout(msg string) *Error {
	return &Error{Status: http.StatusGatewayTimeout, Type: TypeServer, Code: CodeEngineTimeout, Message: msg}
}

func ErrWorkerLost() *Error {
	return &Error{Status: http.StatusBadGateway, Type: TypeServer, Code: CodeWorkerLost,
		Message: "The worker serving this request stopped answering."}
}

func ErrShuttingDown() *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: CodeShuttingDown,
		Message: "The server is shutting down. Retry on another replica."}
}

func ErrNotFound(what string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: CodeNotFound, Message: what}
}

func ErrMethodNotAllowed(method string) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Type: TypeInvalidRequest, Code: CodeMethodNotAllowed,
		Message: fmt.Sprintf("Method %s is not allowed here.", method)}
}

func ErrConflict(msg string) *Error {
	return &Error{Status: http.StatusConflict, Type: TypeInvalidRequest, Code: CodeConflict, Message: msg}
}

func ErrInternal(msg string) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: CodeInternal, Message: msg}
}

func ErrOverloaded(model string) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: CodeOverloaded,
		Message: fmt.Sprintf("The workers of '%s' are at capacity. Retry later.", model)}
}

// ErrStorageUnavailable answers a request for the Files, Vector stores or
// model upload APIs on a server without an object store.
func ErrStorageUnavailable() *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: CodeStorageUnavailable,
		Message: "File storage is not configured on this server."}
}

// ErrServiceUnavailable answers when the backing service (e.g. "usage",
// "retriever") is not running or did not answer in time.
func ErrServiceUnavailable(service, why string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: CodeServiceUnavailable,
		Message: fmt.Sprintf("The %s service %s. Retry later.", service, why)}
}
