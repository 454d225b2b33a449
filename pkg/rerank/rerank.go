// Package rerank is the rerank call over the bus, defined once for the
// edge (POST /v1/rerank, the rerank stage of vector store search and
// file_search) and the worker that forwards it to a rerank engine: the
// request and answer bodies of the events.EndpointRerank endpoint, their
// bounds, and Rerank, which asks a served rerank model (registry
// ModelKindRerank) on the rerank subject family (events.Rerank,
// bridge.FamilyRerank) so that it is routed, retried and metered like any
// other request.
//
// The body is the Jina/Cohere shape with documents as strings; the worker
// speaks the engine's own protocol (registry.Engine.RerankAPI) and answers
// Response, scores in descending order.
package rerank

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
)

// Bounds of one rerank request.
const (
	// MaxDocuments bounds the documents of one request.
	MaxDocuments = 1000
	// MaxBytes bounds the query and documents of one request together (it
	// stays well under a bus message).
	MaxBytes = 512 << 10
)

// Request is the body of a rerank request on the bus.
type Request struct {
	Model     string   `json:"model"`
	Query     string   `json:"query"`
	Documents []string `json:"documents"`
	// TopN keeps the best TopN results (0: all).
	TopN int `json:"top_n,omitempty"`
}

// Validate checks the bounds of r.
func (r Request) Validate() error {
	switch {
	case r.Query == "":
		return errors.New("query is required")
	case len(r.Documents) == 0:
		return errors.New("documents must not be empty")
	case len(r.Documents) > MaxDocuments:
		return fmt.Errorf("at most %d documents", MaxDocuments)
	case r.TopN < 0:
		return errors.New("top_n must not be negative")
	}
	n := len(r.Query)
	for _, d := range r.Documents {
		n += len(d)
	}
	if n > MaxBytes {
		return fmt.Errorf("the query and documents exceed %d bytes", MaxBytes)
	}
	return nil
}

// Result is one scored document: its index in Request.Documents.
type Result struct {
	Index          int     `json:"index"`
	RelevanceScore float64 `json:"relevance_score"`
}

// Usage is what a rerank call spent: prompt tokens (the query and the
// documents the model read). Estimated is set when the engine did not
// count them (TEI), and they were estimated from the text.
type Usage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
	Estimated    bool  `json:"estimated,omitempty"`
}

// Response is the worker's answer: results by descending score (at most
// TopN), and the usage.
type Response struct {
	Object  string   `json:"object"`
	Model   string   `json:"model"`
	Results []Result `json:"results"`
	Usage   Usage    `json:"usage"`
}

// ObjectRerank is Response.Object.
const ObjectRerank = "rerank"

// ErrRejected wraps answers that retrying cannot fix (the model refused
// the input, or answered something that is not a rerank answer).
var ErrRejected = errors.New("rerank: rejected")

// NewClient returns the bridge client Rerank needs: cfg on the rerank
// subject family (bridge.FamilyRerank, whatever cfg.Family says).
func NewClient(nc *nats.Conn, cfg bridge.ClientConfig) (*bridge.Client, error) {
	cfg.Family = bridge.FamilyRerank
	return bridge.NewClient(nc, cfg)
}

// Call names who spends the tokens, and what is reranked.
type Call struct {
	Request
	Tenant string
	KeyID  string
	// Header, when set, goes to the worker (trace context).
	Header nats.Header
}

// Rerank asks c (from NewClient) to score call's documents. Errors
// wrapping ErrRejected are permanent; a *bridge.Error says why otherwise.
func Rerank(ctx context.Context, c *bridge.Client, call Call) (Response, error) {
	if err := call.Validate(); err != nil {
		return Response{}, fmt.Errorf("%w: %v", ErrRejected, err)
	}
	body, _ := json.Marshal(call.Request)
	var out bytes.Buffer
	res, err := c.Do(ctx, &bridge.OutRequest{
		Model: call.Model, ID: "rr_" + events.NewID()[:24], Tenant: call.Tenant, KeyID: call.KeyID,
		Endpoint: events.EndpointRerank, Body: body, Header: call.Header,
	}, func(p []byte) error { out.Write(p); return nil })
	if err != nil {
		var be *bridge.Error
		if errors.As(err, &be) && be.Status >= 400 && be.Status < 500 && be.Status != 429 {
			return Response{}, fmt.Errorf("%w: the model %q refused the input: %w", ErrRejected, call.Model, err)
		}
		return Response{}, err
	}
	if res.Status != 200 {
		return Response{}, fmt.Errorf("rerank: status %d", res.Status)
	}
	return Parse(out.Bytes(), len(call.Documents))
}

// Parse reads a worker's answer for n documents, checking every index.
func Parse(body []byte, n int) (Response, error) {
	var r Response
	if err := json.Unmarshal(body, &r); err != nil {
		return Response{}, fmt.Errorf("%w: not a rerank answer: %v", ErrRejected, err)
	}
	seen := make(map[int]bool, len(r.Results))
	for _, x := range r.Results {
		if x.Index < 0 || x.Index >= n || seen[x.Index] {
			return Response{}, fmt.Errorf("%w: result index %d out of range or repeated", ErrRejected, x.Index)
		}
		seen[x.Index] = true
	}
	return r, nil
}
