package semcache

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/routing"
)

// The exact key is the canonical request: the order of fields (nested
// ones too) and whitespace do not change it, nor do the fields that do
// not change the answer (stream, user, metadata, ...); every parameter
// that does changes it. The context (the request without its last user
// message) changes with everything but that message.
func TestCanonicalKey(t *testing.T) {
	base := `{"model":"chat","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"What is NATS?"}],"temperature":0,"max_tokens":64}`
	full0, rest0, ok := canonical([]byte(base))
	if !ok {
		t.Fatal("base not canonical")
	}
	same := []string{
		"{\n  \"max_tokens\": 64,\n  \"temperature\": 0,\n  \"messages\": [ {\"content\":\"be brief\", \"role\":\"system\"},\t{\"content\":\"What is NATS?\",\"role\":\"user\"} ],\n  \"model\": \"chat\"\n}",
		`{"model":"other-name","stream":true,"stream_options":{"include_usage":true},"user":"bob","metadata":{"k":"v"},"store":true,"n":1,"service_tier":"auto",` +
			`"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"What is NATS?"}],"temperature":0,"max_tokens":64}`,
	}
	for _, b := range same {
		full, rest, ok := canonical([]byte(b))
		if !ok || !bytes.Equal(full, full0) || !bytes.Equal(rest, rest0) {
			t.Errorf("%s\n  full %s\n  want %s", b, full, full0)
		}
	}
	changed := map[string]bool{ // body -> whether the context (rest) changes too
		strings.Replace(base, `"max_tokens":64`, `"max_tokens":65`, 1):                                        true,
		strings.Replace(base, `"temperature":0`, `"temperature":0.2`, 1):                                      true,
		strings.Replace(base, `"max_tokens":64`, `"max_tokens":64,"seed":7`, 1):                               true,
		strings.Replace(base, `"max_tokens":64`, `"max_tokens":64,"stop":["\n"]`, 1):                          true,
		strings.Replace(base, `be brief`, `be thorough`, 1):                                                   true,
		strings.Replace(base, `What is NATS?`, `What is JetStream?`, 1):                                       false,
		strings.Replace(base, `"role":"user","content":"What`, `"role":"user","name":"x","content":"What`, 1): false,
	}
	for b, restChanges := range changed {
		full, rest, ok := canonical([]byte(b))
		if !ok || bytes.Equal(full, full0) {
			t.Errorf("%s: same key as the base", b)
		}
		if bytes.Equal(rest, rest0) == restChanges {
			t.Errorf("%s: context changed %v, want %v", b, !bytes.Equal(rest, rest0), restChanges)
		}
	}
	if _, _, ok := canonical([]byte(`not json`)); ok {
		t.Error("not JSON was canonical")
	}
}

func TestCacheable(t *testing.T) {
	zero := registry.CachePolicy{Enabled: true}
	warm := registry.CachePolicy{Enabled: true, MaxTemperature: 0.5}
	for _, tc := range []struct {
		body string
		p    registry.CachePolicy
		want bool
	}{
		{`{"temperature":0}`, zero, true},
		{`{}`, zero, false}, // absent counts as 1
		{`{}`, registry.CachePolicy{MaxTemperature: 1}, true},
		{`{"temperature":0.3}`, zero, false},
		{`{"temperature":0.3}`, warm, true},
		{`{"temperature":0.7}`, warm, false},
		{`{"temperature":0,"n":2}`, zero, false},
		{`{"temperature":0,"n":1}`, zero, true},
		{`{"temperature":"0"}`, zero, false},
	} {
		if got := Cacheable([]byte(tc.body), tc.p); got != tc.want {
			t.Errorf("%s under %+v: %v", tc.body, tc.p, got)
		}
	}
}

type fixture struct {
	c   *Cache
	kv  jetstream.KeyValue
	mu  sync.Mutex
	now time.Time
}

func (f *fixture) clock() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := js.KeyValue(ctx, events.BucketSemanticCache)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{kv: b, now: time.Now()}
	if f.c, err = New(Deps{KV: b, JS: js, Now: f.clock}); err != nil {
		t.Fatal(err)
	}
	return f
}

var similar = registry.CachePolicy{Enabled: true, Similarity: 0.8, TTL: registry.Duration(time.Hour)}

func body(prompt string) []byte {
	b, _ := json.Marshal(map[string]any{"model": "chat", "temperature": 0, "messages": []map[string]any{{"role": "user", "content": prompt}}})
	return b
}

func (f *fixture) lookup(t *testing.T, tenant, model, prompt string) *Probe {
	t.Helper()
	p := f.c.Lookup(context.Background(), Query{Tenant: tenant, KeyID: "k", Model: model, Body: body(prompt), Policy: similar})
	if p == nil {
		t.Fatalf("%s/%s %q: not cacheable", tenant, model, prompt)
	}
	return p
}

// store answers prompt for tenant and model through a miss.
func (f *fixture) store(t *testing.T, tenant, model, prompt, answer string) {
	t.Helper()
	p := f.lookup(t, tenant, model, prompt)
	if p.Hit != nil {
		t.Fatalf("%s/%s %q: a hit before it was stored", tenant, model, prompt)
	}
	p.Store(context.Background(), routing.Completion{ID: "chatcmpl-" + tenant, Model: model, Content: answer, FinishReason: "stop",
		Usage: &routing.Usage{PromptTokens: 9, CompletionTokens: 5, TotalTokens: 14}}, 3)
}

func hitContent(t *testing.T, p *Probe) string {
	t.Helper()
	if p.Hit == nil {
		return ""
	}
	c, ok := routing.ParseCompletion(p.Hit.Body)
	if !ok {
		t.Fatalf("hit body %s", p.Hit.Body)
	}
	return c.Content
}

// Tenant and model partition the cache hard: the same prompt, or a
// similar one, of another tenant or model is a miss.
func TestPartitionByTenantAndModel(t *testing.T) {
	f := newFixture(t)
	const q, reworded = "What is the capital city of France?", "The capital city of France is what?"
	f.store(t, "acme", "chat", q, "Paris")

	p := f.lookup(t, "acme", "chat", q)
	if p.Kind != events.CacheExact || hitContent(t, p) != "Paris" {
		t.Fatalf("same tenant and model: %q %q", p.Kind, hitContent(t, p))
	}
	var u struct {
		Usage routing.Usage `json:"usage"`
	}
	if err := json.Unmarshal(p.Hit.Body, &u); err != nil || u.Usage.PromptTokens != 9 || u.Usage.CompletionTokens != 0 ||
		u.Usage.PromptTokenDetails == nil || u.Usage.PromptTokenDetails.CachedTokens != 9 || p.Hit.PromptTokens != 9 {
		t.Fatalf("hit usage %+v (%v)", u.Usage, err)
	}
	if p := f.lookup(t, "acme", "chat", reworded); p.Kind != events.CacheSimilar || hitContent(t, p) != "Paris" {
		t.Fatalf("similar prompt: %q", p.Kind)
	}
	for _, tc := range []struct{ tenant, model, prompt string }{
		{"globex", "chat", q}, {"globex", "chat", reworded}, {"acme", "chat2", q}, {"acme", "chat2", reworded}, {"acm", "chat", q},
	} {
		if p := f.lookup(t, tc.tenant, tc.model, tc.prompt); p.Hit != nil {
			t.Errorf("%+v: a %s hit across the partition", tc, p.Kind)
		}
	}
	// The same request of two tenants has two keys, each under its
	// tenant's and model's prefix.
	a, g := f.lookup(t, "acme", "chat", q), f.lookup(t, "globex", "chat", q)
	if a.key == g.key || !strings.HasPrefix(a.key, Prefix("acme", "chat")) || !strings.HasPrefix(g.key, Prefix("globex", "chat")) {
		t.Fatalf("keys %s %s", a.key, g.key)
	}
	if strings.HasPrefix(Prefix("acme", "ab"), Prefix("acme", "a")) {
		t.Fatalf("model prefixes overlap: %s %s", Prefix("acme", "a"), Prefix("acme", "ab"))
	}

	// An entry whose record names another tenant than its key is never
	// served, exactly or by similarity.
	globexKey := g.key
	forged := Entry{Tenant: "acme", Model: "chat", Context: a.context, Terms: routing.LexicalVector(f.c.an, q, nil),
		Body: json.RawMessage(`{"choices":[]}`), ExpiresAt: f.clock().Add(time.Hour)}
	raw, _ := json.Marshal(forged)
	if _, err := f.kv.Put(context.Background(), globexKey, raw); err != nil {
		t.Fatal(err)
	}
	f.c.index(globexKey, forged)
	for _, prompt := range []string{q, reworded} {
		if p := f.lookup(t, "globex", "chat", prompt); p.Hit != nil {
			t.Fatalf("%q: an entry of tenant acme under globex's key served: %s", prompt, p.Hit.Body)
		}
	}
}

// An answer just stored is an exact hit of its own prompt even before the
// watch delivers it: the watch has synced the bucket's earlier state, so
// without Store noting the key the lookup took it for absent and served
// the answer as a similar hit of itself.
func TestStoredAnswerIsExactBeforeTheWatchDeliversIt(t *testing.T) {
	f := newFixture(t)
	f.c.synced.Store(true) // the watch's initial state is in; the new key is not yet
	const q = "What is the capital city of France?"
	f.store(t, "acme", "chat", q, "Paris")
	if p := f.lookup(t, "acme", "chat", q); p.Kind != events.CacheExact || hitContent(t, p) != "Paris" {
		t.Fatalf("the stored prompt: a %q hit", p.Kind)
	}
}

// Entries expire at their TTL (exact and similar lookups alike), and
// Purge removes one tenant's, or every tenant's, answers of one model
// only.
func TestExpiryAndPurge(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.store(t, "acme", "chat", "how many moons does mars have", "two")
	f.advance(59 * time.Minute)
	if p := f.lookup(t, "acme", "chat", "how many moons does mars have"); p.Kind != events.CacheExact {
		t.Fatalf("before the TTL: %q", p.Kind)
	}
	f.advance(2 * time.Minute)
	for _, q := range []string{"how many moons does mars have", "mars: how many moons does it have"} {
		if p := f.lookup(t, "acme", "chat", q); p.Hit != nil {
			t.Fatalf("%q after the TTL: a %s hit", q, p.Kind)
		}
	}

	f = newFixture(t)
	for _, tm := range [][2]string{{"acme", "a"}, {"globex", "a"}, {"acme", "ab"}} {
		f.store(t, tm[0], tm[1], "name the largest planet", "Jupiter")
		f.store(t, tm[0], tm[1], "name the smallest planet", "Mercury")
	}
	if n, err := f.c.Purge(ctx, "acme", "a"); err != nil || n != 2 {
		t.Fatalf("purge acme/a: %d %v", n, err)
	}
	if p := f.lookup(t, "acme", "a", "name the largest planet"); p.Hit != nil {
		t.Fatalf("acme/a after its purge: %s", p.Kind)
	}
	if p := f.lookup(t, "acme", "a", "the largest planet: name it"); p.Hit != nil {
		t.Fatalf("acme/a after its purge, similar: %s", p.Kind)
	}
	for _, tm := range [][2]string{{"globex", "a"}, {"acme", "ab"}} {
		if p := f.lookup(t, tm[0], tm[1], "name the largest planet"); p.Kind != events.CacheExact {
			t.Fatalf("%v after acme/a's purge: %q", tm, p.Kind)
		}
	}
	if n, err := f.c.Purge(ctx, "", "a"); err != nil || n != 2 {
		t.Fatalf("purge every tenant of a: %d %v", n, err)
	}
	if p := f.lookup(t, "globex", "a", "name the largest planet"); p.Hit != nil {
		t.Fatalf("globex/a after the purge of a: %s", p.Kind)
	}
	if p := f.lookup(t, "acme", "ab", "name the largest planet"); p.Kind != events.CacheExact {
		t.Fatalf("acme/ab after the purge of a: %q", p.Kind)
	}
	if n, err := f.c.Purge(ctx, "nobody", "a"); err != nil || n != 0 {
		t.Fatalf("purge with nothing: %d %v", n, err)
	}
}

// A request that is not cacheable, or a policy that is off, is not looked
// up at all.
func TestLookupSkipsWhatIsNotCacheable(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if p := f.c.Lookup(ctx, Query{Tenant: "acme", Model: "chat", Body: []byte(`{"messages":[{"role":"user","content":"hi"}]}`), Policy: similar}); p != nil {
		t.Error("a request without temperature was looked up")
	}
	if p := f.c.Lookup(ctx, Query{Tenant: "acme", Model: "chat", Body: body("hi"), Policy: registry.CachePolicy{}}); p != nil {
		t.Error("looked up under a disabled policy")
	}
	var nilCache *Cache
	if p := nilCache.Lookup(ctx, Query{Tenant: "acme", Model: "chat", Body: body("hi"), Policy: similar}); p != nil {
		t.Error("a nil cache looked up")
	}
}
