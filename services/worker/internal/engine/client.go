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
	"slices"
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
	Rerank
	NumEndpoints
)

var endpointNames = [NumEndpoints]string{events.EndpointChatCompletions, events.EndpointCompletions, events.EndpointEmbeddings, events.EndpointRerank}

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

	// TraceFinish asks Forward to collect the choices' finish reasons in
	// FinishReasons (for a span's gen_ai.response.finish_reasons); off, the
	// answer is not scanned for them.
	TraceFinish   bool
	FinishReasons []string

	// partial is the latest usage of a stream seen on a chunk with choices:
	// not a final count (Ollama puts zeros on every completion chunk, vLLM's
	// continuous_usage_stats a running count) until [DONE] confirms it was
	// the last (llama-server's layout); it refines Estimate.
	partial     Usage
	partialSeen bool
}

var finishKey = []byte(`"finish_reason":"`)

// maxFinishReasons bounds FinishReasons (one per choice; n is bounded by
// the engine, not by aiforge).
const maxFinishReasons = 8

// noteFinish adds the finish reasons in p (a chunk or a whole answer),
// each once, to c.FinishReasons.
func (c *Call) noteFinish(p []byte) {
	for len(c.FinishReasons) < maxFinishReasons {
		i := bytes.Index(p, finishKey)
		if i < 0 {
			return
		}
		p = p[i+len(finishKey):]
		j := bytes.IndexByte(p, '"')
		if j < 0 || j > 32 {
			return
		}
		r := string(p[:j])
		p = p[j:]
		if !slices.Contains(c.FinishReasons, r) {
			c.FinishReasons = append(c.FinishReasons, r)
		}
	}
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
	// Model (the upstream name), APIKey (optional), RerankAPI (a rerank
	// model's protocol).
	Engine registry.Engine
	// Kind is the model's kind (registry.ModelKindRerank: the engine
	// serves rerank only, in Engine.RerankAPI's protocol).
	Kind string
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
	c.urls = [...]string{base + "/chat/completions", base + "/completions", base + "/embeddings", base + "/rerank"}
	if cfg.Engine.RerankAPI == registry.RerankAPITEI {
		c.urls[Rerank] = strings.TrimSuffix(base, "/v1") + "/rerank"
	}
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

// The kinds of check failures (errors.Is): ErrUnreachable is worth
// waiting out (the engine cannot be reached, or answers 5xx as engines do
// while loading); ErrUnauthorized: the engine refused the engine API key;
// ErrMisnamed: the engine answers but does not serve the upstream model
// (or does not list models where the base URL says).
var (
	ErrUnreachable  = errors.New("engine unreachable")
	ErrUnauthorized = errors.New("engine refused the engine API key")
	ErrMisnamed     = errors.New("engine does not serve the upstream model")
)

// checkError is a check failure of a kind (ErrUnauthorized, ErrMisnamed)
// whose message says it in its own words.
type checkError struct {
	kind error
	err  error
}

func (e *checkError) Error() string   { return e.err.Error() }
func (e *checkError) Unwrap() []error { return []error{e.kind, e.err} }

func kindError(kind error, format string, args ...any) error {
	return &checkError{kind: kind, err: fmt.Errorf(format, args...)}
}

// Report is what a full check (Verify) learned about the engine.
type Report struct {
	// UpstreamVerified: the engine lists the upstream model.
	UpstreamVerified bool
	// KeyVerified: an authenticated call with the engine key got past the
	// engine's key check. False when the binding has no key, or when no
	// endpoint could tell (an engine serving none of the probed ones).
	KeyVerified bool
	// TotalSlots is how many requests the engine serves at once, as it
	// reports it (llama-server GET /props total_slots); 0 when it does not.
	TotalSlots int
	// ContextWindow is the context length the engine reports (llama-server
	// /props default_generation_settings.n_ctx, vLLM max_model_len in its
	// model list); 0 when it does not.
	ContextWindow int
}

// checkTimeout bounds each call of a check.
const checkTimeout = 5 * time.Second

// Check asks the engine which models it serves: its readiness alone does
// not prove which weights it loaded. It fails unless the upstream model is
// listed. It is the cheap periodic health check; Verify is the full one.
func (c *Client) Check(ctx context.Context) error {
	_, err := c.listModels(ctx)
	return err
}

// Verify is the full check a worker makes before it serves: the upstream
// model is listed (Check), the engine key is accepted by an authenticated
// call, and the engine's slots and context window are read where it
// reports them. Its errors never hold the engine key.
func (c *Client) Verify(ctx context.Context) (Report, error) {
	var r Report
	ctxLen, err := c.listModels(ctx)
	if err != nil {
		return r, err
	}
	r.UpstreamVerified = true
	r.ContextWindow = ctxLen
	if r.KeyVerified, err = c.probeKey(ctx); err != nil {
		return r, err
	}
	slots, nctx := c.props(ctx)
	r.TotalSlots = slots
	if nctx > 0 {
		r.ContextWindow = nctx
	}
	return r, nil
}

// listModels checks that the engine lists the upstream model, and returns
// the context length it lists it with (vLLM's max_model_len), if any.
func (c *Client) listModels(ctx context.Context) (int, error) {
	if c.teiRerank() {
		return c.teiInfo(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	served := c.cfg.Served
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.modelsURL, nil)
	if err != nil {
		return 0, fmt.Errorf("worker %s: engine request: %w", served, err)
	}
	if c.authHeader != "" {
		req.Header.Set("Authorization", c.authHeader)
	}
	req.Header.Set("Accept", "application/json")
	where := RedactURL(c.modelsURL)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("worker %s: %w: GET %s: %w", served, ErrUnreachable, where, UnwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, fmt.Errorf("worker %s: %w: GET %s: reading the answer: %w", served, ErrUnreachable, where, err)
	}
	switch {
	case resp.StatusCode >= 500:
		return 0, fmt.Errorf("worker %s: %w: GET %s answered %d", served, ErrUnreachable, where, resp.StatusCode)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return 0, kindError(ErrUnauthorized, "worker %s: engine refused the engine API key: GET %s answered %d", served, where, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return 0, kindError(ErrMisnamed, "worker %s: GET %s answered %d; is the base URL right (it ends with /v1)?", served, where, resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, kindError(ErrMisnamed, "worker %s: GET %s did not answer an OpenAI model list: %w", served, where, err)
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID == c.cfg.Engine.Model {
			return max(m.MaxModelLen, 0), nil
		}
		ids = append(ids, m.ID)
	}
	listed := "no models"
	if len(ids) > 0 {
		listed = "[" + strings.Join(ids, ", ") + "]"
	}
	return 0, kindError(ErrMisnamed, "worker %s: engine at %s does not serve upstream model %q; it lists %s",
		served, RedactURL(c.cfg.Engine.BaseURL), c.cfg.Engine.Model, listed)
}

// probeKey proves the engine key with an authenticated call that costs
// nothing: a POST of an empty object to an inference endpoint. An engine
// that checks keys answers 401/403 before it reads the body; one that
// accepted the key answers 400/422 (the body is invalid). Listing models
// proves nothing: llama-server leaves /v1/models open with --api-key. The
// chat endpoint is tried first (the embeddings one first for an embedding
// model, one with MaxInputTokens); one the engine does not serve (404,
// 405) passes to the next. Without a key nothing is checked.
func (c *Client) probeKey(ctx context.Context) (bool, error) {
	if c.authHeader == "" {
		return false, nil
	}
	order := []Endpoint{Chat, Embeddings}
	switch {
	case c.IsReranker():
		order = []Endpoint{Rerank}
	case c.cfg.Engine.MaxInputTokens > 0:
		order = []Endpoint{Embeddings, Chat}
	}
	served := c.cfg.Served
	for _, ep := range order {
		status, err := c.post(ctx, c.urls[ep], []byte(`{}`))
		where := RedactURL(c.urls[ep])
		switch {
		case err != nil:
			return false, fmt.Errorf("worker %s: %w: POST %s: %w", served, ErrUnreachable, where, err)
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			return false, kindError(ErrUnauthorized, "worker %s: engine refused the engine API key: an authenticated POST %s answered %d", served, where, status)
		case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
			continue
		case status == http.StatusServiceUnavailable || status == http.StatusBadGateway || status == http.StatusGatewayTimeout:
			// Loading, or behind a proxy that cannot reach it yet.
			return false, fmt.Errorf("worker %s: %w: POST %s answered %d", served, ErrUnreachable, where, status)
		default:
			// Anything else came from past the engine's key check.
			return true, nil
		}
	}
	return false, nil
}

// post sends body to url with the engine key and returns the status.
func (c *Client) post(ctx context.Context, url string, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.authHeader != "" {
		req.Header.Set("Authorization", c.authHeader)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, UnwrapURLError(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// props reads llama-server's GET /props (at the root, beside /v1): its
// slot count and per-slot context. Zeros when the engine has no /props.
func (c *Client) props(ctx context.Context) (slots, nctx int) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	u := strings.TrimSuffix(c.cfg.Engine.BaseURL, "/v1") + "/props"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0
	}
	req.Header.Set("Accept", "application/json")
	if c.authHeader != "" {
		req.Header.Set("Authorization", c.authHeader)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return 0, 0
	}
	var p struct {
		TotalSlots int `json:"total_slots"`
		Settings   struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&p) != nil {
		return 0, 0
	}
	return max(p.TotalSlots, 0), max(p.Settings.NCtx, 0)
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
