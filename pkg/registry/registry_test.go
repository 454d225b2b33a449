package registry_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
)

// open starts a JetStream server, creates the buckets and opens a store.
func open(t *testing.T) (*registry.Store, jetstream.JetStream) {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := registry.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestOpenWithoutBuckets(t *testing.T) {
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := registry.Open(testCtx(t), js); err == nil {
		t.Fatal("Open succeeded without the buckets")
	}
}

func TestTenants(t *testing.T) {
	s, _ := open(t)
	ctx := testCtx(t)

	ts, err := s.ListTenants(ctx)
	if err != nil || len(ts) != 0 {
		t.Fatalf("empty registry: %v, %v", ts, err)
	}

	before := time.Now().UTC().Add(-time.Second)
	tn, err := s.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if tn.ID != "acme" || tn.CreatedAt.Before(before) {
		t.Fatalf("created %#v", tn)
	}
	if _, err := s.CreateTenant(ctx, "acme"); !errors.Is(err, registry.ErrExists) {
		t.Fatalf("duplicate tenant: err = %v, want ErrExists", err)
	}
	got, err := s.GetTenant(ctx, "acme")
	if err != nil || got.ID != "acme" || !got.CreatedAt.Equal(tn.CreatedAt) {
		t.Fatalf("GetTenant = %#v, %v", got, err)
	}
	if _, err := s.GetTenant(ctx, "nobody"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetTenant(missing) err = %v", err)
	}
	if _, err := s.GetTenant(ctx, "Bad.ID"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetTenant(invalid) err = %v", err)
	}

	for _, id := range []string{"zeta", "alpha", "mid-1", "b_2"} {
		if _, err := s.CreateTenant(ctx, id); err != nil {
			t.Fatalf("CreateTenant(%q): %v", id, err)
		}
	}
	ts, err = s.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tn := range ts {
		ids = append(ids, tn.ID)
	}
	if want := []string{"acme", "alpha", "b_2", "mid-1", "zeta"}; !slices.Equal(ids, want) {
		t.Fatalf("ListTenants = %v, want %v", ids, want)
	}
}

func TestTenantIDValidation(t *testing.T) {
	s, _ := open(t)
	ctx := testCtx(t)
	for _, id := range []string{"", "Acme", "-lead", "_lead", "has space", "a.b", "a*", "a>", "a/b", "ünï", strings.Repeat("a", 64)} {
		if registry.ValidTenantID(id) {
			t.Errorf("ValidTenantID(%q) = true", id)
		}
		if _, err := s.CreateTenant(ctx, id); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("CreateTenant(%q) err = %v, want ErrInvalid", id, err)
		}
	}
	for _, id := range []string{"a", "0", "acme_1-x", strings.Repeat("a", 63)} {
		if !registry.ValidTenantID(id) {
			t.Errorf("ValidTenantID(%q) = false", id)
		}
		if _, err := s.CreateTenant(ctx, id); err != nil {
			t.Errorf("CreateTenant(%q): %v", id, err)
		}
	}
}

func TestKeys(t *testing.T) {
	s, js := open(t)
	ctx := testCtx(t)

	if _, _, err := s.CreateKey(ctx, "ghost", "k", nil, registry.Limits{}); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("key for a missing tenant: err = %v, want ErrInvalid", err)
	}
	if _, _, err := s.CreateKey(ctx, "Not Valid", "k", nil, registry.Limits{}); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("key for an invalid tenant id: err = %v, want ErrInvalid", err)
	}
	if _, err := s.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTenant(ctx, "other"); err != nil {
		t.Fatal(err)
	}

	k, secret, err := s.CreateKey(ctx, "acme", "ci", []string{"llama-*"}, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if k.Tenant != "acme" || k.Name != "ci" || !slices.Equal(k.Models, []string{"llama-*"}) || k.CreatedAt.IsZero() {
		t.Fatalf("key record %#v", k)
	}
	if !strings.HasPrefix(secret, registry.KeyPrefix) || registry.KeyPrefix != "sk-af-" {
		t.Fatalf("secret %q lacks the prefix sk-af-", secret)
	}
	if len(secret) < len(registry.KeyPrefix)+16+1+40 {
		t.Fatalf("secret %q is too short to carry 256 random bits", secret)
	}
	if id, ok := registry.KeyIDOf(secret); !ok || id != k.ID {
		t.Fatalf("KeyIDOf(secret) = %q, %v; want %q", id, ok, k.ID)
	}
	if k.Hash != registry.HashSecret(secret) || strings.Contains(k.Hash, secret) {
		t.Fatalf("hash %q is not HashSecret(secret)", k.Hash)
	}

	// Default models: everything.
	k2, secret2, err := s.CreateKey(ctx, "acme", "", nil, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k2.Models, []string{"*"}) {
		t.Fatalf("default models = %v", k2.Models)
	}
	if secret2 == secret || k2.ID == k.ID {
		t.Fatal("two keys share a secret or an id")
	}
	k3, _, err := s.CreateKey(ctx, "other", "o", []string{"m"}, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}

	// Verify.
	got, err := s.GetKey(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Verify(secret) {
		t.Fatal("Verify(secret) = false")
	}
	last := secret[len(secret)-1]
	flip := byte('A')
	if last == 'A' {
		flip = 'B'
	}
	for _, bad := range []string{"", secret[:len(secret)-1], secret + "x", secret[:len(secret)-1] + string(flip), secret2, strings.ToUpper(secret)} {
		if got.Verify(bad) {
			t.Fatalf("Verify(%q) = true", bad)
		}
	}
	if (&registry.Key{Hash: "not hex"}).Verify("") {
		t.Fatal("Verify with a malformed hash = true")
	}

	// The stored record holds the hash, never the secret or any part of its
	// random tail.
	entry, err := mustKV(t, js, events.BucketKeys).Get(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	raw := string(entry.Value())
	_, tail, _ := strings.Cut(strings.TrimPrefix(secret, registry.KeyPrefix), "-")
	if strings.Contains(raw, secret) || strings.Contains(raw, tail) {
		t.Fatalf("stored key record contains the secret: %s", raw)
	}
	if !strings.Contains(raw, k.Hash) {
		t.Fatalf("stored key record lacks the hash: %s", raw)
	}

	// Lists.
	all, err := s.ListKeys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if ids := keyIDs(all); !slices.Equal(ids, []string{k.ID, k2.ID, k3.ID}) {
		t.Fatalf("ListKeys(all) = %v, want creation order %v", ids, []string{k.ID, k2.ID, k3.ID})
	}
	acme, err := s.ListKeys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if ids := keyIDs(acme); !slices.Equal(ids, []string{k.ID, k2.ID}) {
		t.Fatalf("ListKeys(acme) = %v", ids)
	}
	none, err := s.ListKeys(ctx, "nobody")
	if err != nil || len(none) != 0 {
		t.Fatalf("ListKeys(nobody) = %v, %v", none, err)
	}

	// Revoke.
	if err := s.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetKey(ctx, k.ID); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetKey after revoke: err = %v, want ErrNotFound", err)
	}
	if err := s.RevokeKey(ctx, k.ID); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("second revoke: err = %v, want ErrNotFound", err)
	}
	for _, id := range []string{"key_doesnotexist", "", "a b", "key.*", ">", strings.Repeat("k", 300)} {
		if err := s.RevokeKey(ctx, id); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("RevokeKey(%q) err = %v, want ErrNotFound", id, err)
		}
		if _, err := s.GetKey(ctx, id); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("GetKey(%q) err = %v, want ErrNotFound", id, err)
		}
	}
	left, err := s.ListKeys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if ids := keyIDs(left); !slices.Equal(ids, []string{k2.ID}) {
		t.Fatalf("ListKeys after revoke = %v", ids)
	}
}

func keyIDs(ks []registry.Key) []string {
	var ids []string
	for _, k := range ks {
		ids = append(ids, k.ID)
	}
	return ids
}

func mustKV(t *testing.T, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(testCtx(t), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func TestKeyIDOf(t *testing.T) {
	good := "sk-af-0123456789abcdef-c2VjcmV0c2VjcmV0c2VjcmV0"
	if id, ok := registry.KeyIDOf(good); !ok || id != "key_0123456789abcdef" {
		t.Fatalf("KeyIDOf(%q) = %q, %v", good, id, ok)
	}
	for _, bad := range []string{
		"",
		"sk-af-",
		"sk-0123456789abcdef-xyz",
		"sk-af0123456789abcdef-xyz",
		"SK-AF-0123456789abcdef-xyz",
		"sk-af-0123456789abcdefxyz",       // no separator
		"sk-af-0123456789abcde-xyz",       // id too short
		"sk-af-0123456789abcdef0-xyz",     // id too long
		"Bearer sk-af-0123456789abcdef-x", // junk before the prefix
		"sk-proj-0123456789abcdef-xyz",
	} {
		if id, ok := registry.KeyIDOf(bad); ok {
			t.Errorf("KeyIDOf(%q) = %q, true; want rejected", bad, id)
		}
	}
}

func TestAllows(t *testing.T) {
	cases := []struct {
		models []string
		model  string
		want   bool
	}{
		{[]string{"*"}, "anything/at:all", true},
		{[]string{"llama"}, "llama", true},
		{[]string{"llama"}, "llama-3", false},
		{[]string{"llama"}, "Llama", false},
		{[]string{"llama-*"}, "llama-3.1-8b", true},
		{[]string{"llama-*"}, "llama-", true},
		{[]string{"llama-*"}, "llama", false},
		{[]string{"llama-*"}, "mistral-7b", false},
		{[]string{"llama-*"}, "x-llama-3", false},
		{[]string{"meta-llama/*"}, "meta-llama/Llama-3.1-8B:q4", true},
		{[]string{"mistral", "llama-*"}, "llama-70b", true},
		{[]string{"mistral", "llama-*"}, "mistral", true},
		{[]string{"mistral", "llama-*"}, "qwen", false},
		{nil, "llama", false},
		{[]string{}, "", false},
	}
	for _, c := range cases {
		k := registry.Key{Models: c.models}
		if got := k.Allows(c.model); got != c.want {
			t.Errorf("Key{Models:%q}.Allows(%q) = %v, want %v", c.models, c.model, got, c.want)
		}
	}
}

func validModel(name string) registry.Model {
	return registry.Model{Name: name, Engine: registry.Engine{BaseURL: "http://127.0.0.1:8000/v1", Model: "up"}}
}

func TestValidateModel(t *testing.T) {
	if err := registry.ValidateModel(validModel("meta-llama/Llama-3.1-8B:q4")); err != nil {
		t.Fatalf("valid model refused: %v", err)
	}
	https := validModel("m")
	https.Engine.BaseURL = "https://engine.example/v1"
	https.Engine.MaxConcurrency = 8
	if err := registry.ValidateModel(https); err != nil {
		t.Fatalf("https model refused: %v", err)
	}
	mut := func(f func(*registry.Model)) registry.Model { m := validModel("m"); f(&m); return m }
	cases := map[string]registry.Model{
		"empty name":           mut(func(m *registry.Model) { m.Name = "" }),
		"space in name":        mut(func(m *registry.Model) { m.Name = "a b" }),
		"tab in name":          mut(func(m *registry.Model) { m.Name = "a\tb" }),
		"newline in name":      mut(func(m *registry.Model) { m.Name = "a\nb" }),
		"name too long":        mut(func(m *registry.Model) { m.Name = strings.Repeat("n", 257) }),
		"no base url":          mut(func(m *registry.Model) { m.Engine.BaseURL = "" }),
		"ftp base url":         mut(func(m *registry.Model) { m.Engine.BaseURL = "ftp://x/v1" }),
		"relative base url":    mut(func(m *registry.Model) { m.Engine.BaseURL = "127.0.0.1:8000/v1" }),
		"no upstream model":    mut(func(m *registry.Model) { m.Engine.Model = "" }),
		"negative concurrency": mut(func(m *registry.Model) { m.Engine.MaxConcurrency = -1 }),
		"unknown fusion":       mut(func(m *registry.Model) { m.HybridSearch = &registry.HybridSearch{Fusion: "max"} }),
		"negative hybrid weight": mut(func(m *registry.Model) {
			m.HybridSearch = &registry.HybridSearch{Fusion: registry.FusionZScore, EmbeddingWeight: -1, TextWeight: 1}
		}),
		"hybrid on a reranker": mut(func(m *registry.Model) {
			m.Kind = registry.ModelKindRerank
			m.HybridSearch = &registry.HybridSearch{Fusion: registry.FusionZScore, EmbeddingWeight: 1.5, TextWeight: 1}
		}),
	}
	for name, m := range cases {
		if err := registry.ValidateModel(m); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if err := registry.ValidateModel(validModel(strings.Repeat("n", 256))); err != nil {
		t.Errorf("256-character name refused: %v", err)
	}
	if err := registry.ValidateModel(mut(func(m *registry.Model) {
		m.HybridSearch = &registry.HybridSearch{Fusion: registry.FusionZScore, EmbeddingWeight: 1.5, TextWeight: 1}
	})); err != nil {
		t.Errorf("an embedding model's hybrid_search refused: %v", err)
	}
	// Every problem is reported at once.
	err := registry.ValidateModel(registry.Model{})
	for _, want := range []string{"name", "base_url", "engine.model"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateModel(zero) = %v, want it to mention %q", err, want)
		}
	}
}

func TestRedacted(t *testing.T) {
	m := validModel("m")
	m.Engine.APIKey = "engine-secret-123"
	r := m.Redacted()
	if r.Engine.APIKey != "redacted" {
		t.Fatalf("Redacted api key = %q", r.Engine.APIKey)
	}
	if m.Engine.APIKey != "engine-secret-123" {
		t.Fatal("Redacted modified its receiver")
	}
	if r.Name != m.Name || r.Engine.BaseURL != m.Engine.BaseURL || r.Engine.Model != m.Engine.Model {
		t.Fatalf("Redacted changed other fields: %#v", r)
	}
	if got := validModel("m").Redacted().Engine.APIKey; got != "" {
		t.Fatalf("Redacted of a model without key = %q, want empty", got)
	}
}

func TestModels(t *testing.T) {
	s, _ := open(t)
	ctx := testCtx(t)
	priv, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.Public()

	ms, err := s.ListModels(ctx)
	if err != nil || len(ms) != 0 {
		t.Fatalf("empty ListModels = %v, %v", ms, err)
	}
	names := []string{"meta-llama/Llama-3.1-8B:q4", "zeta", "Alpha.v1", "alpha.v1", "qwen2.5:7b-instruct", "a/b/c", "ünïcode-model"}
	for i, n := range names {
		m := validModel(n)
		m.Engine.Model = "upstream-" + n
		m.Engine.MaxConcurrency = i
		m.OwnedBy = "owner"
		if i == 0 {
			m.Engine.APIKey = "engine-key"
			if err := m.SealEngineKey(pub); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutModel(ctx, m); err != nil {
			t.Fatalf("PutModel(%q): %v", n, err)
		}
		if k := registry.ModelKey(n); !strings.HasPrefix(k, "m.") || strings.ContainsAny(k, "/:*> ") {
			t.Fatalf("ModelKey(%q) = %q is not a plain KV key", n, k)
		}
	}
	for i, n := range names {
		m, err := s.GetModel(ctx, n)
		if err != nil {
			t.Fatalf("GetModel(%q): %v", n, err)
		}
		if m.Name != n || m.Engine.Model != "upstream-"+n || m.Engine.MaxConcurrency != i || m.CreatedAt.IsZero() || m.OwnedBy != "owner" {
			t.Fatalf("GetModel(%q) = %#v", n, m)
		}
	}
	// The store keeps the engine key sealed (workers open it); views redact.
	if m, _ := s.GetModel(ctx, names[0]); m.Engine.APIKey != "" || m.Engine.APIKeySealed == "" {
		t.Fatalf("stored engine = %+v", m.Engine)
	} else if o, err := m.OpenEngineKey(priv); err != nil || o.Engine.APIKey != "engine-key" {
		t.Fatalf("opened api key = %q, %v", o.Engine.APIKey, err)
	}
	ms, err = s.ListModels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Name)
	}
	want := slices.Clone(names)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ListModels = %q, want %q", got, want)
	}

	// Replace keeps a given CreatedAt and changes the binding.
	created := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	m := validModel("zeta")
	m.Engine.Model = "replaced"
	m.CreatedAt = created
	if err := s.PutModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	if m2, err := s.GetModel(ctx, "zeta"); err != nil || m2.Engine.Model != "replaced" || !m2.CreatedAt.Equal(created) {
		t.Fatalf("after replace: %#v, %v", m2, err)
	}

	if err := s.PutModel(ctx, validModel("bad name")); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("PutModel(invalid) err = %v", err)
	}
	if _, err := s.GetModel(ctx, "missing/model"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetModel(missing) err = %v", err)
	}

	if err := s.DeleteModel(ctx, "meta-llama/Llama-3.1-8B:q4"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetModel(ctx, "meta-llama/Llama-3.1-8B:q4"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetModel after delete: %v", err)
	}
	if err := s.DeleteModel(ctx, "meta-llama/Llama-3.1-8B:q4"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	// Case matters: deleting one spelling leaves the other.
	if err := s.DeleteModel(ctx, "alpha.v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetModel(ctx, "Alpha.v1"); err != nil {
		t.Fatalf("Alpha.v1 gone with alpha.v1: %v", err)
	}
	ms, err = s.ListModels(ctx)
	if err != nil || len(ms) != len(names)-2 {
		t.Fatalf("ListModels after deletes = %d models, %v", len(ms), err)
	}
}

// TestTenantTraceContent: trace_content is off unless a tenant is created
// with it or has it set, survives other updates, and a record written
// before the field existed reads as off.
func TestTenantTraceContent(t *testing.T) {
	s, js := open(t)
	ctx := testCtx(t)
	plain, err := s.CreateTenant(ctx, "plain")
	if err != nil || plain.TraceContent {
		t.Fatalf("CreateTenant = %+v, %v; want trace_content off", plain, err)
	}
	on, err := s.CreateTenantWith(ctx, "traced", registry.TenantOptions{TraceContent: true})
	if err != nil || !on.TraceContent || on.Admission == nil || on.Admission.Mode != registry.AdmissionBlock {
		t.Fatalf("CreateTenantWith = %+v, %v; want trace_content on and the default admission", on, err)
	}
	if got, err := s.GetTenant(ctx, "traced"); err != nil || !got.TraceContent {
		t.Fatalf("GetTenant(traced) = %+v, %v", got, err)
	}
	if got, err := s.UpdateTenantLimits(ctx, "traced", func(l *registry.Limits) { l.MaxBudgetUSD = 5 }); err != nil || !got.TraceContent {
		t.Fatalf("a limits update lost trace_content: %+v, %v", got, err)
	}
	if got, err := s.SetTenantTraceContent(ctx, "traced", false); err != nil || got.TraceContent || got.MaxBudgetUSD != 5 {
		t.Fatalf("SetTenantTraceContent(false) = %+v, %v", got, err)
	}
	if got, err := s.SetTenantTraceContent(ctx, "plain", true); err != nil || !got.TraceContent {
		t.Fatalf("SetTenantTraceContent(true) = %+v, %v", got, err)
	}
	if _, err := s.SetTenantTraceContent(ctx, "nobody", true); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("SetTenantTraceContent(missing) err = %v, want ErrNotFound", err)
	}
	if _, err := s.SetTenantTraceContent(ctx, "Bad.ID", true); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("SetTenantTraceContent(invalid) err = %v, want ErrNotFound", err)
	}

	// A record of an earlier release, without the field.
	kvb, err := js.KeyValue(ctx, events.BucketTenants)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvb.Put(ctx, "t.legacy", []byte(`{"id":"legacy","created_at":"2024-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetTenant(ctx, "legacy"); err != nil || got.TraceContent {
		t.Fatalf("legacy tenant = %+v, %v; want trace_content off", got, err)
	}
}
