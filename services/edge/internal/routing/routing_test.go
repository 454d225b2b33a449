package routing

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/registry"
)

func testRouter() registry.Router {
	return registry.Router{Name: "auto", Default: "chat", Threshold: 0.3, Classes: []registry.RouteClass{
		{Name: "iac_devops", Model: "coder", Examples: []string{
			"write a terraform module for an AWS VPC", "fix my kubernetes deployment yaml", "ansible playbook to install nginx"}},
		{Name: "deep_reasoning", Model: "reasoner", Examples: []string{
			"prove that the square root of two is irrational", "plan a database migration step by step with trade-offs"}},
		{Name: "openstack_api", Tool: &registry.Tool{URL: "http://127.0.0.1:1/answer"}, Examples: []string{
			"list my openstack servers", "show the compute quota of my openstack project"}},
		{Name: "chat", Model: "small", Examples: []string{"hello, how are you"}},
	}}
}

func chatBody(t *testing.T, msgs ...map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "auto", "messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func user(content any) map[string]any { return map[string]any{"role": "user", "content": content} }

func pick(t *testing.T, s *Service, rt registry.Router, h http.Header, body []byte) Decision {
	t.Helper()
	if h == nil {
		h = http.Header{}
	}
	d, e := s.Pick(context.Background(), rt, h, body, Caller{Tenant: "acme"})
	if e != nil {
		t.Fatalf("pick: %v", e)
	}
	return d
}

// The lexical classifier sends a prompt to the class whose examples it
// shares terms with (stems: "modules" matches "module"), a tool class
// included; a prompt under the threshold, or with no text, goes to the
// default.
func TestPickByExamplesAndThreshold(t *testing.T) {
	s := New(Deps{})
	rt := testRouter()
	for _, tc := range []struct {
		prompt, class, model string
		tool                 bool
	}{
		{"Can you write terraform modules for a VPC with two subnets?", "iac_devops", "coder", false},
		{"step by step, plan the migration of our database", "deep_reasoning", "reasoner", false},
		{"please list the servers of my openstack project", "openstack_api", "", true},
	} {
		d := pick(t, s, rt, nil, chatBody(t, user(tc.prompt)))
		if d.Router != "auto" || d.Class != tc.class || d.Model != tc.model || (d.Tool != nil) != tc.tool || d.Score < rt.Threshold || d.Score > 1.0001 {
			t.Errorf("%q: %+v, want class %s", tc.prompt, d, tc.class)
		}
	}
	// Only the last user message counts.
	d := pick(t, s, rt, nil, chatBody(t, user("list my openstack servers"),
		map[string]any{"role": "assistant", "content": "done"}, user("now prove that the square root of two is irrational")))
	if d.Class != "deep_reasoning" {
		t.Errorf("last user message: %+v", d)
	}
	// Nothing in common with any class, no text, or no user message: the
	// default, score 0.
	for _, body := range [][]byte{
		chatBody(t, user("what is the weather like in Lisbon today")),
		chatBody(t, user("   ")),
		chatBody(t, map[string]any{"role": "system", "content": "list my openstack servers"}),
		[]byte(`not json`),
	} {
		if d := pick(t, s, rt, nil, body); d.Class != "chat" || d.Model != "small" || d.Score != 0 {
			t.Errorf("%s: %+v, want the default", body, d)
		}
	}
	// A weak match (one shared term of many) wins with no threshold and
	// goes to the default under the router's 0.3.
	weak := chatBody(t, user("tell me a story about servers, dragons, castles, knights and a princess"))
	loose := rt
	loose.Threshold = 0
	if d := pick(t, s, loose, nil, weak); d.Class != "openstack_api" || d.Score <= 0 || d.Score >= rt.Threshold {
		t.Fatalf("weak match without a threshold: %+v", d)
	}
	if d := pick(t, s, rt, nil, weak); d.Class != "chat" || d.Score != 0 {
		t.Errorf("weak match at threshold %v: %+v, want the default", rt.Threshold, d)
	}
}

// X-AI-Route picks a class by name whatever the prompt says; an unknown
// class is a 400 unknown_route_class naming the classes.
func TestPickHeaderOverrideAndUnknownClass(t *testing.T) {
	s := New(Deps{})
	rt := testRouter()
	body := chatBody(t, user("write a terraform module for an AWS VPC"))
	h := http.Header{}
	h.Set(HeaderRoute, " openstack_api ")
	d := pick(t, s, rt, h, body)
	if d.Class != "openstack_api" || d.Tool == nil || d.Tool.URL != "http://127.0.0.1:1/answer" || d.Model != "" || d.Score != 1 {
		t.Fatalf("header: %+v", d)
	}
	h.Set(HeaderRoute, "gpu_heavy")
	_, e := s.Pick(context.Background(), rt, h, body, Caller{})
	if e == nil || e.Status != http.StatusBadRequest || e.Code != contracts.CodeUnknownRouteClass || e.Param != HeaderRoute ||
		!strings.Contains(e.Message, "iac_devops, deep_reasoning, openstack_api, chat") {
		t.Fatalf("unknown class: %+v", e)
	}
}

// A router changed under the same name is classified by its new
// examples, not by the compiled old ones.
func TestPickFollowsChangedExamples(t *testing.T) {
	s := New(Deps{})
	rt := testRouter()
	body := chatBody(t, user("restart the billing daemon"))
	if d := pick(t, s, rt, nil, body); d.Class != "chat" {
		t.Fatalf("before: %+v", d)
	}
	changed := testRouter()
	changed.Classes[0].Examples = append(changed.Classes[0].Examples, "restart a systemd daemon")
	if d := pick(t, s, changed, nil, body); d.Class != "iac_devops" {
		t.Fatalf("after adding an example: %+v", d)
	}
}

// An embedding router without an embedding client falls back to the
// default rather than failing the request.
func TestPickEmbeddingRouterWithoutClient(t *testing.T) {
	s := New(Deps{})
	rt := testRouter()
	rt.EmbeddingModel = "embedder"
	if d := pick(t, s, rt, nil, chatBody(t, user("write a terraform module for an AWS VPC"))); d.Class != "chat" || d.Score != 0 {
		t.Fatalf("%+v", d)
	}
}

func TestLastUserText(t *testing.T) {
	parts := []map[string]any{{"type": "text", "text": "first"}, {"type": "image_url", "image_url": map[string]any{"url": "x"}}, {"type": "text", "text": "second"}}
	if got := LastUserText(chatBody(t, user(parts))); got != "first\nsecond" {
		t.Errorf("parts: %q", got)
	}
	if got := LastUserText([]byte(`{"prompt":"legacy completion"}`)); got != "legacy completion" {
		t.Errorf("prompt: %q", got)
	}
	long := strings.Repeat("é", MaxPromptBytes) // 2 bytes each
	got := LastUserText(chatBody(t, user("x"+long)))
	if len(got) > MaxPromptBytes || len(got) < MaxPromptBytes-4 || !utf8.ValidString(got) {
		t.Errorf("cut: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

func TestLexicalVectorAndCosine(t *testing.T) {
	s := New(Deps{})
	a := LexicalVector(s.an, "Connecting the devices to the network", nil)
	b := LexicalVector(s.an, "how do I connect a device to a network?", nil)
	var norm float64
	for _, w := range a {
		norm += float64(w) * float64(w)
	}
	if norm < 0.999 || norm > 1.001 {
		t.Errorf("norm² %v", norm)
	}
	if c := CosineTerms(a, b); c < 0.99 {
		t.Errorf("same stems: cosine %v", c)
	}
	if c := CosineTerms(a, LexicalVector(s.an, "bake a chocolate cake", nil)); c != 0 {
		t.Errorf("nothing shared: cosine %v", c)
	}
	if c := CosineDense([]float32{1, 0}, []float32{1, 0, 0}); c != 0 {
		t.Errorf("sizes differ: %v", c)
	}
	if c := CosineDense([]float32{1, 1}, []float32{2, 2}); c < 0.9999 {
		t.Errorf("parallel: %v", c)
	}
}
