package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiforge/aiforge/internal/bench"
	"github.com/aiforge/aiforge/pkg/enginesim"
)

// chat sends one chat completion to base with key and returns the status,
// the headers and the body.
func chat(t *testing.T, base, key string, body map[string]any, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

func userPrompt(model, prompt string, temperature float64) map[string]any {
	return map[string]any{"model": model, "temperature": temperature, "max_tokens": 4,
		"messages": []map[string]any{{"role": "user", "content": prompt}}}
}

// `aiforge routers set/list/get/delete` against a real edge: a router set
// by flags serves a prompt by its examples through a tool class; the JSON
// of `get --json` fed back with --file and flags changes only what the
// flags name.
func TestRoutersCommands(t *testing.T) {
	e := startCLIEdge(t)
	t.Setenv("AIFORGE_ADMIN_KEY", cliAdminKey)
	var toolCalls atomic.Int64
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		toolCalls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"content":"3 servers are running"}`))
	}))
	defer tool.Close()

	out := e.must(t, "routers", "set", "auto",
		"--class", "code=model:coder", "--examples", "code=write a terraform module|fix this bash script",
		"--class", "ops=tool:"+tool.URL+"/answer", "--examples", "ops=list my openstack servers|show the compute quota",
		"--default", "code", "--threshold", "0.3")
	if !strings.Contains(out, "set router auto: 2 classes, default code, threshold 0.3, lexical") {
		t.Fatalf("set: %q", out)
	}
	lines := strings.Split(strings.TrimSpace(e.must(t, "routers", "list")), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "ROUTER") || strings.Join(strings.Fields(lines[1]), " ") != "auto code,ops code 0.3 lexical" {
		t.Fatalf("list:\n%s", strings.Join(lines, "\n"))
	}
	got := e.must(t, "routers", "get", "auto")
	for _, want := range []string{"router auto: default code, threshold 0.3, lexical", "model:coder", "tool:" + tool.URL + "/answer",
		"write a terraform module | fix this bash script", "list my openstack servers | show the compute quota"} {
		if !strings.Contains(got, want) {
			t.Errorf("get lacks %q:\n%s", want, got)
		}
	}

	// The router serves: the prompt matches the ops examples, the tool answers.
	e.must(t, "tenants", "create", "acme")
	keyOut := e.must(t, "keys", "create", "--tenant", "acme")
	i := strings.Index(keyOut, "AIFORGE_API_KEY=")
	key := strings.Fields(keyOut[i+len("AIFORGE_API_KEY="):])[0]
	status, hdr, body := chat(t, e.url, key, userPrompt("auto", "list the openstack servers", 0), nil)
	if status != 200 || hdr.Get("X-Aiforge-Router") != "auto" || hdr.Get("X-Aiforge-Route-Class") != "ops" ||
		!strings.Contains(string(body), "3 servers are running") || toolCalls.Load() != 1 {
		t.Fatalf("routed: %d %v %s (tool calls %d)", status, hdr, body, toolCalls.Load())
	}

	// get --json, then set --file with flags: the flags' fields change, the
	// rest is the file's.
	dir := t.TempDir()
	file := filepath.Join(dir, "auto.json")
	if err := os.WriteFile(file, []byte(e.must(t, "routers", "get", "auto", "--json")), 0o600); err != nil {
		t.Fatal(err)
	}
	e.must(t, "routers", "set", "auto", "--file", file, "--examples", "ops=show the quota", "--examples", "ops=list servers|list networks",
		"--class", "chat=model:small", "--examples", "chat=hello there", "--threshold", "0.5")
	var r struct {
		Default   string  `json:"default"`
		Threshold float64 `json:"threshold"`
		Classes   []struct {
			Name     string   `json:"name"`
			Model    string   `json:"model"`
			Examples []string `json:"examples"`
		} `json:"classes"`
	}
	if err := json.Unmarshal([]byte(e.must(t, "routers", "get", "auto", "--json")), &r); err != nil {
		t.Fatal(err)
	}
	if r.Default != "code" || r.Threshold != 0.5 || len(r.Classes) != 3 ||
		fmt.Sprint(r.Classes[0].Examples) != "[write a terraform module fix this bash script]" ||
		fmt.Sprint(r.Classes[1].Examples) != "[show the quota list servers list networks]" ||
		r.Classes[2].Name != "chat" || r.Classes[2].Model != "small" {
		t.Fatalf("edited router: %+v", r)
	}

	// Errors: the API's (a class without examples), and the command's own.
	if _, _, err := e.aiforge(t, "routers", "set", "bad", "--class", "a=model:x", "--default", "a"); err == nil || !strings.Contains(err.Error(), "examples") {
		t.Fatalf("a class without examples: %v", err)
	}
	if _, _, err := e.aiforge(t, "routers", "set", "bad", "--class", "a=model:x", "--examples", "b=hi"); err == nil || !strings.Contains(err.Error(), `no class "b"`) {
		t.Fatalf("examples of an unknown class: %v", err)
	}
	if _, _, err := e.aiforge(t, "routers", "set", "other", "--file", file); err == nil || !strings.Contains(err.Error(), `names "auto"`) {
		t.Fatalf("a file of another router: %v", err)
	}

	if out := e.must(t, "routers", "delete", "auto"); !strings.Contains(out, "deleted router auto") {
		t.Fatalf("delete: %q", out)
	}
	if _, _, err := e.aiforge(t, "routers", "get", "auto"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("get after delete: %v", err)
	}
	if lines := strings.Split(strings.TrimSpace(e.must(t, "routers", "list")), "\n"); len(lines) != 1 {
		t.Fatalf("list after delete: %v", lines)
	}
}

// adminStack starts a stack with the engine simulator and returns it with a
// runner of CLI commands against its admin API (output and error).
func adminStack(t *testing.T) (*bench.Env, func(args ...string) (string, error)) {
	t.Helper()
	env, err := bench.SetupEngine(context.Background(), nil, enginesim.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	t.Setenv("AIFORGE_ADMIN_KEY", env.Admin.Token)
	return env, func(args ...string) (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--url", env.Admin.BaseURL))
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
}

// `aiforge models register --cache ...` opts a model into the semantic
// cache (served by a worker and the engine simulator: a repeated prompt is
// a hit, at the temperature the flag allows), and `aiforge cache clear`
// removes one tenant's answers.
func TestModelsRegisterCacheAndCacheClear(t *testing.T) {
	env, run := adminStack(t)
	if _, err := run("models", "register", "cached", "--base-url", env.EngineURL, "--upstream", "bench-upstream", "--cache-ttl", "1h"); err == nil ||
		!strings.Contains(err.Error(), "--cache-ttl needs --cache") {
		t.Fatalf("a cache flag without --cache: %v", err)
	}
	if out, err := run("models", "register", "cached", "--base-url", env.EngineURL, "--upstream", "bench-upstream",
		"--cache", "--cache-ttl", "1h", "--cache-similarity", "0.8", "--cache-max-temperature", "0.5"); err != nil {
		t.Fatalf("register: %v %s", err, out)
	}
	base, key := env.Tenant.BaseURL, env.Tenant.Token
	// A worker serves the new model once it has seen it: the first answer
	// (a miss) is then stored after it was sent.
	ask := func(prompt string, temperature float64) string {
		t.Helper()
		status, hdr, body := chat(t, base, key, userPrompt("cached", prompt, temperature), nil)
		if status != 200 {
			return fmt.Sprintf("HTTP %d %s", status, body)
		}
		return hdr.Get("X-Aiforge-Cache")
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	prompt := "What is the boiling point of water at sea level?"
	until("the model to serve", func() bool { return ask(prompt, 0.3) == "" })
	until("an exact hit at temperature 0.3", func() bool { return ask(prompt, 0.3) == "exact" })
	if got := ask("At sea level, what is the boiling point of water?", 0.3); got != "similar" {
		t.Fatalf("a reworded prompt: %q, want a similar hit (--cache-similarity 0.8)", got)
	}
	if got := ask(prompt, 0.7); got != "" {
		t.Fatalf("temperature 0.7 over --cache-max-temperature 0.5: %q", got)
	}

	if out, err := run("cache", "clear", "--model", "cached", "--tenant", "someone-else"); err != nil || !strings.Contains(out, "cleared 0 cached answers of model cached (tenant someone-else)") {
		t.Fatalf("clear another tenant: %v %q", err, out)
	}
	if got := ask(prompt, 0.3); got != "exact" {
		t.Fatalf("after clearing another tenant: %q", got)
	}
	if out, err := run("cache", "clear", "--model", "cached", "--tenant", "bench"); err != nil || !strings.Contains(out, "cleared 1 cached answers of model cached (tenant bench)") {
		t.Fatalf("clear: %v %q", err, out)
	}
	if got := ask(prompt, 0.3); got != "" {
		t.Fatalf("after clear: %q, want a miss", got)
	}
	if _, err := run("cache", "clear"); err == nil || !strings.Contains(err.Error(), "model") {
		t.Fatalf("clear without --model: %v", err)
	}
}

// `aiforge models register --hybrid-fusion ...` stores an embedding model's
// default fusion for hybrid search on its binding; a bad one is refused with
// the API's reason.
func TestModelsRegisterHybridSearch(t *testing.T) {
	ctx := context.Background()
	env, run := adminStack(t)
	if out, err := run("models", "register", "embed", "--base-url", env.EngineURL, "--upstream", "bench-upstream",
		"--hybrid-fusion", "zscore", "--hybrid-embedding-weight", "1.5", "--hybrid-text-weight", "1"); err != nil {
		t.Fatalf("register: %v %s", err, out)
	}
	var m struct {
		HybridSearch *struct {
			Fusion          string  `json:"fusion"`
			EmbeddingWeight float64 `json:"embedding_weight"`
			TextWeight      float64 `json:"text_weight"`
		} `json:"hybrid_search"`
	}
	if err := env.Admin.Do(ctx, "GET", "/admin/v1/models/embed", nil, &m); err != nil {
		t.Fatal(err)
	}
	if h := m.HybridSearch; h == nil || h.Fusion != "zscore" || h.EmbeddingWeight != 1.5 || h.TextWeight != 1 {
		t.Fatalf("stored hybrid_search: %+v", h)
	}
	if _, err := run("models", "register", "embed2", "--base-url", env.EngineURL, "--upstream", "bench-upstream", "--hybrid-fusion", "max"); err == nil ||
		!strings.Contains(err.Error(), "fusion must be") {
		t.Fatalf("an unknown fusion: %v", err)
	}
}
