package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// BatchLineV1 is one request line of a validated batch: durable work that
// the batch dispatcher takes in fair-share order and sends to the model's
// workers on the batch family (BatchInfer). Its envelope id is LineID, so
// re-enqueuing a batch after a crash stores each line once.
type BatchLineV1 struct {
	BatchID string `json:"batch_id"`
	Tenant  string `json:"tenant"`
	KeyID   string `json:"key_id"`
	// Index is the line's position in the input file, from 0.
	Index    int64  `json:"index"`
	CustomID string `json:"custom_id"`
	// URL is the line's endpoint path ("/v1/chat/completions", ...).
	URL   string `json:"url"`
	Model string `json:"model"`
	// Body is the request body as the line gave it.
	Body json.RawMessage `json:"body"`
	// EstimatedTokens is what the line is expected to spend (prompt
	// estimate plus max tokens), for token quotas and enqueued limits.
	EstimatedTokens int64 `json:"estimated_tokens"`
}

// LineID is the id of line index of a batch: its envelope id, its request
// id at the worker and the usage event's id, so a line run twice is billed
// once.
func LineID(batch string, index int64) string { return fmt.Sprintf("%s-l%d", batch, index) }

// EventType implements Event.
func (BatchLineV1) EventType() string { return TypeBatchLineV1 }

// Subject implements Event.
func (l BatchLineV1) Subject() string { return Subject(TypeBatchLineV1, l.BatchID) }

// Validate implements Event.
func (l BatchLineV1) Validate() error {
	var errs []error
	if l.BatchID == "" || l.Tenant == "" || l.Model == "" || l.URL == "" {
		errs = append(errs, errors.New("batch_id, tenant, model and url are required"))
	}
	if l.Index < 0 {
		errs = append(errs, errors.New("index must not be negative"))
	}
	if l.CustomID == "" {
		errs = append(errs, errors.New("custom_id is required"))
	}
	if len(l.Body) == 0 {
		errs = append(errs, errors.New("body is required"))
	}
	return errors.Join(errs...)
}

// BatchResultV1 is one line's outcome: the engine's answer (StatusCode and
// Body) or an error (ErrorCode, ErrorMessage). Its envelope id is the
// line's LineID plus "-result" (the line itself holds LineID in the same
// stream's duplicate window), and the file writer keeps the first result
// of each index, so a line reported twice appears once in the batch's
// files.
type BatchResultV1 struct {
	BatchID  string `json:"batch_id"`
	Tenant   string `json:"tenant"`
	Index    int64  `json:"index"`
	CustomID string `json:"custom_id"`
	// RequestID is the id the worker served the line under.
	RequestID string `json:"request_id"`
	// StatusCode and Body are the HTTP answer, for a line that got one
	// (also a 4xx from the engine: it goes to the error file).
	StatusCode int             `json:"status_code,omitempty"`
	Body       json.RawMessage `json:"body,omitempty"`
	// BodyObject, when set, names an object in the object store holding a
	// body too large for one bus message.
	BodyObject string `json:"body_object,omitempty"`
	// ErrorCode and ErrorMessage describe a line that got no HTTP answer
	// (batch_expired, batch_cancelled, a worker that never answered); with
	// a StatusCode they are the answer's error, for the logs.
	ErrorCode    string `json:"error_code,omitempty"`
	ErrorMessage string `json:"error_message,omitempty"`
	// Tokens is what the line spent (prompt plus completion), for the
	// scheduler's token accounting.
	Tokens     int64     `json:"tokens,omitempty"`
	FinishedAt time.Time `json:"finished_at"`
}

// EventType implements Event.
func (BatchResultV1) EventType() string { return TypeBatchResultV1 }

// Subject implements Event.
func (r BatchResultV1) Subject() string { return Subject(TypeBatchResultV1, r.BatchID) }

// Succeeded reports whether the line goes to the output file: an HTTP
// answer of 2xx.
func (r BatchResultV1) Succeeded() bool { return r.StatusCode >= 200 && r.StatusCode < 300 }

// Validate implements Event.
func (r BatchResultV1) Validate() error {
	var errs []error
	if r.BatchID == "" || r.Tenant == "" || r.CustomID == "" {
		errs = append(errs, errors.New("batch_id, tenant and custom_id are required"))
	}
	if r.Index < 0 {
		errs = append(errs, errors.New("index must not be negative"))
	}
	if r.StatusCode == 0 && r.ErrorCode == "" {
		errs = append(errs, errors.New("status_code or error_code is required"))
	}
	if r.FinishedAt.IsZero() {
		errs = append(errs, errors.New("finished_at is required"))
	}
	return errors.Join(errs...)
}

// BatchFinishedV1 says a batch reached a final status: completed, failed,
// expired or cancelled. Its envelope id is the batch id plus the status;
// the webhook of the batch's tenant is delivered from it.
type BatchFinishedV1 struct {
	BatchID string `json:"batch_id"`
	Tenant  string `json:"tenant"`
	Status  string `json:"status"`
	// Completed and Failed are the final request counts.
	Completed int64     `json:"completed"`
	Failed    int64     `json:"failed"`
	At        time.Time `json:"at"`
}

// EventType implements Event.
func (BatchFinishedV1) EventType() string { return TypeBatchFinishedV1 }

// Subject implements Event.
func (f BatchFinishedV1) Subject() string { return Subject(TypeBatchFinishedV1, f.Tenant) }

// Validate implements Event.
func (f BatchFinishedV1) Validate() error {
	var errs []error
	if f.BatchID == "" || f.Tenant == "" {
		errs = append(errs, errors.New("batch_id and tenant are required"))
	}
	switch f.Status {
	case "completed", "failed", "expired", "cancelled":
	default:
		errs = append(errs, fmt.Errorf("status %q is not one of completed, failed, expired, cancelled", f.Status))
	}
	if f.At.IsZero() {
		errs = append(errs, errors.New("at is required"))
	}
	return errors.Join(errs...)
}
