package query

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Usage query ops.
const (
	OpCompletions = "completions"
	OpEmbeddings  = "embeddings"
	OpCosts       = "costs"
	OpAudit       = "audit"
	OpLedger      = "ledger"
	OpPrices      = "prices"
	// OpCodeInterpreterSessions is the agent code sandboxes' usage report.
	OpCodeInterpreterSessions = "code_interpreter_sessions"
)

// UsageReplyHeader marks a reply sent by the usage service, so a client can
// tell it from any other answer on its inbox.
const UsageReplyHeader = "Aiforge-Usage-Reply"

// UsageRequest is the JSON body of a request on events.UsageQuery.
type UsageRequest struct {
	// Op is completions, embeddings, code_interpreter_sessions, costs,
	// audit, ledger or prices.
	Op string `json:"op"`
	// Scope restricts everything to one tenant; empty means all tenants.
	Scope string `json:"scope,omitempty"`
	// Query is the raw URL query string of the OpenAI endpoint
	// (completions, embeddings, code_interpreter_sessions, costs).
	Query string `json:"query,omitempty"`
	// From and To are unix seconds (audit, ledger): buckets whose minute
	// starts in [From, To). To defaults to now.
	From int64 `json:"from,omitempty"`
	To   int64 `json:"to,omitempty"`
}

// ErrorReply is the reply to a failed query: OpenAI's error body plus the
// HTTP status the edge should answer with.
type ErrorReply struct {
	Error  ErrorBody `json:"error"`
	Status int       `json:"status"`
}

// ErrorBody is OpenAI's error object; empty param and code are null.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// NewErrorReply is the reply that carries e.
func NewErrorReply(e *contracts.Error) ErrorReply {
	r := ErrorReply{Error: ErrorBody{Message: e.Message, Type: e.Type}, Status: e.Status}
	if e.Param != "" {
		r.Error.Param = &e.Param
	}
	if e.Code != "" {
		r.Error.Code = &e.Code
	}
	return r
}

// UsageFailure reads a usage reply: the error body and the HTTP status when
// the reply is an ErrorReply (status 500 when the service set none), ok
// false when it is an answer.
func UsageFailure(reply []byte) (body json.RawMessage, status int, ok bool) {
	var probe struct {
		Status int             `json:"status"`
		Error  json.RawMessage `json:"error"`
	}
	if json.Unmarshal(reply, &probe) != nil || len(probe.Error) == 0 {
		return nil, 0, false
	}
	if probe.Status == 0 {
		probe.Status = 500
	}
	return probe.Error, probe.Status, true
}

// AuditReply is the reply to an audit.
type AuditReply struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// LastSeq is the stream sequence both sides folded up to.
	LastSeq         uint64              `json:"last_seq"`
	EventsReplayed  int64               `json:"events_replayed"`
	BucketsCompared int                 `json:"buckets_compared"`
	Differences     []ledger.Difference `json:"differences"`
	ReplaySeconds   float64             `json:"replay_seconds"`
	EventsPerSecond float64             `json:"events_per_second"`
}

// LedgerReply is the reply to a ledger dump: minute buckets in order.
type LedgerReply struct {
	Object  string          `json:"object"`
	From    int64           `json:"from"`
	To      int64           `json:"to"`
	LastSeq uint64          `json:"last_seq"`
	Data    []ledger.Bucket `json:"data"`
}

// PricesReply is the reply to a prices query.
type PricesReply struct {
	Object    string                  `json:"object"`
	Data      []registry.PriceHistory `json:"data"`
	Discounts map[string]float64      `json:"discounts"`
}

// AskUsage sends req on events.UsageQuery and returns the usage service's
// reply body (an OpenAI page, an audit, a ledger dump, prices or an
// ErrorReply), waiting until ctx ends. It fails with nats.ErrNoResponders
// when no usage service is subscribed, and with a context error when none
// answered in time.
func AskUsage(ctx context.Context, nc *nats.Conn, req UsageRequest) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(events.UsageQuery)
	m.Data = body
	r, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("usage query %s: %w", req.Op, err)
	}
	if r.Header.Get(UsageReplyHeader) == "" {
		return nil, fmt.Errorf("usage query %s: the reply is not the usage service's", req.Op)
	}
	return r.Data, nil
}
