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
	// EndpointRerank is a rerank call (POST /v1/rerank, and the rerank
	// stage of vector store search and file_search): its tokens are
	// prompt tokens (the query and the documents read), priced like any
	// prompt of the model.
	EndpointRerank = "rerank"
)

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

// Subject implements Event.
func (u UsageRecordedV1) Subject() string { return Subject(TypeUsageRecordedV1, u.Tenant) }

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
	case EndpointChatCompletions, EndpointCompletions, EndpointEmbeddings, EndpointRerank:
	default:
		errs = append(errs, fmt.Errorf("endpoint %q is not one of chat.completions, completions, embeddings, rerank", u.Endpoint))
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

// Reservation is budget money the edge set aside at admission, to be
// released when the request's usage is settled. Key names the budget entry
// (see pkg/spend); NanoUSD is the amount in 1e-9 USD.
type Reservation struct {
	Key     string `json:"key"`
	NanoUSD int64  `json:"nano_usd"`
}

// UsageRecordedV2 is UsageRecordedV1 plus the budget reservations the edge
// made for the request, so the usage service can release them exactly when
// it settles the request's cost. Its JSON is V1's fields, flat, plus
// "reservations".
type UsageRecordedV2 struct {
	UsageRecordedV1
	Reservations []Reservation `json:"reservations,omitempty"`
}

// EventType implements Event.
func (UsageRecordedV2) EventType() string { return TypeUsageRecordedV2 }

// Subject implements Event.
func (u UsageRecordedV2) Subject() string { return Subject(TypeUsageRecordedV2, u.Tenant) }

// Validate implements Event.
func (u UsageRecordedV2) Validate() error {
	errs := []error{u.UsageRecordedV1.Validate()}
	for i, r := range u.Reservations {
		if r.Key == "" || r.NanoUSD < 0 {
			errs = append(errs, fmt.Errorf("reservations[%d]: key is required and nano_usd must not be negative", i))
		}
	}
	return errors.Join(errs...)
}

// UsageRecordedV3 is UsageRecordedV2 plus the batch a request belongs to:
// a line of a Batch API batch is priced at its model's batch discount.
// Workers publish it for batch lines only (real-time requests stay V2).
// Its JSON is V2's fields, flat, plus "batch" and "batch_id".
type UsageRecordedV3 struct {
	UsageRecordedV2
	Batch   bool   `json:"batch"`
	BatchID string `json:"batch_id"`
}

// EventType implements Event.
func (UsageRecordedV3) EventType() string { return TypeUsageRecordedV3 }

// Subject implements Event.
func (u UsageRecordedV3) Subject() string { return Subject(TypeUsageRecordedV3, u.Tenant) }

// Validate implements Event.
func (u UsageRecordedV3) Validate() error {
	errs := []error{u.UsageRecordedV2.Validate()}
	if u.Batch != (u.BatchID != "") {
		errs = append(errs, errors.New("batch and batch_id go together"))
	}
	return errors.Join(errs...)
}

// Admission actions (UsageRecordedV4.AdmissionAction,
// AdmissionVerdictV1.Action).
const (
	AdmissionAllowed = "allow"
	AdmissionFlagged = "flag"
	AdmissionBlocked = "block"
)

// Cache outcomes (UsageRecordedV4.Cache).
const (
	CacheExact   = "exact"
	CacheSimilar = "similar"
)

// UsageRecordedV4 is UsageRecordedV3 plus what admission decided: the
// verdict of a flagged (or judged) prompt, the router and route class a
// request went through, and whether the semantic cache answered it (then
// its prompt tokens are all cached and no completion was generated). Its
// JSON is V3's fields, flat, plus these.
type UsageRecordedV4 struct {
	UsageRecordedV3
	AdmissionAction   string  `json:"admission_action"`
	AdmissionCategory string  `json:"admission_category"`
	AdmissionScore    float64 `json:"admission_score"`
	Router            string  `json:"router"`
	RouteClass        string  `json:"route_class"`
	Cache             string  `json:"cache"`
}

// EventType implements Event.
func (UsageRecordedV4) EventType() string { return TypeUsageRecordedV4 }

// Subject implements Event.
func (u UsageRecordedV4) Subject() string { return Subject(TypeUsageRecordedV4, u.Tenant) }

// Validate implements Event.
func (u UsageRecordedV4) Validate() error {
	errs := []error{u.UsageRecordedV3.Validate()}
	switch u.AdmissionAction {
	case "", AdmissionAllowed, AdmissionFlagged:
	default:
		errs = append(errs, fmt.Errorf("admission_action %q is not one of allow, flag", u.AdmissionAction))
	}
	if u.AdmissionScore < 0 || u.AdmissionScore > 1 {
		errs = append(errs, errors.New("admission_score must be between 0 and 1"))
	}
	if (u.Router == "") != (u.RouteClass == "") {
		errs = append(errs, errors.New("router and route_class go together"))
	}
	switch u.Cache {
	case "", CacheExact, CacheSimilar:
	default:
		errs = append(errs, fmt.Errorf("cache %q is not one of exact, similar", u.Cache))
	}
	return errors.Join(errs...)
}

// MaxPromptRef bounds UsageRecordedV5's prompt id and version.
const MaxPromptRef = 128

// UsageRecordedV5 is UsageRecordedV4 plus the stored prompt template a
// request was made from (POST /v1/responses with "prompt"): its id and the
// version used, after labels and A/B weights chose it. Its JSON is V4's
// fields, flat, plus "prompt_id" and "prompt_version".
type UsageRecordedV5 struct {
	UsageRecordedV4
	PromptID      string `json:"prompt_id"`
	PromptVersion string `json:"prompt_version"`
}

// EventType implements Event.
func (UsageRecordedV5) EventType() string { return TypeUsageRecordedV5 }

// Subject implements Event.
func (u UsageRecordedV5) Subject() string { return Subject(TypeUsageRecordedV5, u.Tenant) }

// Validate implements Event.
func (u UsageRecordedV5) Validate() error {
	errs := []error{u.UsageRecordedV4.Validate()}
	if u.PromptID == "" || u.PromptVersion == "" {
		errs = append(errs, errors.New("prompt_id and prompt_version are required"))
	}
	if len(u.PromptID) > MaxPromptRef || len(u.PromptVersion) > MaxPromptRef {
		errs = append(errs, fmt.Errorf("prompt_id and prompt_version must be at most %d bytes", MaxPromptRef))
	}
	return errors.Join(errs...)
}

// AdmissionVerdictV1 is one admission decision: what the classifier found
// in a request and what the edge did. It never carries prompt text. Its
// envelope id is the request id.
type AdmissionVerdictV1 struct {
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	KeyID     string `json:"key_id"`
	Model     string `json:"model"`
	Endpoint  string `json:"endpoint"`
	// Action is AdmissionBlocked, AdmissionFlagged or AdmissionAllowed.
	Action     string  `json:"action"`
	Category   string  `json:"category"`
	Score      float64 `json:"score"`
	Classifier string  `json:"classifier"`
	// PII lists the kinds of personal data found (email, phone, iban,
	// card, api_key), and PIIAction what was done (mask, block, "").
	PII       []string  `json:"pii,omitempty"`
	PIIAction string    `json:"pii_action,omitempty"`
	At        time.Time `json:"at"`
}

// EventType implements Event.
func (AdmissionVerdictV1) EventType() string { return TypeAdmissionVerdictV1 }

// Subject implements Event.
func (v AdmissionVerdictV1) Subject() string { return Subject(TypeAdmissionVerdictV1, v.Tenant) }

// Validate implements Event.
func (v AdmissionVerdictV1) Validate() error {
	var errs []error
	if v.RequestID == "" || v.Tenant == "" || v.At.IsZero() {
		errs = append(errs, errors.New("request_id, tenant and at are required"))
	}
	switch v.Action {
	case AdmissionAllowed, AdmissionFlagged, AdmissionBlocked:
	default:
		errs = append(errs, fmt.Errorf("action %q is not one of allow, flag, block", v.Action))
	}
	if v.Score < 0 || v.Score > 1 {
		errs = append(errs, errors.New("score must be between 0 and 1"))
	}
	return errors.Join(errs...)
}

// UsageCorrectedV1 is a compensating event: it adds (possibly negative)
// deltas to the ledger bucket of an earlier request, which is never edited.
type UsageCorrectedV1 struct {
	CorrectionID string `json:"correction_id"`
	// RequestID is the request corrected; Tenant, KeyID, Model, Endpoint
	// and At (the original request's time) pick its ledger bucket.
	RequestID               string    `json:"request_id"`
	Tenant                  string    `json:"tenant"`
	KeyID                   string    `json:"key_id"`
	Model                   string    `json:"model"`
	Endpoint                string    `json:"endpoint"`
	At                      time.Time `json:"at"`
	DeltaRequests           int64     `json:"delta_requests"`
	DeltaPromptTokens       int64     `json:"delta_prompt_tokens"`
	DeltaCachedPromptTokens int64     `json:"delta_cached_prompt_tokens"`
	DeltaCompletionTokens   int64     `json:"delta_completion_tokens"`
	DeltaErrors             int64     `json:"delta_errors"`
	Reason                  string    `json:"reason"`
}

// EventType implements Event.
func (UsageCorrectedV1) EventType() string { return TypeUsageCorrectedV1 }

// Subject implements Event.
func (c UsageCorrectedV1) Subject() string { return Subject(TypeUsageCorrectedV1, c.Tenant) }

// Validate implements Event.
func (c UsageCorrectedV1) Validate() error {
	var errs []error
	if c.CorrectionID == "" || c.RequestID == "" || c.Tenant == "" || c.Model == "" {
		errs = append(errs, errors.New("correction_id, request_id, tenant and model are required"))
	}
	if c.At.IsZero() {
		errs = append(errs, errors.New("at is required"))
	}
	if c.Reason == "" {
		errs = append(errs, errors.New("reason is required"))
	}
	switch c.Endpoint {
	case EndpointChatCompletions, EndpointCompletions, EndpointEmbeddings, EndpointRerank:
	default:
		errs = append(errs, fmt.Errorf("endpoint %q is not one of chat.completions, completions, embeddings, rerank", c.Endpoint))
	}
	return errors.Join(errs...)
}

// BudgetAlertV1 says a key's or tenant's spend crossed its soft budget; it is
// published once per budget period.
type BudgetAlertV1 struct {
	Scope         string    `json:"scope"` // "key" or "tenant"
	ID            string    `json:"id"`
	Tenant        string    `json:"tenant"`
	Period        string    `json:"period"`
	PeriodID      string    `json:"period_id"`
	SoftBudgetUSD float64   `json:"soft_budget_usd"`
	SpentUSD      float64   `json:"spent_usd"`
	At            time.Time `json:"at"`
}

// EventType implements Event.
func (BudgetAlertV1) EventType() string { return TypeBudgetAlertV1 }

// Subject implements Event.
func (a BudgetAlertV1) Subject() string { return Subject(TypeBudgetAlertV1, a.Tenant) }

// Validate implements Event.
func (a BudgetAlertV1) Validate() error {
	var errs []error
	if a.Scope != "key" && a.Scope != "tenant" {
		errs = append(errs, fmt.Errorf("scope %q is not key or tenant", a.Scope))
	}
	if a.ID == "" || a.Tenant == "" || a.PeriodID == "" || a.At.IsZero() {
		errs = append(errs, errors.New("id, tenant, period_id and at are required"))
	}
	return errors.Join(errs...)
}
