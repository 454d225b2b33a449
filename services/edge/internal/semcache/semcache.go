// Package semcache is the edge's semantic cache: answers of the models that
// opted in (registry.Model.Cache), kept in events.BucketSemanticCache with
// a TTL per entry. A chat completion deterministic enough (temperature at
// most the policy's MaxTemperature, one choice) is looked up by its key,
// the SHA-256 of tenant, model and the canonical request (messages and
// every parameter that changes the answer): an exact hit. With a
// similarity threshold, a miss is then compared with the cached prompts
// (the last user message) of the same tenant, model and rest of the
// request: lexically (pkg/lexical terms, cosine) by default, by embeddings
// through the workers when the policy names an embedding model. The
// partition is hard: the KV key starts with tenant and model and the
// in-memory index is keyed by both, so no lookup ever sees another
// tenant's or model's entries.
package semcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/embedding"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/lexical"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/routing"
)

// HeaderCache says a response came from the cache: exact or similar.
const HeaderCache = "X-Aiforge-Cache"

// Defaults and bounds.
const (
	DefaultTTL = time.Hour
	// MaxEntryBytes bounds a cached answer.
	MaxEntryBytes = 256 << 10
	// MaxIndexEntries bounds the similarity index of one tenant and model;
	// the oldest entries leave it first.
	MaxIndexEntries = 10000
)

// Entry is one cached answer.
type Entry struct {
	Tenant string `json:"tenant"`
	Model  string `json:"model"`
	// Context is the hash of the request without its last user message:
	// a similar prompt matches only within the same context.
	Context string `json:"context"`
	// Terms or Vector represent the prompt for similarity (never its text).
	Terms  routing.Terms `json:"terms,omitempty"`
	Vector []float32     `json:"vector,omitempty"`
	// Body is the chat completion, its usage showing the prompt as cached
	// and no completion tokens (what a hit is billed for).
	Body         json.RawMessage `json:"body"`
	PromptTokens int64           `json:"prompt_tokens"`
	CreatedAt    time.Time       `json:"created_at"`
	ExpiresAt    time.Time       `json:"expires_at"`
}

// Deps are what the cache needs.
type Deps struct {
	KV jetstream.KeyValue
	// Embed asks embedding models through the workers (policies with an
	// EmbeddingModel).
	Embed      *bridge.Client
	JS         jetstream.JetStream
	InstanceID string
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Cache is the semantic cache.
type Cache struct {
	d       Deps
	an      *lexical.Analyzer
	lookups *prometheus.CounterVec

	mu    sync.RWMutex
	parts map[string]*partition // by tenant NUL model
	// present holds the expiry of every key the watch has delivered, and
	// synced says the watch's initial state is in: then a key absent here
	// is a miss without a bucket read (a miss costs no round trip, a
	// similar hit one instead of two). Past maxPresent keys every lookup
	// reads the bucket.
	present map[string]time.Time
	synced  atomic.Bool
}

// maxPresent bounds the keys remembered for lookups without a read.
const maxPresent = 1 << 20

type indexed struct {
	key       string
	context   string
	terms     routing.Terms
	vector    []float32
	createdAt time.Time
	expiresAt time.Time
}

type partition struct{ entries map[string]*indexed }

// New builds the cache; Run follows the bucket for the similarity index.
func New(d Deps) (*Cache, error) {
	if d.KV == nil {
		return nil, errors.New("semcache: Deps.KV is required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	c := &Cache{d: d, an: lexical.NewEnglish(), parts: map[string]*partition{}, present: map[string]time.Time{}}
	c.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aiforge_edge_semantic_cache_lookups_total",
		Help: "Semantic cache lookups of the models that opted in, by model and result (exact, similar, miss).",
	}, []string{"model", "result"})
	if d.Registerer != nil {
		if err := d.Registerer.Register(c.lookups); err != nil {
			return nil, err
		}
	}
	return c, nil
}

var kvEnc = base32.HexEncoding.WithPadding(base32.NoPadding)

func modelToken(model string) string { return strings.ToLower(kvEnc.EncodeToString([]byte(model))) }

// Prefix is the KV key prefix of tenant's entries of model; tenant ""
// means every tenant (a filter with a wildcard).
func Prefix(tenant, model string) string {
	if tenant == "" {
		tenant = "*"
	}
	return "c." + tenant + "." + modelToken(model) + "."
}

func partKey(tenant, model string) string { return tenant + "\x00" + model }

// Run follows the bucket into the similarity index until ctx ends.
func (c *Cache) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		c.synced.Store(false)
		err := kv.Watch(ctx, c.d.KV, func(ch kv.Change[Entry], initialDone bool) {
			if initialDone {
				c.synced.Store(true)
				return
			}
			if ch.Deleted || ch.Err != nil {
				c.forget(ch.Key)
				return
			}
			c.keep(ch.Key, ch.Value)
		})
		if ctx.Err() != nil {
			return nil
		}
		c.d.Logger.Warn("semantic cache watch ended; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// keep records key as present until its expiry and indexes it. Store calls
// it as well as the watch: an answer indexed for similarity before the
// watch delivers it would otherwise be found only as a similar hit of its
// own prompt, since absent still reports the key missing.
func (c *Cache) keep(key string, e Entry) {
	c.mu.Lock()
	c.present[key] = e.ExpiresAt
	c.mu.Unlock()
	c.index(key, e)
}

func (c *Cache) index(key string, e Entry) {
	if e.Tenant == "" || e.Model == "" || !strings.HasPrefix(key, Prefix(e.Tenant, e.Model)) {
		return // never indexed under a partition its key does not name
	}
	if len(e.Terms) == 0 && len(e.Vector) == 0 {
		return
	}
	pk := partKey(e.Tenant, e.Model)
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[pk]
	if p == nil {
		p = &partition{entries: map[string]*indexed{}}
		c.parts[pk] = p
	}
	p.entries[key] = &indexed{key: key, context: e.Context, terms: e.Terms, vector: e.Vector, createdAt: e.CreatedAt, expiresAt: e.ExpiresAt}
	if len(p.entries) > MaxIndexEntries {
		all := make([]*indexed, 0, len(p.entries))
		for _, x := range p.entries {
			all = append(all, x)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].createdAt.Before(all[j].createdAt) })
		for _, x := range all[:len(all)-MaxIndexEntries] {
			delete(p.entries, x.key)
		}
	}
}

func (c *Cache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.present, key)
	for pk, p := range c.parts {
		if _, ok := p.entries[key]; ok {
			delete(p.entries, key)
			if len(p.entries) == 0 {
				delete(c.parts, pk)
			}
			return
		}
	}
}

// Query is a request the cache may answer.
type Query struct {
	Tenant, KeyID, Model string
	Body                 []byte
	Policy               registry.CachePolicy
}

// Probe is a looked-up request: a hit, or what storing its answer needs.
type Probe struct {
	c       *Cache
	q       Query
	key     string
	context string
	terms   routing.Terms
	vector  []float32

	// Hit is the cached entry when the lookup found one, and Kind its
	// kind (events.CacheExact, events.CacheSimilar).
	Hit  *Entry
	Kind string
}

// ignoredFields do not change the answer (or are handled apart: n must be
// 1, the model is keyed on its own).
var ignoredFields = map[string]bool{"model": true, "stream": true, "stream_options": true, "user": true, "metadata": true,
	"store": true, "n": true, "service_tier": true}

// Cacheable reports whether a chat request may be cached under policy:
// temperature at most MaxTemperature (absent counts as 1), one choice.
func Cacheable(body []byte, p registry.CachePolicy) bool {
	var f struct {
		Temperature *float64 `json:"temperature"`
		N           *int     `json:"n"`
	}
	if json.Unmarshal(body, &f) != nil {
		return false
	}
	temp := 1.0
	if f.Temperature != nil {
		temp = *f.Temperature
	}
	return temp <= p.MaxTemperature && (f.N == nil || *f.N == 1)
}

// canonical is the request's fields that change the answer, re-encoded
// with sorted keys and exact numbers, with the last user message apart.
func canonical(body []byte) (full, rest []byte, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil {
		return nil, nil, false
	}
	for k := range m {
		if ignoredFields[k] {
			delete(m, k)
		}
	}
	full, err := json.Marshal(m)
	if err != nil {
		return nil, nil, false
	}
	if msgs, ok := m["messages"].([]any); ok {
		cp := append([]any(nil), msgs...)
		for i := len(cp) - 1; i >= 0; i-- {
			if mm, ok := cp[i].(map[string]any); ok && mm["role"] == "user" {
				cp[i] = map[string]any{"role": "user", "content": "\x00prompt"}
				break
			}
		}
		m["messages"] = cp
	}
	rest, err = json.Marshal(m)
	if err != nil {
		return nil, nil, false
	}
	return full, rest, true
}

func hash(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Lookup looks q up: nil when the request is not cacheable; else a probe,
// with Hit set on a hit.
func (c *Cache) Lookup(ctx context.Context, q Query) *Probe {
	if c == nil || !q.Policy.Enabled || !Cacheable(q.Body, q.Policy) {
		return nil
	}
	full, rest, ok := canonical(q.Body)
	if !ok {
		return nil
	}
	p := &Probe{c: c, q: q, context: hash([]byte(q.Tenant), []byte(q.Model), rest)}
	p.key = Prefix(q.Tenant, q.Model) + hash([]byte(q.Tenant), []byte(q.Model), full)
	now := c.d.Now()
	if !c.absent(p.key, now) {
		if e, _, err := kv.Get[Entry](ctx, c.d.KV, p.key); err == nil && e.Tenant == q.Tenant && e.Model == q.Model && now.Before(e.ExpiresAt) {
			p.Hit, p.Kind = &e, events.CacheExact
			c.lookups.WithLabelValues(q.Model, events.CacheExact).Inc()
			return p
		}
	}
	if q.Policy.Similarity > 0 {
		if e := c.similar(ctx, p, now); e != nil {
			p.Hit, p.Kind = e, events.CacheSimilar
			c.lookups.WithLabelValues(q.Model, events.CacheSimilar).Inc()
			return p
		}
	}
	c.lookups.WithLabelValues(q.Model, "miss").Inc()
	return p
}

// absent reports whether key is known to be missing or expired without
// reading the bucket: the watch has delivered the bucket's state and key
// is not in it (or past its expiry).
func (c *Cache) absent(key string, now time.Time) bool {
	if !c.synced.Load() {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.present) >= maxPresent {
		return false
	}
	exp, ok := c.present[key]
	return !ok || !now.Before(exp)
}

// represent fills the probe's prompt representation.
func (p *Probe) represent(ctx context.Context) bool {
	if p.terms != nil || p.vector != nil {
		return true
	}
	prompt := routing.LastUserText(p.q.Body)
	if strings.TrimSpace(prompt) == "" {
		return false
	}
	if m := p.q.Policy.EmbeddingModel; m != "" {
		if p.c.d.Embed == nil {
			return false
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		vecs, err := embedding.Embed(ctx, p.c.d.Embed, embedding.Request{Model: m, Tenant: p.q.Tenant, KeyID: p.q.KeyID, Inputs: []string{prompt}})
		if err != nil {
			p.c.d.Logger.Warn("semantic cache: embedding the prompt failed", "model", m, "err", err)
			return false
		}
		p.vector = vecs[0]
		return true
	}
	p.terms = routing.LexicalVector(p.c.an, prompt, nil)
	return len(p.terms) > 0
}

func (c *Cache) similar(ctx context.Context, p *Probe, now time.Time) *Entry {
	c.mu.RLock()
	n := 0
	if part := c.parts[partKey(p.q.Tenant, p.q.Model)]; part != nil {
		n = len(part.entries)
	}
	c.mu.RUnlock()
	if n == 0 || !p.represent(ctx) {
		return nil
	}
	type cand struct {
		key string
		sim float64
	}
	var cands []cand
	c.mu.RLock()
	if part := c.parts[partKey(p.q.Tenant, p.q.Model)]; part != nil {
		for _, x := range part.entries {
			if x.context != p.context || !now.Before(x.expiresAt) {
				continue
			}
			var sim float64
			if p.vector != nil {
				sim = routing.CosineDense(p.vector, x.vector)
			} else {
				sim = routing.CosineTerms(p.terms, x.terms)
			}
			if sim >= p.q.Policy.Similarity {
				cands = append(cands, cand{x.key, sim})
			}
		}
	}
	c.mu.RUnlock()
	sort.Slice(cands, func(i, j int) bool { return cands[i].sim > cands[j].sim })
	for _, cd := range cands[:min(len(cands), 3)] {
		e, _, err := kv.Get[Entry](ctx, c.d.KV, cd.key)
		if err == nil && e.Tenant == p.q.Tenant && e.Model == p.q.Model && now.Before(e.ExpiresAt) {
			return &e
		}
		c.forget(cd.key)
	}
	return nil
}

// Store keeps answer (a complete chat completion) for the probe's request.
func (p *Probe) Store(ctx context.Context, comp routing.Completion, estimatedPrompt int64) {
	if p == nil || p.Hit != nil {
		return
	}
	prompt := estimatedPrompt
	if comp.Usage != nil && comp.Usage.PromptTokens > 0 {
		prompt = comp.Usage.PromptTokens
	}
	comp.Usage = &routing.Usage{PromptTokens: prompt, TotalTokens: prompt}
	comp.Usage.PromptTokenDetails = &struct {
		CachedTokens int64 `json:"cached_tokens"`
	}{prompt}
	body := comp.Body()
	if len(body) > MaxEntryBytes {
		return
	}
	ttl := p.q.Policy.TTL.D()
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	now := p.c.d.Now().UTC()
	e := Entry{Tenant: p.q.Tenant, Model: p.q.Model, Context: p.context, Body: body, PromptTokens: prompt, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if p.q.Policy.Similarity > 0 && p.represent(ctx) {
		e.Terms, e.Vector = p.terms, p.vector
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return
	}
	if _, err := p.c.d.KV.Create(ctx, p.key, raw, jetstream.KeyTTL(ttl)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		p.c.d.Logger.Warn("semantic cache: storing an answer failed", "model", p.q.Model, "err", err)
		return
	}
	p.c.keep(p.key, e)
}

// Purge removes the cached answers of model, of one tenant or (tenant "")
// of every tenant; it returns how many.
func (c *Cache) Purge(ctx context.Context, tenant, model string) (int, error) {
	lister, err := c.d.KV.ListKeysFiltered(ctx, Prefix(tenant, model)+">")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return 0, nil
		}
		return 0, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	n := 0
	for _, k := range keys {
		if err := c.d.KV.Purge(ctx, k); err != nil {
			return n, err
		}
		c.forget(k)
		n++
	}
	return n, nil
}
