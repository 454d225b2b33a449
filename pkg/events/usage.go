package events

import (
	"errors"
	"fmt"
	"time"
)

// Usage statuses.
const (
	UsageStatusOK       = "ok"
	UsageStatusError    = "error"
	UsageStatusCanceled = "canceled"
)

// Endpoints that spend tokens.
const (
	EndpointChatCompletions = "chat.completions"
	EndpointCompletions     = "completions"
	EndpointEmbeddings      = "embeddings"
)

// TypeUsageRecordedV1 is the type name of UsageRecordedV1.
const TypeUsageRecordedV1 = "aiforge.usage.recorded.v1"

// UsageRecordedV1 is one request's token spend. Its envelope id is the
// request id, so a request is recorded once however often it is published.
// Shipped: never change its fields; add UsageRecordedV2 beside it.
type UsageRecordedV1 struct {
	RequestID          string `json:"request_id"`
	Tenant             string `json:"tenant"`
	KeyID              string `json:"key_id"`
	Model              string `json:"model"`
	Endpoint           string `json:"endpoint"`
	Stream             bool   `json:"stream"`
	PromptTokens       int64  `json:"prompt_tokens"`
	CachedPromptTokens int64  `json:"cached_prompt_tokens"`
	CompletionTokens   int64  `json:"completion_tokens"`
	// Estimated is true when the engine did not report usage and aiforge
	// counted what it saw (for example streamed chunks before a failure).
	Estimated  bool      `json:"estimated"`
	Status     string    `json:"status"`
	ErrorCode  string    `json:"error_code,omitempty"`
	LatencyMS  float64   `json:"latency_ms"`
	TTFTMS     float64   `json:"ttft_ms"`
	WorkerID   string    `json:"worker_id,omitempty"`
	Reporter   string    `json:"reporter"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
}

// EventType implements Event.
func (UsageRecordedV1) EventType() string { return TypeUsageRecordedV1 }

// Validate implements Event; it never mutates.
func (u UsageRecordedV1) Validate() error {
	var errs []error
	if u.RequestID == "" {
		errs = append(errs, errors.New("request_id is required"))
	}
	if u.Tenant == "" {
		errs = append(errs, errors.New("tenant is required"))
	}
	if u.Model == "" {
		errs = append(errs, errors.New("model is required"))
	}
	switch u.Endpoint {
	case EndpointChatCompletions, EndpointCompletions, EndpointEmbeddings:
	default:
		errs = append(errs, fmt.Errorf("endpoint %q is not one of chat.completions, completions, embeddings", u.Endpoint))
	}
	switch u.Status {
	case UsageStatusOK, UsageStatusError, UsageStatusCanceled:
	default:
		errs = append(errs, fmt.Errorf("status %q is not one of ok, error, canceled", u.Status))
	}
	if u.PromptTokens < 0 || u.CachedPromptTokens < 0 || u.CompletionTokens < 0 {
		errs = append(errs, errors.New("token counts must not be negative"))
	}
	if u.CachedPromptTokens > u.PromptTokens {
		errs = append(errs, errors.New("cached_prompt_tokens exceeds prompt_tokens"))
	}
	if u.Reporter == "" {
		errs = append(errs, errors.New("reporter is required"))
	}
	if u.StartedAt.IsZero() || u.FinishedAt.IsZero() {
		errs = append(errs, errors.New("started_at and finished_at are required"))
	} else if u.FinishedAt.Before(u.StartedAt) {
		errs = append(errs, errors.New("finished_at is before started_at"))
	}
	return errors.Join(errs...)
}

// UsageSubject returns the subject of a tenant's usage events.
func UsageSubject(tenant string) string { return fmt.Sprintf(UsageRecordedT, Token(tenant)) }
