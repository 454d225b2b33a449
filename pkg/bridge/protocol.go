// Package bridge carries real-time inference requests over core NATS, from
// an edge (Client) to the worker replicas of a model (Server).
//
// The protocol, all on core NATS:
//
//   - The edge publishes a request on events.Infer(model) with a reply
//     subject under its own inbox prefix; the workers of that model share the
//     subject through a queue group. With no worker subscribed, the server
//     answers at once with a no-responders status (503).
//   - The worker answers on the reply subject with frames, in order: an "ack"
//     naming itself, then data frames (header-less messages: one SSE payload
//     each when streaming, parts of the body otherwise), then "end" (with the
//     HTTP status and content type) or "error". While it has nothing to send
//     it sends "hb" frames so the edge can tell a slow engine from a dead
//     worker.
//   - The edge sends "credit" and "cancel" on the worker's control subject.
//     A worker sends at most Window data frames beyond the credits it got:
//     a slow client slows the worker, which stops reading the engine, so
//     memory stays bounded on both sides and nothing is dropped.
//   - An error before any data frame marked retryable is retried once on
//     another replica, found by a ping to every replica of the model.
//
// Requests come in subject families (Family): FamilyInfer (events.Infer),
// which only the edge may publish on, FamilyEmbed (events.Embed), for the
// internal embedding calls of the embedder and the retriever, FamilyBatch
// for batch lines and FamilyRerank (events.Rerank) for internal rerank
// calls. A worker serves all of them for its model, with the same queue
// group and control subject, and refuses anything but the embeddings
// endpoint on FamilyEmbed and the rerank endpoint on FamilyRerank
// (contracts.CodeEndpointNotAllowed), so a credential that may embed
// cannot have chat or completions generated and billed.
package bridge

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
)

// Header names of the bridge protocol.
const (
	HdrFrame        = "Aiforge-Frame"
	HdrWorker       = "Aiforge-Worker"
	HdrRequestID    = "Aiforge-Request-Id"
	HdrTenant       = "Aiforge-Tenant"
	HdrKeyID        = "Aiforge-Key-Id"
	HdrEndpoint     = "Aiforge-Endpoint"
	HdrStream       = "Aiforge-Stream"
	HdrIncludeUsage = "Aiforge-Include-Usage"
	HdrWindow       = "Aiforge-Window"
	HdrAttempt      = "Aiforge-Attempt"
	// HdrReservations carries the budget reservations of the request (JSON
	// []events.Reservation) to the worker, which reports them back in the
	// request's usage event so they are released when it is settled.
	HdrReservations = "Aiforge-Reservations"
	// HdrBatchID names the batch of a line sent on FamilyBatch; the worker
	// reports it in the line's usage (events.UsageRecordedV3).
	HdrBatchID = "Aiforge-Batch-Id"
	// HdrAdmissionAction, HdrAdmissionCategory and HdrAdmissionScore
	// carry the edge's admission verdict of a request it served (action
	// events.AdmissionFlagged or AdmissionAllowed, the category, the score
	// as a decimal); the worker then reports it in the request's usage
	// (events.UsageRecordedV4).
	HdrAdmissionAction   = "Aiforge-Admission-Action"
	HdrAdmissionCategory = "Aiforge-Admission-Category"
	HdrAdmissionScore    = "Aiforge-Admission-Score"
	// HdrRouter and HdrRouteClass name the router and route class a
	// request went through; the worker reports them in its usage
	// (events.UsageRecordedV4).
	HdrRouter     = "Aiforge-Router"
	HdrRouteClass = "Aiforge-Route-Class"
	// HdrPromptID and HdrPromptVersion name the stored prompt template
	// and the version a request was made from; the worker reports them in
	// its usage (events.UsageRecordedV5).
	HdrPromptID      = "Aiforge-Prompt-Id"
	HdrPromptVersion = "Aiforge-Prompt-Version"
	HdrStatus        = "Aiforge-Status"
	HdrCode          = "Aiforge-Code"
	HdrRetryable     = "Aiforge-Retryable"
	HdrControl       = "Aiforge-Control"
	HdrCredit        = "Aiforge-Credit"
	HdrContentType   = "Content-Type"
	HdrTraceParent   = "traceparent"
	HdrTraceState    = "tracestate"
	// HdrRetryAfter on an error frame is how long the client should wait
	// before it tries again, in milliseconds (Error.RetryAfter).
	HdrRetryAfter = "Aiforge-Retry-After-Ms"
)

// Frame kinds.
const (
	FrameAck   = "ack"
	FrameHB    = "hb"
	FrameEnd   = "end"
	FrameError = "error"
)

// Control kinds.
const (
	ControlCancel = "cancel"
	ControlCredit = "credit"
)

// Family is a family of request subjects: the request, direct and ping
// subjects of a model.
type Family int

const (
	// FamilyInfer is events.Infer, InferDirect and InferPing: tenants'
	// inference, published by the edge. The zero value.
	FamilyInfer Family = iota
	// FamilyEmbed is events.Embed, EmbedDirect and EmbedPing: internal
	// embedding calls, served for the embeddings endpoint only.
	FamilyEmbed
	// FamilyBatch is events.BatchInfer, BatchInferDirect and
	// BatchInferPing: lines of Batch API batches, published by the batch
	// service. A worker gives a free slot to a waiting request of another
	// family before any batch line.
	FamilyBatch
	// FamilyRerank is events.Rerank, RerankDirect and RerankPing:
	// internal rerank calls (the rerank stage of vector store search and
	// file_search), served for the rerank endpoint only.
	FamilyRerank
)

// Families lists every family, in a stable order.
var Families = []Family{FamilyInfer, FamilyEmbed, FamilyBatch, FamilyRerank}

func (f Family) String() string {
	switch f {
	case FamilyInfer:
		return "infer"
	case FamilyEmbed:
		return "embed"
	case FamilyBatch:
		return "batch"
	case FamilyRerank:
		return "rerank"
	}
	return "Family(" + strconv.Itoa(int(f)) + ")"
}

func (f Family) valid() bool {
	return f == FamilyInfer || f == FamilyEmbed || f == FamilyBatch || f == FamilyRerank
}

// Subject is where requests for model are published in this family.
func (f Family) Subject(model string) string {
	switch f {
	case FamilyEmbed:
		return events.Embed(model)
	case FamilyBatch:
		return events.BatchInfer(model)
	case FamilyRerank:
		return events.Rerank(model)
	}
	return events.Infer(model)
}

// Direct addresses one replica of model in this family.
func (f Family) Direct(model, worker string) string {
	switch f {
	case FamilyEmbed:
		return events.EmbedDirect(model, worker)
	case FamilyBatch:
		return events.BatchInferDirect(model, worker)
	case FamilyRerank:
		return events.RerankDirect(model, worker)
	}
	return events.InferDirect(model, worker)
}

// Ping is answered by every replica of model in this family.
func (f Family) Ping(model string) string {
	switch f {
	case FamilyEmbed:
		return events.EmbedPing(model)
	case FamilyBatch:
		return events.BatchInferPing(model)
	case FamilyRerank:
		return events.RerankPing(model)
	}
	return events.InferPing(model)
}

// allows reports whether a worker serves endpoint on this family.
func (f Family) allows(endpoint string) bool {
	if only := f.only(); only != "" {
		return endpoint == only
	}
	return true
}

// only is the one endpoint a family serves ("" for every endpoint).
func (f Family) only() string {
	switch f {
	case FamilyEmbed:
		return events.EndpointEmbeddings
	case FamilyRerank:
		return events.EndpointRerank
	}
	return ""
}

// MaxAttempts is how often the edge sends one request: once, and once more
// on another replica after a retryable failure before any data.
const MaxAttempts = 2

// DefaultWindow is the number of data frames a worker may send ahead.
const DefaultWindow = 128

// MaxPartSize bounds one data frame of a non-streamed body, below the 1 MiB
// default max payload of a NATS server.
const MaxPartSize = 512 << 10

// Error is a failure of a bridged request. Status and Code follow the
// contracts error catalog; Body, when set, is an OpenAI-shaped error body
// from the engine to pass through unchanged.
type Error struct {
	Status    int
	Code      string
	Message   string
	Body      []byte
	Retryable bool
	// AfterData is true when data frames had already reached the caller.
	AfterData bool
	// RetryAfter, when positive, is how long the client should wait
	// before trying again (the edge's Retry-After header).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("bridge: %d %s: %s", e.Status, e.Code, e.Message) }

// ErrNoWorker is wrapped by errors returned when no worker took a request.
var ErrNoWorker = errors.New("bridge: no worker")

func errorFromFrame(m *nats.Msg) *Error {
	st, _ := strconv.Atoi(m.Header.Get(HdrStatus))
	if st == 0 {
		st = http.StatusBadGateway
	}
	e := &Error{Status: st, Code: m.Header.Get(HdrCode), Retryable: m.Header.Get(HdrRetryable) == "1"}
	if ms, err := strconv.ParseInt(m.Header.Get(HdrRetryAfter), 10, 64); err == nil && ms > 0 && ms <= int64(time.Hour/time.Millisecond) {
		e.RetryAfter = time.Duration(ms) * time.Millisecond
	}
	if len(m.Data) > 0 && m.Data[0] == '{' {
		e.Body = append([]byte(nil), m.Data...)
	} else {
		e.Message = string(m.Data)
	}
	return e
}

func boolHdr(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
