package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/registry"
)

// bucket creates the bucket of the bus contract named name on a fresh
// JetStream server.
func bucket(t *testing.T, name string) jetstream.KeyValue {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, kc := range events.Buckets(events.StreamOptions{}) {
		if kc.Bucket == name {
			kv, err := js.CreateKeyValue(ctx, kc)
			if err != nil {
				t.Fatal(err)
			}
			return kv
		}
	}
	t.Fatalf("no bucket %s in the bus contract", name)
	return nil
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A record is read back whole, inline or in chunks, by its tenant only;
// a deleted one is gone; an id of the wrong shape is not found without a
// read; a record over the limit is refused, never cut.
func TestStoreRoundTripChunksTenants(t *testing.T) {
	st := &store{kv: bucket(t, events.BucketResponses), ttl: time.Hour}
	ctx := testCtx(t)
	old := chunkBytes
	chunkBytes = 4 << 10
	t.Cleanup(func() { chunkBytes = old })

	small := &record{ID: "resp_small1", CreatedAt: 1, Response: json.RawMessage(`{"id":"resp_small1"}`),
		Input: []storedItem{{ID: "msg_a0000", Role: "user", Content: "hi"}}, Output: []storedItem{{ID: "msg_a", Role: "assistant", Content: "hello"}}}
	big := &record{ID: "resp_big1", CreatedAt: 2, Response: json.RawMessage(`{"id":"resp_big1"}`),
		Input:   []storedItem{{ID: "msg_b0000", Role: "user", Content: strings.Repeat("x", 50<<10)}},
		Context: []storedItem{{ID: "msg_c", Role: "user", Content: strings.Repeat("y", 20<<10) + "end"}}}
	for _, rec := range []*record{small, big} {
		if err := st.put(ctx, "acme", rec); err != nil {
			t.Fatal(err)
		}
	}
	// The big one was written as chunks.
	if _, err := st.kv.Get(ctx, recordKey("acme", big.ID)+".0"); err != nil {
		t.Fatalf("no chunk 0 of the big record: %v", err)
	}
	for _, want := range []*record{small, big} {
		got, ok, err := st.get(ctx, "acme", want.ID)
		if err != nil || !ok {
			t.Fatalf("get %s: %v %v", want.ID, ok, err)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if !bytes.Equal(a, b) {
			t.Fatalf("%s read back differently (%d vs %d bytes)", want.ID, len(a), len(b))
		}
		if _, ok, _ := st.get(ctx, "other", want.ID); ok {
			t.Fatalf("%s readable by another tenant", want.ID)
		}
	}
	conv := big.conversation()
	if len(conv) != 2 || conv[0].ID != "msg_c" || conv[1].ID != "msg_b0000" {
		t.Fatalf("conversation %+v", conv)
	}
	if ok, err := st.delete(ctx, "other", big.ID); ok || err != nil {
		t.Fatalf("another tenant deleted it: %v %v", ok, err)
	}
	if ok, err := st.delete(ctx, "acme", big.ID); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if _, ok, _ := st.get(ctx, "acme", big.ID); ok {
		t.Fatal("a deleted response is still read")
	}
	for _, bad := range []string{"", "resp_", "resp_a.b", "resp_*", "msg_1", "resp_" + strings.Repeat("a", 65)} {
		if _, ok, err := st.get(ctx, "acme", bad); ok || err != nil {
			t.Fatalf("id %q: %v %v", bad, ok, err)
		}
	}
	huge := &record{ID: "resp_huge", Input: []storedItem{{Content: strings.Repeat("z", MaxRecordBytes)}}}
	if err := st.put(ctx, "acme", huge); err == nil || notStored(err).Code != contracts.CodeConversationTooLarge {
		t.Fatalf("a record over the limit: %v", err)
	}
}

// Every stored record expires with the configured retention.
func TestStoreRetentionIsPerKeyTTL(t *testing.T) {
	st := &store{kv: bucket(t, events.BucketResponses), ttl: time.Second}
	ctx := testCtx(t)
	if err := st.put(ctx, "acme", &record{ID: "resp_ttl1", Response: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := st.get(ctx, "acme", "resp_ttl1"); !ok {
		t.Fatal("not stored")
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, ok, _ := st.get(ctx, "acme", "resp_ttl1"); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a response with a 1s retention is still read after 15s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The A/B chooser splits 1,000 requests within 5 points of the weights,
// and a request id always gets the same version.
func TestChooseSplitsByWeight(t *testing.T) {
	for _, weights := range [][]labelTarget{
		{{Version: "1", Weight: 80}, {Version: "2", Weight: 20}},
		{{Version: "1", Weight: 50}, {Version: "2", Weight: 50}},
		{{Version: "3", Weight: 10}, {Version: "4", Weight: 30}, {Version: "5", Weight: 60}},
	} {
		counts := map[string]int{}
		const n = 1000
		for i := range n {
			id := fmt.Sprintf("resp_%024x", i*7919+13)
			v := choose(weights, id)
			if choose(weights, id) != v {
				t.Fatalf("id %s chose differently twice", id)
			}
			counts[v]++
		}
		for _, w := range weights {
			got := float64(counts[w.Version]) * 100 / n
			if d := got - float64(w.Weight); d > 5 || d < -5 {
				t.Fatalf("weights %+v: version %s got %.1f%% of %d requests (counts %v)", weights, w.Version, got, n, counts)
			}
		}
		t.Logf("weights %+v: %v", weights, counts)
	}
	if v := choose([]labelTarget{{Version: "7", Weight: 100}}, "x"); v != "7" {
		t.Fatalf("one target chose %q", v)
	}
}

// Variables are substituted once, a missing one is named, and the
// substituted size is bounded.
func TestSubstitute(t *testing.T) {
	budget := int64(1000)
	got, e := substitute("Hello {{name}}, from {{ city }}; {{name}}.", map[string]string{"name": "Ada {{city}}", "city": "Paris"}, &budget, "pmpt_x", "2")
	if e != nil || got != "Hello Ada {{city}}, from Paris; Ada {{city}}." {
		t.Fatalf("got %q %v", got, e)
	}
	if _, e := substitute("Hi {{who}}", map[string]string{}, &budget, "pmpt_x", "2"); e == nil || e.Code != contracts.CodeMissingPromptVariable ||
		e.Param != "prompt.variables" || !strings.Contains(e.Message, "'who'") || e.Status != http.StatusBadRequest {
		t.Fatalf("missing variable: %+v", e)
	}
	small := int64(10)
	if _, e := substitute("{{v}}{{v}}", map[string]string{"v": "123456"}, &small, "pmpt_x", "2"); e == nil || e.Status != http.StatusBadRequest {
		t.Fatalf("over the budget: %+v", e)
	}
	if vs := templateVariables("{{b}} {{a}}", "{{ b }} {{c_1}}", "{{ not a var }}"); strings.Join(vs, ",") != "a,b,c_1" {
		t.Fatalf("variables %v", vs)
	}
	raw := map[string]json.RawMessage{"s": json.RawMessage(`"x"`), "p": json.RawMessage(`{"type":"input_text","text":"y"}`)}
	vars, e := parseVariables(raw)
	if e != nil || vars["s"] != "x" || vars["p"] != "y" {
		t.Fatalf("variables %v %v", vars, e)
	}
	if _, e := parseVariables(map[string]json.RawMessage{"n": json.RawMessage(`3`)}); e == nil || e.Code != contracts.CodeInvalidType {
		t.Fatalf("a number variable: %+v", e)
	}
	if _, e := parseVariables(map[string]json.RawMessage{"s": json.RawMessage(`"` + strings.Repeat("a", MaxVariableBytes+1) + `"`)}); e == nil || e.Code != contracts.CodeStringTooLong {
		t.Fatalf("a long variable: %+v", e)
	}
}

// promptAPI serves the prompts API with the tenant named by the bearer.
type promptAPI struct {
	t   *testing.T
	srv *httptest.Server
	p   *prompts
}

func newPromptAPI(t *testing.T) *promptAPI {
	p := &prompts{kv: bucket(t, events.BucketPrompts), now: time.Now}
	mux := http.NewServeMux()
	p.routes(mux, func(r *http.Request) *registry.Key {
		tenant := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if tenant == "" {
			return nil
		}
		return &registry.Key{ID: "key_" + tenant, Tenant: tenant}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &promptAPI{t: t, srv: srv, p: p}
}

func (a *promptAPI) do(tenant, method, path string, body any) (int, map[string]any) {
	a.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, a.srv.URL+path, rd)
	if tenant != "" {
		req.Header.Set("Authorization", "Bearer "+tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// Prompts: create (version 1 in production), new versions, labels with
// A/B weights, rollback, listing, resolution by label and version, tenant
// isolation and the bounds.
func TestPromptsAPI(t *testing.T) {
	a := newPromptAPI(t)
	ctx := testCtx(t)
	st, p := a.do("acme", "POST", "/v1/prompts", map[string]any{"name": "greeter", "instructions": "You greet people from {{city}}.",
		"input": []map[string]any{{"role": "user", "content": "Say hello to {{name}}."}}})
	if st != 200 || p["object"] != "prompt" || p["latest_version"] != "1" {
		t.Fatalf("create: %d %v", st, p)
	}
	id := p["id"].(string)
	if labels := p["labels"].(map[string]any); fmt.Sprint(labels["production"]) != "[map[version:1 weight:100]]" {
		t.Fatalf("labels %v", labels)
	}
	st, v := a.do("acme", "POST", "/v1/prompts/"+id+"/versions", map[string]any{"instructions": "You greet people from {{city}} warmly.",
		"input": []map[string]any{{"role": "user", "content": "Say hi to {{name}}."}}, "labels": []string{"staging"}})
	if st != 200 || v["version"] != "2" || fmt.Sprint(v["variables"]) != "[city name]" {
		t.Fatalf("version 2: %d %v", st, v)
	}
	if st, _ := a.do("acme", "GET", "/v1/prompts/"+id, nil); st != 200 {
		t.Fatalf("get: %d", st)
	}
	if st, e := a.do("other", "GET", "/v1/prompts/"+id, nil); st != 404 || e["error"].(map[string]any)["code"] != contracts.CodePromptNotFound {
		t.Fatalf("another tenant's prompt: %d %v", st, e)
	}
	if st, _ := a.do("", "GET", "/v1/prompts", nil); st != 401 {
		t.Fatalf("no key: %d", st)
	}

	ref := func(version *string) *promptRef {
		return &promptRef{ID: id, Version: version, Variables: map[string]json.RawMessage{"city": json.RawMessage(`"Lyon"`), "name": json.RawMessage(`"Ada"`)}}
	}
	r, e := a.p.resolve(ctx, "acme", ref(nil), "resp_1", 1<<20)
	if e != nil || r.Version != "1" || r.Instructions != "You greet people from Lyon." || r.Input[0].Content != "Say hello to Ada." {
		t.Fatalf("production: %+v %v", r, e)
	}
	staging := "staging"
	if r, e := a.p.resolve(ctx, "acme", ref(&staging), "resp_1", 1<<20); e != nil || r.Version != "2" {
		t.Fatalf("staging: %+v %v", r, e)
	}
	one := "1"
	if r, e := a.p.resolve(ctx, "acme", ref(&one), "resp_1", 1<<20); e != nil || r.Version != "1" || r.echo["version"] != "1" {
		t.Fatalf("version 1: %+v %v", r, e)
	}
	if _, e := a.p.resolve(ctx, "other", ref(nil), "resp_1", 1<<20); e == nil || e.Status != 404 || e.Param != "prompt.id" {
		t.Fatalf("another tenant resolved it: %v", e)
	}
	if _, e := a.p.resolve(ctx, "acme", &promptRef{ID: id}, "resp_1", 1<<20); e == nil || e.Code != contracts.CodeMissingPromptVariable {
		t.Fatalf("no variables: %v", e)
	}
	nine := "9"
	if _, e := a.p.resolve(ctx, "acme", ref(&nine), "resp_1", 1<<20); e == nil || e.Status != 404 || e.Param != "prompt.version" {
		t.Fatalf("version 9: %v", e)
	}

	// Promote version 2 to production, then an A/B split, then roll back.
	if st, p := a.do("acme", "POST", "/v1/prompts/"+id+"/labels", map[string]any{"label": "production", "version": "2"}); st != 200 ||
		fmt.Sprint(p["labels"].(map[string]any)["production"]) != "[map[version:2 weight:100]]" {
		t.Fatalf("promote: %d %v", st, p)
	}
	if r, _ := a.p.resolve(ctx, "acme", ref(nil), "resp_1", 1<<20); r.Version != "2" {
		t.Fatalf("after promotion production is %s", r.Version)
	}
	if st, _ := a.do("acme", "POST", "/v1/prompts/"+id+"/labels", map[string]any{"label": "production",
		"versions": []map[string]any{{"version": "1", "weight": 70}, {"version": "2", "weight": 30}}}); st != 200 {
		t.Fatalf("a/b: %d", st)
	}
	counts := map[string]int{}
	for i := range 1000 {
		r, e := a.p.resolve(ctx, "acme", ref(nil), fmt.Sprintf("resp_ab%06d", i), 1<<20)
		if e != nil {
			t.Fatal(e)
		}
		counts[r.Version]++
	}
	if counts["1"] < 650 || counts["1"] > 750 || counts["1"]+counts["2"] != 1000 {
		t.Fatalf("a 70/30 split over 1000 requests: %v", counts)
	}
	t.Logf("70/30 split over 1000 requests: %v", counts)
	st, p = a.do("acme", "POST", "/v1/prompts/"+id+"/labels", map[string]any{"label": "production", "version": "1"})
	if st != 200 {
		t.Fatalf("rollback: %d %v", st, p)
	}
	for i := range 50 {
		if r, _ := a.p.resolve(ctx, "acme", ref(nil), fmt.Sprintf("resp_rb%d", i), 1<<20); r.Version != "1" {
			t.Fatalf("after the rollback production chose %s", r.Version)
		}
	}
	if hist := p["label_history"].([]any); len(hist) != 5 {
		t.Fatalf("label history %v", hist)
	}

	// Refusals.
	for _, c := range []struct {
		body map[string]any
		code string
	}{
		{map[string]any{"label": "production", "versions": []map[string]any{{"version": "1", "weight": 60}, {"version": "2", "weight": 30}}}, contracts.CodeInvalidValue},
		{map[string]any{"label": "production", "version": "3"}, contracts.CodePromptNotFound},
		{map[string]any{"label": "Bad Label", "version": "1"}, contracts.CodeInvalidValue},
		{map[string]any{"label": "production", "versions": []map[string]any{{"version": "1", "weight": 50}, {"version": "1", "weight": 50}}}, contracts.CodeInvalidRequest},
	} {
		st, e := a.do("acme", "POST", "/v1/prompts/"+id+"/labels", c.body)
		if st/100 != 4 || e["error"].(map[string]any)["code"] != c.code {
			t.Fatalf("label %v: %d %v, want %s", c.body, st, e, c.code)
		}
	}
	if st, e := a.do("acme", "POST", "/v1/prompts", map[string]any{"name": "empty"}); st != 400 || e["error"].(map[string]any)["code"] != contracts.CodeMissingParam {
		t.Fatalf("an empty template: %d %v", st, e)
	}
	if st, _ := a.do("acme", "POST", "/v1/prompts", map[string]any{"name": "big", "instructions": strings.Repeat("a", MaxTemplateBytes+1)}); st != 400 {
		t.Fatalf("a template over the limit: %d", st)
	}

	// Lists.
	if st, l := a.do("acme", "GET", "/v1/prompts/"+id+"/versions?limit=1", nil); st != 200 || l["has_more"] != true || l["first_id"] != "2" {
		t.Fatalf("versions page: %d %v", st, l)
	}
	if st, l := a.do("acme", "GET", "/v1/prompts/"+id+"/versions?after=2", nil); st != 200 || l["has_more"] != false || l["first_id"] != "1" {
		t.Fatalf("versions after 2: %d %v", st, l)
	}
	if st, v := a.do("acme", "GET", "/v1/prompts/"+id+"/versions/staging", nil); st != 200 || v["version"] != "2" {
		t.Fatalf("version by label: %d %v", st, v)
	}
	a.do("acme", "POST", "/v1/prompts", map[string]any{"name": "second", "instructions": "x"})
	if st, l := a.do("acme", "GET", "/v1/prompts?order=asc", nil); st != 200 || len(l["data"].([]any)) != 2 || l["first_id"] != id {
		t.Fatalf("prompts: %d %v", st, l)
	}
	if st, l := a.do("other", "GET", "/v1/prompts", nil); st != 200 || len(l["data"].([]any)) != 0 {
		t.Fatalf("another tenant's list: %d %v", st, l)
	}
	if st, d := a.do("acme", "DELETE", "/v1/prompts/"+id, nil); st != 200 || d["deleted"] != true {
		t.Fatalf("delete: %d %v", st, d)
	}
	if _, e := a.p.resolve(ctx, "acme", ref(nil), "resp_1", 1<<20); e == nil || e.Status != 404 {
		t.Fatalf("a deleted prompt resolved: %v", e)
	}
}

// A turn names its prompt for the worker's usage and the span, echoes it
// in the response, and refuses (never cuts) a conversation over the limit.
func TestTurnFieldsAndLimit(t *testing.T) {
	tr := &turn{store: true, previous: "resp_prev", prior: []storedItem{{Role: "user", Content: "earlier"}},
		prompt: &resolved{ID: "pmpt_1", Version: "3", echo: map[string]any{"id": "pmpt_1", "version": "3", "variables": map[string]any{}}}}
	if b := tr.bridge(); b["Aiforge-Prompt-Id"] != "pmpt_1" || b["Aiforge-Prompt-Version"] != "3" {
		t.Fatalf("bridge %v", b)
	}
	attrs := map[string]string{}
	for _, a := range tr.attributes() {
		attrs[string(a.Key)] = a.Value.AsString()
	}
	if attrs["aiforge.prompt.id"] != "pmpt_1" || attrs["aiforge.prompt.version"] != "3" || attrs["aiforge.previous_response_id"] != "resp_prev" {
		t.Fatalf("attributes %v", attrs)
	}
	f := tr.fields()
	if f["previous_response_id"] != "resp_prev" || f["store"] != true || f["prompt"].(map[string]any)["version"] != "3" {
		t.Fatalf("fields %v", f)
	}
	if e := tr.fits(100, 100); e != nil {
		t.Fatalf("a body at the limit: %v", e)
	}
	if e := tr.fits(101, 100); e == nil || e.Code != contracts.CodeConversationTooLarge || e.Param != "previous_response_id" {
		t.Fatalf("a chain over the limit: %+v", e)
	}
	plain := &turn{}
	if plain.bridge() != nil || len(plain.attributes()) != 0 || plain.fits(1<<30, 100) != nil {
		t.Fatal("a plain turn adds something")
	}
	if f := plain.fields(); f["previous_response_id"] != nil || f["prompt"] != nil || f["store"] != false {
		t.Fatalf("plain fields %v", f)
	}
	out := outputMessages(map[string]any{"output": []map[string]any{
		{"type": "file_search_call", "id": "fs_1"},
		{"type": "message", "id": "msg_1", "content": []map[string]any{{"type": "output_text", "text": "answer"}}},
	}})
	if len(out) != 1 || out[0].ID != "msg_1" || out[0].Role != "assistant" || out[0].Content != "answer" {
		t.Fatalf("output messages %+v", out)
	}
}
