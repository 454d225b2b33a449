package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// `aiforge prompts` sends the prompts API's bodies with the tenant key:
// a version with labels, an A/B split, a rollback.
func TestPromptsCommands(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "pmpt_1", "labels": map[string]any{"production": []any{map[string]any{"version": "1", "weight": 90}, map[string]any{"version": "2", "weight": 10}}}})
	}))
	defer srv.Close()
	t.Setenv("AIFORGE_API_KEY", "sk-tenant")
	run := func(args ...string) string {
		t.Helper()
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--url", srv.URL))
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v (%s)", args, err, out.String())
		}
		return out.String()
	}
	run("prompts", "create", "--name", "support", "--instructions", "Hi {{who}}", "--user", "a, b")
	run("prompts", "version", "pmpt_1", "--instructions", "v2", "--label", "staging")
	if out := run("prompts", "label", "pmpt_1", "--split", "1=90,2=10"); !strings.Contains(out, "production=v1:90%+v2:10%") {
		t.Fatalf("label output %q", out)
	}
	run("prompts", "label", "pmpt_1", "--version", "1")
	want := []string{
		`POST /v1/prompts Bearer sk-tenant {"input":[{"content":"a, b","role":"user"}],"instructions":"Hi {{who}}","name":"support"}`,
		`POST /v1/prompts/pmpt_1/versions Bearer sk-tenant {"instructions":"v2","labels":["staging"]}`,
		`POST /v1/prompts/pmpt_1/labels Bearer sk-tenant {"label":"production","versions":[{"version":"1","weight":90},{"version":"2","weight":10}]}`,
		`POST /v1/prompts/pmpt_1/labels Bearer sk-tenant {"label":"production","version":"1"}`,
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("requests %q", got)
	}
	for i := range want {
		if strings.TrimSpace(got[i]) != want[i] {
			t.Errorf("request %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
