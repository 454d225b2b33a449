// Package registry is the shared state of the mesh kept in JetStream KV
// buckets: tenants, API keys (hashes only) and served models with their
// engine bindings. Every edge replica and the worker supervisor watch it, so
// a change made through any replica reaches all of them within milliseconds.
package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/sealed"
)

// Errors callers map to API answers.
var (
	ErrNotFound = errors.New("registry: not found")
	ErrExists   = errors.New("registry: already exists")
	ErrInvalid  = errors.New("registry: invalid")
)

// Tenant owns keys and spend.
type Tenant struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Limits
	// Webhook, when set, receives the tenant's batch events.
	Webhook *Webhook `json:"webhook,omitempty"`
	// Admission is what the edge does with the tenant's prompts (nil: off;
	// new tenants get block).
	Admission *AdmissionPolicy `json:"admission,omitempty"`
	// TraceContent opts the tenant's requests into recording their prompt
	// and completion text on the edge's inference span (the OpenTelemetry
	// GenAI attributes gen_ai.input.messages and gen_ai.output.messages,
	// bounded). Off by default: traces then carry no content. Only the
	// admin API sets it.
	TraceContent bool `json:"trace_content"`
}

// Webhook events.
const (
	WebhookBatchCompleted = "batch.completed"
	WebhookBatchFailed    = "batch.failed"
	WebhookBatchExpired   = "batch.expired"
	WebhookBatchCancelled = "batch.cancelled"
)

// Webhook is where a tenant's events are delivered (POST, signed as
// OpenAI's webhooks are: the Standard Webhooks scheme, webhook-id,
// webhook-timestamp, webhook-signature "v1,<base64 HMAC-SHA256>").
type Webhook struct {
	URL string `json:"url"`
	// Events are the event types delivered (empty: every one).
	Events []string `json:"events,omitempty"`
	// SecretSealed is the signing secret ("whsec_..."), shown once when it
	// is set and kept only sealed to the platform's secrets key (package
	// sealed), with WebhookSecretContext: never in clear on the bus.
	SecretSealed string `json:"secret_sealed"`
}

// WebhookSecretContext binds a sealed webhook secret to its tenant and URL.
func WebhookSecretContext(tenant, url string) string { return "webhook\x00" + tenant + "\x00" + url }

// Limits are the spend controls of a key or a tenant. Zero values mean
// unlimited; RPM and TPM apply to keys only.
type Limits struct {
	RPM           int64   `json:"rpm,omitempty"`
	TPM           int64   `json:"tpm,omitempty"`
	MaxBudgetUSD  float64 `json:"max_budget_usd,omitempty"`
	BudgetPeriod  string  `json:"budget_period,omitempty"`
	SoftBudgetUSD float64 `json:"soft_budget_usd,omitempty"`
	// MaxConcurrentRequests bounds the requests of a key (or of all keys of
	// a tenant) in flight at once; further ones get 429. It is enforced by
	// each edge replica on its own: with N replicas a key may have up to N
	// times as many.
	MaxConcurrentRequests int64 `json:"max_concurrent_requests,omitempty"`
}

// Validate checks limits.
func (l Limits) Validate() error {
	var errs []error
	if l.RPM < 0 || l.TPM < 0 || l.MaxBudgetUSD < 0 || l.SoftBudgetUSD < 0 {
		errs = append(errs, errors.New("rpm, tpm, max_budget_usd and soft_budget_usd must not be negative"))
	}
	if l.MaxConcurrentRequests < 0 {
		errs = append(errs, errors.New("max_concurrent_requests must not be negative"))
	}
	switch l.BudgetPeriod {
	case "", "daily", "weekly", "monthly", "total":
	default:
		errs = append(errs, fmt.Errorf("budget_period %q is not one of daily, weekly, monthly, total", l.BudgetPeriod))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Period is the budget period, "total" when unset.
func (l Limits) Period() string {
	if l.BudgetPeriod == "" {
		return "total"
	}
	return l.BudgetPeriod
}

// Key is an API key record. The secret itself is never stored: only its
// SHA-256, compared in constant time. A 256-bit random secret needs no slow
// hash: there is nothing to brute-force.
type Key struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	Hash      string    `json:"hash"`
	Models    []string  `json:"models"`
	CreatedAt time.Time `json:"created_at"`
	Limits
	// Admission overrides the tenant's admission policy field by field.
	Admission *AdmissionPolicy `json:"admission,omitempty"`
}

// Allows reports whether the key may use model ("*" allows all).
func (k *Key) Allows(model string) bool {
	for _, m := range k.Models {
		if m == "*" || m == model {
			return true
		}
		if strings.HasSuffix(m, "*") && strings.HasPrefix(model, m[:len(m)-1]) {
			return true
		}
	}
	return false
}

// Engine is an OpenAI-compatible engine a worker forwards to.
type Engine struct {
	// ID names the engine among the engines serving one model name; empty
	// for a model's first (or only) engine. Worker replicas report it in
	// WorkerState.EngineID.
	ID string `json:"id,omitempty"`
	// BaseURL ends in /v1, e.g. http://127.0.0.1:8000/v1.
	BaseURL string `json:"base_url"`
	// Model is the name the engine knows the weights by.
	Model string `json:"model"`
	// APIKey is sent to the engine; it is never returned by the API and
	// never stored: the registry keeps it only sealed, in APIKeySealed
	// (SealEngineKey). A binding stored before keys were sealed may still
	// carry it in clear; OpenEngineKey accepts it and the edge seals it on
	// its next start (SealLegacyEngineKeys).
	APIKey string `json:"api_key,omitempty"`
	// APIKeySealed is APIKey sealed to the workers' public key (package
	// sealed), bound to the model name and BaseURL.
	APIKeySealed   string `json:"api_key_sealed,omitempty"`
	MaxConcurrency int    `json:"max_concurrency,omitempty"`
	// MaxInputTokens is an embedding model's input window; chunking of
	// vector stores that use the model is clamped to it.
	MaxInputTokens int `json:"max_input_tokens,omitempty"`
	// TTFTTimeout bounds the wait for a stream's first token, and
	// RequestTimeout a whole request; past them the request ends with 504
	// engine_timeout. Zero: the worker's defaults (no TTFT bound; 10m).
	TTFTTimeout    Duration `json:"ttft_timeout,omitempty"`
	RequestTimeout Duration `json:"request_timeout,omitempty"`
	// Weight scales the engine's share of a model's traffic among the
	// model's engines (0 counts as 1): with least-outstanding routing an
	// engine of weight 2 is given twice the requests in flight of one of
	// weight 1.
	Weight int `json:"weight,omitempty"`
	// Kind is EngineSelfHosted (the default: an engine the platform runs)
	// or EngineProvider (a hosted OpenAI-compatible API such as OpenAI,
	// Mistral, Groq or Together). A provider's key is sealed like any
	// engine key; its RPM and TPM are usually set.
	Kind string `json:"kind,omitempty"`
	// RPM and TPM are the engine's own rate limits (a provider's quota):
	// each worker replica of the engine keeps its requests and tokens per
	// minute under them and answers a request over them with 429
	// overloaded before sending it, so the edge falls back to the model's
	// next choice. Zero: unlimited.
	RPM int `json:"rpm,omitempty"`
	TPM int `json:"tpm,omitempty"`
	// Class is the worker class (the batch scheduler's resource flavour,
	// as "gpu", "cpu-moe") of the replicas serving this engine; pools give
	// quota per class. Empty: the default class.
	Class string `json:"class,omitempty"`
	// Process, when set, makes the worker supervise the engine as a child
	// process (start, health, restart on crash with backoff, stop) instead
	// of forwarding to an engine someone else runs.
	Process *EngineProcess `json:"process,omitempty"`
	// RerankAPI is the rerank protocol of a rerank model's engine (Model
	// Kind ModelKindRerank): RerankAPIV1 (the default, "v1") or
	// RerankAPITEI ("tei"). Ignored for other models.
	RerankAPI string `json:"rerank_api,omitempty"`
}

// Rerank protocols (Engine.RerankAPI).
const (
	// RerankAPIV1 is POST {base_url}/rerank (base_url ends in /v1) in the
	// Jina/Cohere shape: {"model","query","documents","top_n"} answered
	// {"results":[{"index","relevance_score"}],"usage":{"total_tokens"}};
	// vLLM, Jina, Infinity and llama-server --reranking serve it.
	RerankAPIV1 = "v1"
	// RerankAPITEI is Hugging Face text-embeddings-inference's POST
	// /rerank at the engine's root: {"query","texts"} answered
	// [{"index","score"}], without usage.
	RerankAPITEI = "tei"
)

// Model kinds (Model.Kind).
const (
	// ModelKindGenerate is a model served on the OpenAI endpoints (chat,
	// completions, embeddings: whatever its engine serves). The default.
	ModelKindGenerate = ""
	// ModelKindRerank is a reranker: it scores documents against a query
	// on POST /v1/rerank and in the rerank stage of vector store search
	// and file_search (ranking_options.ranker), and serves nothing else.
	ModelKindRerank = "rerank"
)

// Engine process kinds (EngineProcess.Kind).
const (
	ProcessLlamaServer = "llama-server"
	ProcessOllama      = "ollama"
	ProcessColi        = "coli"
)

// EngineProcess is an engine a worker starts and supervises. It holds no
// secret: the engine key (if any) stays sealed in Engine.APIKeySealed.
type EngineProcess struct {
	// Kind is ProcessLlamaServer, ProcessOllama or ProcessColi.
	Kind string `json:"kind"`
	// Binary is the executable; empty: Kind looked up on PATH.
	Binary string `json:"binary,omitempty"`
	// ModelPath is the weights: a GGUF file for llama-server and coli, a
	// GGUF file or Modelfile for Ollama (created under Engine.Model).
	ModelPath string `json:"model_path"`
	// Port is the loopback port the engine listens on; 0 picks a free one.
	// Engine.BaseURL is derived from it when empty.
	Port int `json:"port,omitempty"`
	// ContextSize and Slots are the engine's context length and parallel
	// sequences (0: the engine's defaults).
	ContextSize int `json:"context_size,omitempty"`
	Slots       int `json:"slots,omitempty"`
	// MoEPlacement places a mixture-of-experts model's expert tensors:
	// "auto" (the default: as many layers' experts on the accelerator or
	// in RAM as free memory allows, the rest streamed from disk through
	// mmap, computed from the GGUF's expert layout), "cpu" (every expert
	// on the CPU, --cpu-moe) or a layer count (--n-cpu-moe N). It changes
	// speed, never the answer: the experts used per token are the model's.
	MoEPlacement string `json:"moe_placement,omitempty"`
	// Args are extra engine arguments, appended.
	Args []string `json:"args,omitempty"`
	// Env is extra environment for the engine (never secrets).
	Env map[string]string `json:"env,omitempty"`
	// IdleStop scales the engine to zero: after this long with no request
	// in flight or queued, the worker stops the process and keeps serving
	// the model as asleep (ProcessAsleep); the next request starts it
	// again and waits for it (the worker's cold start wait). 0: never.
	IdleStop Duration `json:"idle_stop,omitempty"`
}

// Engine kinds (Engine.Kind).
const (
	EngineSelfHosted = ""
	EngineProvider   = "provider"
)

// Routing policies (Model.Routing) between the engines of one model.
const (
	// RoutingLeastOutstanding sends each request to the engine with the
	// fewest requests outstanding per unit of weight. The default.
	RoutingLeastOutstanding = "least_outstanding"
	// RoutingLatency sends each request to the engine with the lowest
	// recent latency (time to first token, or to the whole answer).
	RoutingLatency = "latency"
)

// Model binds a served model name to its engines.
type Model struct {
	Name string `json:"name"`
	// Kind is ModelKindGenerate ("") or ModelKindRerank.
	Kind string `json:"kind,omitempty"`
	// Engine is the model's first engine (the only one of most models).
	Engine Engine `json:"engine"`
	// Engines are further engines serving the same name, each with an ID
	// unique among the model's engines; a worker runs per engine and the
	// edge routes between them by Routing.
	Engines []Engine `json:"engines,omitempty"`
	// Routing is RoutingLeastOutstanding (default, "") or RoutingLatency.
	Routing string `json:"routing,omitempty"`
	// Fallbacks are other model names tried in order, before the first
	// byte of the answer, when this model has no servable worker, is
	// overloaded, fails retryably or cannot take the prompt. It is this
	// model's own list: the fallbacks' own fallbacks are not followed.
	Fallbacks []string `json:"fallbacks,omitempty"`
	// ContextWindow is the model's context length in tokens (0: unknown;
	// the engines' own reports are used then): a request whose prompt
	// estimate plus max_tokens exceeds it goes to the next fallback.
	ContextWindow int `json:"context_window,omitempty"`
	// Cache opts the model into the semantic cache.
	Cache *CachePolicy `json:"cache,omitempty"`
	// HybridSearch is, for an embedding model, how hybrid searches of the
	// vector stores it embeds fuse its list with the keyword list when the
	// request's ranking_options give no hybrid_search: the operator's
	// knowledge of the model's strength (nil: the default fusion, which
	// trusts the model only as far as it agrees with keyword search).
	HybridSearch *HybridSearch `json:"hybrid_search,omitempty"`
	OwnedBy      string        `json:"owned_by,omitempty"`
	CreatedAt    time.Time     `json:"created_at"`
}

// AllEngines returns the model's engines: Engine, then Engines.
func (m Model) AllEngines() []Engine {
	out := make([]Engine, 0, 1+len(m.Engines))
	return append(append(out, m.Engine), m.Engines...)
}

// EngineByID returns the model's engine with id ("" is the first engine
// when it has no id).
func (m *Model) EngineByID(id string) (Engine, bool) {
	if m.Engine.ID == id {
		return m.Engine, true
	}
	for i := range m.Engines {
		if m.Engines[i].ID == id {
			return m.Engines[i], true
		}
	}
	return Engine{}, false
}

// EffectiveWeight is w's Weight, 1 when unset.
func (e Engine) EffectiveWeight() int {
	if e.Weight <= 0 {
		return 1
	}
	return e.Weight
}

// forEngine calls fn with every engine of m, in order, by reference.
func (m *Model) forEngine(fn func(*Engine) error) error {
	if err := fn(&m.Engine); err != nil {
		return err
	}
	for i := range m.Engines {
		if err := fn(&m.Engines[i]); err != nil {
			return err
		}
	}
	return nil
}

// HasClearEngineKey reports whether an engine of m holds its key in clear.
func (m Model) HasClearEngineKey() bool {
	for _, e := range m.AllEngines() {
		if e.APIKey != "" {
			return true
		}
	}
	return false
}

// Redacted returns m without secrets, for API answers and logs: a key, in
// clear or sealed, shows as "redacted".
func (m Model) Redacted() Model {
	m.Engines = slices.Clone(m.Engines)
	_ = m.forEngine(func(e *Engine) error {
		if e.APIKey != "" || e.APIKeySealed != "" {
			e.APIKey = "redacted"
		}
		e.APIKeySealed = ""
		return nil
	})
	return m
}

// engineKeyContext binds a sealed engine key to its binding: moved into
// another model, or with BaseURL pointed elsewhere, it does not open.
func engineKeyContext(name string, e *Engine) string {
	return "aiforge engine api key\x00" + name + "\x00" + e.BaseURL
}

// SealEngineKey moves every engine's APIKey, if any, into its
// APIKeySealed, sealed to pub. Name and each engine's BaseURL must be
// final: a sealed key opens only with them.
func (m *Model) SealEngineKey(pub sealed.PublicKey) error {
	m.Engines = slices.Clone(m.Engines)
	return m.forEngine(func(e *Engine) error {
		if e.APIKey == "" {
			return nil
		}
		v, err := pub.Seal([]byte(e.APIKey), engineKeyContext(m.Name, e))
		if err != nil {
			return fmt.Errorf("model %q: seal the engine api key: %w", m.Name, err)
		}
		e.APIKey, e.APIKeySealed = "", v
		return nil
	})
}

// ErrNoSecretsKey is OpenEngineKey's error when a binding's key is sealed
// and there is no private key to open it.
var ErrNoSecretsKey = errors.New("the engine api key is sealed and this process holds no secrets key to open it")

// OpenEngineKey returns m with Engine.APIKey in clear, ready to call the
// engine, and APIKeySealed cleared: opened with k, or as stored by a
// binding written before keys were sealed. k may be nil when no binding
// has a sealed key. Its errors name the model and the cause, never the key.
func (m Model) OpenEngineKey(k *sealed.PrivateKey) (Model, error) {
	m.Engines = slices.Clone(m.Engines)
	err := m.forEngine(func(e *Engine) error {
		if e.APIKeySealed == "" {
			return nil
		}
		if k == nil {
			return fmt.Errorf("model %q: %w", m.Name, ErrNoSecretsKey)
		}
		b, err := k.Open(e.APIKeySealed, engineKeyContext(m.Name, e))
		if err != nil {
			return fmt.Errorf("model %q: open the engine api key: %w", m.Name, err)
		}
		e.APIKey, e.APIKeySealed = string(b), ""
		return nil
	})
	if err != nil {
		return Model{}, err
	}
	return m, nil
}

// MaxFallbacks bounds a model's fallback list.
const MaxFallbacks = 8

var engineIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// validateEngine checks the fields every engine of a model shares.
func validateEngine(where string, e Engine) error {
	var errs []error
	if e.APIKey != "" && e.APIKeySealed != "" {
		errs = append(errs, fmt.Errorf("%s.api_key and %s.api_key_sealed exclude each other", where, where))
	}
	if e.MaxConcurrency < 0 || e.MaxInputTokens < 0 {
		errs = append(errs, fmt.Errorf("%s.max_concurrency and %s.max_input_tokens must not be negative", where, where))
	}
	if e.TTFTTimeout < 0 || e.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("%s.ttft_timeout and %s.request_timeout must not be negative", where, where))
	}
	if e.Weight < 0 || e.RPM < 0 || e.TPM < 0 {
		errs = append(errs, fmt.Errorf("%s.weight, %s.rpm and %s.tpm must not be negative", where, where, where))
	}
	switch e.Kind {
	case EngineSelfHosted, EngineProvider:
	default:
		errs = append(errs, fmt.Errorf("%s.kind %q is not one of \"\" (self-hosted), %q", where, e.Kind, EngineProvider))
	}
	switch e.RerankAPI {
	case "", RerankAPIV1, RerankAPITEI:
	default:
		errs = append(errs, fmt.Errorf("%s.rerank_api %q is not one of %q, %q", where, e.RerankAPI, RerankAPIV1, RerankAPITEI))
	}
	return errors.Join(errs...)
}

var tenantRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidTenantID reports whether id can name a tenant.
func ValidTenantID(id string) bool { return tenantRE.MatchString(id) }

// ValidateModel checks a model binding.
func ValidateModel(m Model) error {
	var errs []error
	if m.Name == "" || len(m.Name) > 256 || strings.ContainsAny(m.Name, " \t\r\n") {
		errs = append(errs, errors.New("name must be 1-256 characters without whitespace"))
	}
	// A supervised engine's URL may be left to its worker, which starts it
	// on a loopback port of its own.
	if !(m.Engine.BaseURL == "" && m.Engine.Process != nil) && !strings.HasPrefix(m.Engine.BaseURL, "http://") && !strings.HasPrefix(m.Engine.BaseURL, "https://") {
		errs = append(errs, errors.New("engine.base_url must be an http(s) URL (or empty for a supervised engine process)"))
	}
	if m.Engine.Model == "" {
		errs = append(errs, errors.New("engine.model is required"))
	}
	errs = append(errs, validateEngine("engine", m.Engine))
	ids := map[string]bool{m.Engine.ID: true}
	if m.Engine.ID != "" && !engineIDRE.MatchString(m.Engine.ID) {
		errs = append(errs, fmt.Errorf("engine.id must match %s", engineIDRE))
	}
	for i, e := range m.Engines {
		where := fmt.Sprintf("engines[%d]", i)
		if !engineIDRE.MatchString(e.ID) {
			errs = append(errs, fmt.Errorf("%s.id is required and must match %s", where, engineIDRE))
		} else if ids[e.ID] {
			errs = append(errs, fmt.Errorf("%s.id %q is not unique among the model's engines", where, e.ID))
		}
		ids[e.ID] = true
		if !(e.BaseURL == "" && e.Process != nil) && !strings.HasPrefix(e.BaseURL, "http://") && !strings.HasPrefix(e.BaseURL, "https://") {
			errs = append(errs, fmt.Errorf("%s.base_url must be an http(s) URL (or empty for a supervised engine process)", where))
		}
		if e.Model == "" {
			errs = append(errs, fmt.Errorf("%s.model is required", where))
		}
		errs = append(errs, validateEngine(where, e))
	}
	switch m.Kind {
	case ModelKindGenerate, ModelKindRerank:
	default:
		errs = append(errs, fmt.Errorf("kind %q is not one of \"\" (generation), %q", m.Kind, ModelKindRerank))
	}
	if m.Kind != ModelKindRerank {
		for i, e := range m.AllEngines() {
			if e.RerankAPI != "" {
				errs = append(errs, fmt.Errorf("engine %d: rerank_api is for models of kind %q", i, ModelKindRerank))
				break
			}
		}
	}
	switch m.Routing {
	case "", RoutingLeastOutstanding, RoutingLatency:
	default:
		errs = append(errs, fmt.Errorf("routing %q is not one of %s, %s", m.Routing, RoutingLeastOutstanding, RoutingLatency))
	}
	seen := map[string]bool{}
	for i, f := range m.Fallbacks {
		switch {
		case f == "" || len(f) > 256 || strings.ContainsAny(f, " \t\r\n"):
			errs = append(errs, fmt.Errorf("fallbacks[%d] must be a model name", i))
		case f == m.Name:
			errs = append(errs, fmt.Errorf("fallbacks[%d]: a model cannot fall back to itself", i))
		case seen[f]:
			errs = append(errs, fmt.Errorf("fallbacks[%d]: %q is listed twice", i, f))
		}
		seen[f] = true
	}
	if len(m.Fallbacks) > MaxFallbacks {
		errs = append(errs, fmt.Errorf("at most %d fallbacks", MaxFallbacks))
	}
	if m.ContextWindow < 0 {
		errs = append(errs, errors.New("context_window must not be negative"))
	}
	if field, err := m.HybridSearch.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("hybrid_search.%s: %w", field, err))
	}
	if m.HybridSearch != nil && m.Kind == ModelKindRerank {
		errs = append(errs, fmt.Errorf("hybrid_search is for embedding models, not models of kind %q", ModelKindRerank))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Store reads and writes the registry buckets.
type Store struct {
	js      jetstream.JetStream
	tenants jetstream.KeyValue
	keys    jetstream.KeyValue
	models  jetstream.KeyValue
	prices  jetstream.KeyValue
}

// Open binds the buckets; events.Ensure must have created them.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	s := Store{js: js}
	var err error
	if s.tenants, err = js.KeyValue(ctx, events.BucketTenants); err != nil {
		return nil, fmt.Errorf("registry: bucket %s: %w", events.BucketTenants, err)
	}
	if s.keys, err = js.KeyValue(ctx, events.BucketKeys); err != nil {
		return nil, fmt.Errorf("registry: bucket %s: %w", events.BucketKeys, err)
	}
	if s.models, err = js.KeyValue(ctx, events.BucketModels); err != nil {
		return nil, fmt.Errorf("registry: bucket %s: %w", events.BucketModels, err)
	}
	if s.prices, err = js.KeyValue(ctx, events.BucketPrices); err != nil {
		return nil, fmt.Errorf("registry: bucket %s: %w", events.BucketPrices, err)
	}
	return &s, nil
}

var kvEnc = base32.HexEncoding.WithPadding(base32.NoPadding)

// ModelKey maps any model name onto the KV key alphabet.
func ModelKey(name string) string { return "m." + strings.ToLower(kvEnc.EncodeToString([]byte(name))) }

// The helpers below are pkg/kv with the registry's errors: ErrNotFound and
// ErrExists come back bare, as callers have always compared them.

func put[T any](ctx context.Context, b jetstream.KeyValue, key string, v T, create bool) error {
	var err error
	if create {
		_, err = kv.Create(ctx, b, key, v)
	} else {
		_, err = kv.Put(ctx, b, key, v)
	}
	return storeErr(err)
}

func get[T any](ctx context.Context, b jetstream.KeyValue, key string) (T, error) {
	v, _, err := kv.Get[T](ctx, b, key)
	return v, storeErr(err)
}

func list[T any](ctx context.Context, b jetstream.KeyValue) ([]T, error) {
	es, err := kv.List[T](ctx, b)
	if err != nil {
		return nil, storeErr(err)
	}
	return kv.Values(es), nil
}

func del(ctx context.Context, b jetstream.KeyValue, key string) error {
	return storeErr(kv.Delete(ctx, b, key))
}

// modify applies fn to the record under key by compare-and-set
// (kv.Update); ErrNotFound when there is none. fn's errors come back as
// they are.
func modify[T any](ctx context.Context, b jetstream.KeyValue, key string, fn func(*T) error) (T, error) {
	return upsert(ctx, b, key, func(v *T, exists bool) error {
		if !exists {
			return ErrNotFound
		}
		return fn(v)
	})
}

// upsert is kv.Update with the registry's errors.
func upsert[T any](ctx context.Context, b jetstream.KeyValue, key string, fn func(v *T, exists bool) error) (T, error) {
	var fnErr error
	v, _, err := kv.Update(ctx, b, key, func(v *T, exists bool) error {
		fnErr = fn(v, exists)
		return fnErr
	})
	if err != nil && !errors.Is(err, fnErr) {
		err = storeErr(err)
	}
	return v, err
}

func storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kv.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, kv.ErrExists):
		return ErrExists
	}
	return fmt.Errorf("registry: %w", err)
}

// CreateTenant adds a tenant; ErrExists if it is there.
func (s *Store) CreateTenant(ctx context.Context, id string) (Tenant, error) {
	if !ValidTenantID(id) {
		return Tenant{}, fmt.Errorf("%w: tenant id must match %s", ErrInvalid, tenantRE)
	}
	t := Tenant{ID: id, CreatedAt: time.Now().UTC()}
	return t, put(ctx, s.tenants, "t."+id, t, true)
}

// GetTenant returns a tenant.
func (s *Store) GetTenant(ctx context.Context, id string) (Tenant, error) {
	if !ValidTenantID(id) {
		return Tenant{}, ErrNotFound
	}
	return get[Tenant](ctx, s.tenants, "t."+id)
}

// ListTenants returns every tenant, sorted by id.
func (s *Store) ListTenants(ctx context.Context) ([]Tenant, error) {
	ts, err := list[Tenant](ctx, s.tenants)
	slices.SortFunc(ts, func(a, b Tenant) int { return strings.Compare(a.ID, b.ID) })
	return ts, err
}

// KeyPrefix starts every aiforge API key.
const KeyPrefix = "sk-af-"

// CreateKey makes a key for tenant and returns the record and the secret,
// which exists only in this return value.
func (s *Store) CreateKey(ctx context.Context, tenant, name string, models []string, limits Limits) (Key, string, error) {
	if err := limits.Validate(); err != nil {
		return Key{}, "", err
	}
	if _, err := s.GetTenant(ctx, tenant); err != nil {
		if errors.Is(err, ErrNotFound) {
			return Key{}, "", fmt.Errorf("%w: tenant %q does not exist", ErrInvalid, tenant)
		}
		return Key{}, "", err
	}
	if len(models) == 0 {
		models = []string{"*"}
	}
	var idb [8]byte
	var sec [32]byte
	_, _ = rand.Read(idb[:])
	_, _ = rand.Read(sec[:])
	id := "key_" + hex.EncodeToString(idb[:])
	secret := KeyPrefix + hex.EncodeToString(idb[:]) + "-" + base64.RawURLEncoding.EncodeToString(sec[:])
	k := Key{ID: id, Tenant: tenant, Name: name, Hash: HashSecret(secret), Models: models, CreatedAt: time.Now().UTC(), Limits: limits}
	if err := put(ctx, s.keys, id, k, true); err != nil {
		return Key{}, "", err
	}
	return k, secret, nil
}

// HashSecret is the stored form of a key.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// KeyIDOf extracts the key id from a presented secret without trusting it.
func KeyIDOf(secret string) (string, bool) {
	rest, ok := strings.CutPrefix(secret, KeyPrefix)
	if !ok {
		return "", false
	}
	idhex, _, ok := strings.Cut(rest, "-")
	if !ok || len(idhex) != 16 {
		return "", false
	}
	return "key_" + idhex, true
}

// Verify compares a presented secret with the stored hash in constant time.
func (k *Key) Verify(secret string) bool {
	want, err := hex.DecodeString(k.Hash)
	if err != nil {
		return false
	}
	got := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(got[:], want) == 1
}

// GetKey returns a key record.
func (s *Store) GetKey(ctx context.Context, id string) (Key, error) {
	if !validKVKey(id) {
		return Key{}, ErrNotFound
	}
	return get[Key](ctx, s.keys, id)
}

// ListKeys returns the keys of tenant, or all keys when tenant is empty.
func (s *Store) ListKeys(ctx context.Context, tenant string) ([]Key, error) {
	ks, err := list[Key](ctx, s.keys)
	if err != nil {
		return nil, err
	}
	out := ks[:0]
	for _, k := range ks {
		if tenant == "" || k.Tenant == tenant {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b Key) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// RevokeKey deletes a key; every watcher drops it at once.
func (s *Store) RevokeKey(ctx context.Context, id string) error {
	if !validKVKey(id) {
		return ErrNotFound
	}
	return del(ctx, s.keys, id)
}

// PutModel registers or replaces a model binding. An engine key must be
// sealed first (Model.SealEngineKey): the registry never stores one in
// clear.
func (s *Store) PutModel(ctx context.Context, m Model) error {
	if err := ValidateModel(m); err != nil {
		return err
	}
	if m.HasClearEngineKey() {
		return fmt.Errorf("%w: model %q: the engine api key must be sealed before it is stored", ErrInvalid, m.Name)
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = time.Now().UTC()
	}
	return put(ctx, s.models, ModelKey(m.Name), m, false)
}

// GetModel returns a model binding.
func (s *Store) GetModel(ctx context.Context, name string) (Model, error) {
	return get[Model](ctx, s.models, ModelKey(name))
}

// ListModels returns every model binding, sorted by name.
func (s *Store) ListModels(ctx context.Context) ([]Model, error) {
	ms, err := list[Model](ctx, s.models)
	slices.SortFunc(ms, func(a, b Model) int { return strings.Compare(a.Name, b.Name) })
	return ms, err
}

// DeleteModel removes a model binding; its workers stop.
func (s *Store) DeleteModel(ctx context.Context, name string) error {
	return del(ctx, s.models, ModelKey(name))
}

var kvKeyRE = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func validKVKey(k string) bool { return len(k) <= 256 && kvKeyRE.MatchString(k) }

// UpdateKeyLimits changes a key's limits.
func (s *Store) UpdateKeyLimits(ctx context.Context, id string, fn func(*Limits)) (Key, error) {
	if !validKVKey(id) {
		return Key{}, ErrNotFound
	}
	return modify(ctx, s.keys, id, func(k *Key) error {
		fn(&k.Limits)
		return k.Limits.Validate()
	})
}

// UpdateTenantLimits changes a tenant's budget.
func (s *Store) UpdateTenantLimits(ctx context.Context, id string, fn func(*Limits)) (Tenant, error) {
	if !ValidTenantID(id) {
		return Tenant{}, ErrNotFound
	}
	return modify(ctx, s.tenants, "t."+id, func(t *Tenant) error {
		fn(&t.Limits)
		return t.Limits.Validate()
	})
}

// SetTenantWebhook sets (nil: removes) a tenant's webhook.
func (s *Store) SetTenantWebhook(ctx context.Context, id string, w *Webhook) (Tenant, error) {
	if !ValidTenantID(id) {
		return Tenant{}, ErrNotFound
	}
	return modify(ctx, s.tenants, "t."+id, func(t *Tenant) error {
		t.Webhook = w
		return nil
	})
}

// SealLegacyEngineKeys seals, with pub, every engine key stored in clear by
// a binding written before keys were sealed, and purges the binding's
// earlier revisions from the bucket's history so the clear key is gone from
// the bus too. It returns the models it sealed. Safe to run on every edge
// replica at once: each binding is rewritten by compare-and-set, and one
// already sealed is left alone.
func (s *Store) SealLegacyEngineKeys(ctx context.Context, pub sealed.PublicKey) ([]string, error) {
	ms, err := s.ListModels(ctx)
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, m := range ms {
		if !m.HasClearEngineKey() {
			continue
		}
		key := ModelKey(m.Name)
		_, written, err := kv.Update(ctx, s.models, key, func(cur *Model, exists bool) error {
			if !exists || !cur.HasClearEngineKey() {
				return kv.ErrNoChange
			}
			return cur.SealEngineKey(pub)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("model %q: %w", m.Name, storeErr(err)))
			continue
		}
		if err := s.purgeHistory(ctx, s.models, key); err != nil {
			errs = append(errs, fmt.Errorf("model %q: purge the revisions with the key in clear: %w", m.Name, err))
			continue
		}
		if written {
			done = append(done, m.Name)
		}
	}
	return done, errors.Join(errs...)
}

// purgeHistory keeps only the latest revision of key.
func (s *Store) purgeHistory(ctx context.Context, b jetstream.KeyValue, key string) error {
	st, err := s.js.Stream(ctx, "KV_"+b.Bucket())
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject("$KV."+b.Bucket()+"."+key), jetstream.WithPurgeKeep(1))
}
