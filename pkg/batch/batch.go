// Package batch is what the edge and the batch service share about the
// Batch API: the batch object and its record in events.BucketBatches, the
// statuses and limits, the scheduler's configuration in
// events.BucketBatchQueues (worker classes, pools, cohorts, tenant queues)
// and the scheduler query's request and reply (events.BatchQuery).
//
// The record has two writers, always by compare-and-set: the edge creates
// it (status validating) and moves it to cancelling; the batch service
// does everything else. The batch service watches the bucket, so a record
// created while it is down is picked up when it starts.
package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Statuses of a batch, as OpenAI names them.
const (
	StatusValidating = "validating"
	StatusFailed     = "failed"
	StatusInProgress = "in_progress"
	StatusFinalizing = "finalizing"
	StatusCompleted  = "completed"
	StatusExpired    = "expired"
	StatusCancelling = "cancelling"
	StatusCancelled  = "cancelled"
)

// Final reports whether a status is final.
func Final(status string) bool {
	switch status {
	case StatusFailed, StatusCompleted, StatusExpired, StatusCancelled:
		return true
	}
	return false
}

// Endpoints a batch may target (the line's url must equal the batch's).
const (
	EndpointChatCompletions = "/v1/chat/completions"
	EndpointCompletions     = "/v1/completions"
	EndpointEmbeddings      = "/v1/embeddings"
	EndpointResponses       = "/v1/responses"
)

// Endpoints lists the endpoints a batch may target.
var Endpoints = []string{EndpointChatCompletions, EndpointCompletions, EndpointEmbeddings, EndpointResponses}

// CompletionWindow is the only completion window OpenAI accepts.
const CompletionWindow = "24h"

// Limits of one batch, as OpenAI's.
const (
	MaxLines     = 50_000
	MaxFileBytes = 200 << 20
	// MaxLineBytes bounds one line (one bus message).
	MaxLineBytes = 1 << 20
	// MaxMetadataPairs, MaxMetadataKey and MaxMetadataValue bound
	// metadata.
	MaxMetadataPairs = 16
	MaxMetadataKey   = 64
	MaxMetadataValue = 512
)

// Error codes of validation failures (Errors.Data[].Code) and of lines
// that got no answer (the error file's error.code).
const (
	CodeInvalidJSONL      = "invalid_json_line"
	CodeMissingCustomID   = "missing_custom_id"
	CodeDuplicateCustomID = "duplicate_custom_id"
	CodeInvalidMethod     = "invalid_method"
	CodeInvalidURL        = "invalid_url"
	CodeMismatchedURL     = "mismatched_endpoint"
	CodeInvalidBody       = "invalid_body"
	CodeMissingModel      = "missing_model"
	CodeModelNotFound     = "model_not_found"
	CodeLineTooLarge      = "line_too_large"
	CodeTooManyLines      = "too_many_lines"
	CodeFileTooLarge      = "file_too_large"
	CodeEmptyFile         = "empty_file"
	CodeFileNotFound      = "file_not_found"
	CodeUnsupported       = "unsupported_feature"
	CodeBatchExpired      = "batch_expired"
	CodeBatchCancelled    = "batch_cancelled"
	CodeLineFailed        = "request_failed"
)

// ErrorData is one validation error: its code, message, the parameter and
// the line (counted from 1) it concerns.
type ErrorData struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int64  `json:"line"`
}

// Errors is a failed batch's validation errors.
type Errors struct {
	Object string      `json:"object"`
	Data   []ErrorData `json:"data"`
}

// RequestCounts counts a batch's lines.
type RequestCounts struct {
	Total     int64 `json:"total"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
}

// Batch is OpenAI's batch object, byte for byte. The fields its schema has
// optional and not nullable (errors, the file ids, the timestamps) are left
// out until they have a value, never null.
type Batch struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Errors           *Errors           `json:"errors,omitempty"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id,omitempty"`
	ErrorFileID      *string           `json:"error_file_id,omitempty"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at,omitempty"`
	ExpiresAt        *int64            `json:"expires_at,omitempty"`
	FinalizingAt     *int64            `json:"finalizing_at,omitempty"`
	CompletedAt      *int64            `json:"completed_at,omitempty"`
	FailedAt         *int64            `json:"failed_at,omitempty"`
	ExpiredAt        *int64            `json:"expired_at,omitempty"`
	CancellingAt     *int64            `json:"cancelling_at,omitempty"`
	CancelledAt      *int64            `json:"cancelled_at,omitempty"`
	RequestCounts    RequestCounts     `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`
	// Model is the model the lines ask for (known once validated).
	Model string `json:"model,omitempty"`
	// Usage sums the tokens of the answered lines (set when the batch
	// ends).
	Usage *Usage `json:"usage,omitempty"`
}

// Usage is a batch's token usage, in the Responses API's words as
// OpenAI's batch object has it.
type Usage struct {
	InputTokens         int64               `json:"input_tokens"`
	InputTokensDetails  InputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int64               `json:"output_tokens"`
	OutputTokensDetails OutputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int64               `json:"total_tokens"`
}

// InputTokensDetails break input tokens down.
type InputTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// OutputTokensDetails break output tokens down.
type OutputTokensDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// AddAnswer adds the usage of one answer body: a chat completion's or
// completion's (prompt_tokens, completion_tokens), an embedding's
// (prompt_tokens) or a response's (input_tokens, output_tokens).
func (u *Usage) AddAnswer(body []byte) {
	var a struct {
		Usage *struct {
			PromptTokens        int64 `json:"prompt_tokens"`
			CompletionTokens    int64 `json:"completion_tokens"`
			InputTokens         int64 `json:"input_tokens"`
			OutputTokens        int64 `json:"output_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
			InputTokensDetails *struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
			CompletionTokensDetails *struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			} `json:"completion_tokens_details"`
			OutputTokensDetails *struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			} `json:"output_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &a) != nil || a.Usage == nil {
		return
	}
	x := a.Usage
	in, out := x.PromptTokens+x.InputTokens, x.CompletionTokens+x.OutputTokens
	u.InputTokens += in
	u.OutputTokens += out
	u.TotalTokens += in + out
	for _, d := range []*struct {
		CachedTokens int64 `json:"cached_tokens"`
	}{x.PromptTokensDetails, x.InputTokensDetails} {
		if d != nil {
			u.InputTokensDetails.CachedTokens += d.CachedTokens
		}
	}
	for _, d := range []*struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	}{x.CompletionTokensDetails, x.OutputTokensDetails} {
		if d != nil {
			u.OutputTokensDetails.ReasoningTokens += d.ReasoningTokens
		}
	}
}

// Record is what events.BucketBatches stores under Key(Tenant, ID).
type Record struct {
	Batch
	Tenant string `json:"tenant"`
	KeyID  string `json:"key_id"`
	// InputObjectKey is where the input file's bytes are.
	InputObjectKey string `json:"input_object_key"`
	// EstimatedTokens is the tokens the batch's lines are expected to
	// spend (known once validated; the input file's bytes/4 before).
	EstimatedTokens int64 `json:"estimated_tokens"`
	// Models are the model names the lines ask for (after validation).
	Models []string `json:"models,omitempty"`
	// Expiry is when unfinished lines expire (CreatedAt + 24h unless the
	// batch service is configured otherwise).
	Expiry time.Time `json:"expiry"`
}

// Key is a batch's key in events.BucketBatches.
func Key(tenant, id string) string { return "b." + tenant + "." + id }

// TenantPrefix is the key prefix of a tenant's batches (list with
// TenantPrefix(tenant)+">").
func TenantPrefix(tenant string) string { return "b." + tenant + "." }

// AllBatches matches the key of every batch.
const AllBatches = "b.>"

// Idempotency is what an Idempotency-Key of a create maps to.
type Idempotency struct {
	BatchID string `json:"batch_id"`
	// RequestSHA256 is the hash of the create request's body: the same
	// key with another body is refused.
	RequestSHA256 string    `json:"request_sha256"`
	CreatedAt     time.Time `json:"created_at"`
}

// IdempotencyKey is the bucket key of a tenant's Idempotency-Key (hashed:
// a client's key may hold any characters).
func IdempotencyKey(tenant, key string) string {
	sum := sha256.Sum256([]byte(key))
	return "idem." + tenant + "." + hex.EncodeToString(sum[:16])
}

// OutputLine is one line of a batch's output or error file.
type OutputLine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response *OutputResponse `json:"response"`
	Error    *OutputError    `json:"error"`
}

// OutputResponse is a line's HTTP answer.
type OutputResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// OutputError is why a line got no answer.
type OutputError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// InputLine is one line of a batch input file.
type InputLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}
