// Package engine is the worker's client of one OpenAI-compatible engine
// (vLLM, SGLang, llama.cpp's llama-server, Ollama, TEI): the identity and
// health check, forwarding a bus request and relaying the answer (whole or
// SSE) with the served model name put back, the usage the engine reports,
// and vLLM's runtime LoRA API. It knows nothing of the bus beyond the
// bridge's request and response writer.
package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/tokens"
)

// Endpoint is an OpenAI endpoint served by workers.
type Endpoint int

// The endpoints, in the order of their names.
const (
	Chat Endpoint = iota
	Completions
	Embeddings
	NumEndpoints
)

var endpointNames = [NumEndpoints]string{events.EndpointChatCompletions, events.EndpointCompletions, events.EndpointEmbeddings}

// String is the endpoint's name in usage events.
func (e Endpoint) String() string { return endpointNames[e] }

// ParseEndpoint returns the endpoint named name (a bridge request's
// Endpoint).
func ParseEndpoint(name string) (Endpoint, bool) {
	for i, n := range endpointNames {
		if n == name {
			return Endpoint(i), true
		}
	}
	return 0, false
}

// Outcome is how a request ended (its usage status).
type Outcome int

// The outcomes, in the order of their usage statuses.
const (
	OutcomeOK Outcome = iota
	OutcomeError
	OutcomeCanceled
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{events.UsageStatusOK, events.UsageStatusError, events.UsageStatusCanceled}

// String is the outcome's usage status.
func (o Outcome) String() string { return outcomeNames[o] }

// Error codes of the worker beyond the contracts catalog.
const (
	CodeCanceled      = "canceled"
	CodeClientStalled = "client_stalled"
)

// Usage is an OpenAI usage object.
type Usage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// Call is the state of one request: what the caller sets before Forward,
// and what Forward found.
type Call struct {
	Req      *bridge.Request
	Endpoint Endpoint
	Stream   bool
	Started  time.Time

	Outcome   Outcome
	Code      string
	Retryable bool // the failure was marked retryable before any data

	// Usage is the engine's final count when UsageKnown; otherwise
	// Estimate says what is owed.
	Usage      Usage
	UsageKnown bool
	Chunks     int64 // forwarded chunks carrying content (the estimate)
	TTFT       time.Duration

	// partial is the latest usage of a stream seen on a chunk with choices:
	// not a final count (Ollama puts zeros on every completion chunk, vLLM's
	// continuous_usage_stats a running count) until [DONE] confirms it was
	// the last (llama-server's layout); it refines Estimate.
	partial     Usage
	partialSeen bool
}

func (c *Call) setUsage(u *Usage) {
	if u == nil {
		return
	}
	c.Usage = *u
	c.UsageKnown = true
}

// zero reports whether every count of u is zero.
func (u *Usage) zero() bool { return u.PromptTokens == 0 && u.CompletionTokens == 0 }

// credible reports whether u can be a stream's final count: an all-zero
// usage after content was streamed is a placeholder (a model that wrote
// text generated tokens, and read a prompt), not a count.
func (c *Call) credible(u *Usage) bool { return !(u.zero() && c.Chunks > 0) }

// Estimate is what a call whose engine gave no final usage owes, for a
// usage event marked estimated: completion tokens are the content chunks
// forwarded (one token each, or the engine's running count when it sent a
// larger one); prompt tokens are the engine's running count when it sent
// one, else tokens.EstimatePrompt of the request (the engine read the prompt
// even if the stream was cut).
func (c *Call) Estimate() Usage {
	u := Usage{CompletionTokens: c.Chunks}
	if c.partialSeen {
		u.CompletionTokens = max(u.CompletionTokens, c.partial.CompletionTokens)
		u.PromptTokens = c.partial.PromptTokens
	}
	if u.PromptTokens <= 0 && c.Req != nil {
		u.PromptTokens = tokens.EstimatePrompt(c.Endpoint.String(), c.Req.Body)
	}
	return u
}

// Observer takes one observation (a prometheus.Observer).
type Observer interface{ Observe(float64) }

type noObserver struct{}

func (noObserver) Observe(float64) {}

// Config binds a client to one engine.
type Config struct {
	// Served is the model name clients ask for; answers carry it.
	Served string
	// Engine is the binding: BaseURL (ends with /v1, no trailing slash),
	// Model (the upstream name), APIKey (optional).
	Engine registry.Engine
	// RequestTimeout bounds one forwarded request; required.
	// Engine.RequestTimeout, when set, takes its place.
	RequestTimeout time.Duration
	// TTFTTimeout bounds the wait for a stream's first chunk, from when the
	// request is sent to the engine; 0 is no bound. Engine.TTFTTimeout,
	// when set, takes its place. Non-streamed requests are bounded by the
	// request timeout only (an engine sends nothing before it finishes).
	TTFTTimeout time.Duration
	// HTTPClient makes the requests; required.
	HTTPClient *http.Client
	// TTFT and ITL observe the time to the first chunk of a stream and
	// between chunks, in seconds; optional.
	TTFT, ITL Observer
}

// Client talks to one engine for one served model.
type Client struct {
	cfg    Config
	client *http.Client
	ttft   Observer
	itl    Observer

	// Precomputed per binding.
	urls         [NumEndpoints]string
	modelsURL    string
	authHeader   string // "Bearer <key>" or ""; never logged
	upstreamJSON json.RawMessage
	servedJSON   json.RawMessage
	// modelNeedle/modelRepl rewrite `"model":"<upstream>"` into
	// `"model":"<served>"` in responses; nil when the names are equal.
	modelNeedle []byte
	modelRepl   []byte
}

// New returns a client of cfg's engine.
func New(cfg Config) *Client {
	if d := cfg.Engine.RequestTimeout.D(); d > 0 {
		cfg.RequestTimeout = d
	}
	if d := cfg.Engine.TTFTTimeout.D(); d > 0 {
		cfg.TTFTTimeout = d
	}
	c := &Client{cfg: cfg, client: cfg.HTTPClient, ttft: cfg.TTFT, itl: cfg.ITL}
	if c.ttft == nil {
		c.ttft = noObserver{}
	}
	if c.itl == nil {
		c.itl = noObserver{}
	}
	base := cfg.Engine.BaseURL
	c.urls = [...]string{base + "/chat/completions", base + "/completions", base + "/embeddings"}
	c.modelsURL = base + "/models"
	if cfg.Engine.APIKey != "" {
		c.authHeader = "Bearer " + cfg.Engine.APIKey
	}
	c.upstreamJSON = jsonString(cfg.Engine.Model)
	c.servedJSON = jsonString(cfg.Served)
	if cfg.Served != cfg.Engine.Model {
		c.modelNeedle = append([]byte(`"model":`), c.upstreamJSON...)
		c.modelRepl = append([]byte(`"model":`), c.servedJSON...)
	}
	return c
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// ErrUnreachable marks check failures worth waiting out: the engine cannot
// be reached, or answers 5xx as engines do while loading.
var ErrUnreachable = errors.New("engine unreachable")

// Check asks the engine which models it serves: its readiness alone does
// not prove which weights it loaded. It fails unless the upstream model is
// listed.
func (c *Client) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	served := c.cfg.Served
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.modelsURL, nil)
	if err != nil {
		return fmt.Errorf("worker %s: engine request: %w", served, err)
	}
	if c.authHeader != "" {
		req.Header.Set("Authorization", c.authHeader)
	}
	req.Header.Set("Accept", "application/json")
	where := RedactURL(c.modelsURL)
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("worker %s: %w: GET %s: %w", served, ErrUnreachable, where, UnwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("worker %s: %w: GET %s: reading the answer: %w", served, ErrUnreachable, where, err)
	}
	switch {
	case resp.StatusCode >= 500:
		return fmt.Errorf("worker %s: %w: GET %s answered %d", served, ErrUnreachable, where, resp.StatusCode)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("worker %s: engine at %s refused the engine API key (status %d)", served, where, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("worker %s: GET %s answered %d; is the base URL right (it ends with /v1)?", served, where, resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("worker %s: GET %s did not answer an OpenAI model list: %w", served, where, err)
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID == c.cfg.Engine.Model {
			return nil
		}
		ids = append(ids, m.ID)
	}
	listed := "no models"
	if len(ids) > 0 {
		listed = "[" + strings.Join(ids, ", ") + "]"
	}
	return fmt.Errorf("worker %s: engine at %s does not serve upstream model %q; it lists %s",
		served, RedactURL(c.cfg.Engine.BaseURL), c.cfg.Engine.Model, listed)
}

// RedactURL hides credentials embedded in a URL, for messages and logs.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// UnwrapURLError drops the *url.Error wrapper, whose text repeats the URL.
func UnwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}
