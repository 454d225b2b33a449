package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

// TestLlamaErrorsThroughAiforge: what a client of aiforge gets from a
// llama-server that reports errors after its 200 (the issue's "a streamed
// engine error becomes a success"), through the edge.
func TestLlamaErrorsThroughAiforge(t *testing.T) {
	env, err := SetupEngine(context.Background(), nil, enginesim.LlamaLike(enginesim.Config{ContextSize: 8}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	gw := env.Gateway
	post := func(body string) (int, []byte) {
		req, _ := http.NewRequest("POST", gw.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+gw.key)
		resp, err := gw.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	long := `{"model":"bench","stream":true,"messages":[{"role":"user","content":"one two three four five six seven eight nine ten"}]}`
	env.Sim.ResetStats() // Setup's calls
	status, b := post(long)
	var e struct {
		Error struct {
			Code  string `json:"code"`
			Param string `json:"param"`
			Type  string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || status != 400 || e.Error.Code != "context_length_exceeded" || e.Error.Param != "messages" {
		t.Fatalf("context overflow: %d %s", status, b)
	}
	if n := env.Sim.Stats().Requests; n != 1 {
		t.Fatalf("the engine was asked %d times", n)
	}

	env.Sim.SetFailure(enginesim.Failure{Mode: enginesim.FailErrorLine, AfterTokens: 2, Count: 1})
	status, b = post(`{"model":"bench","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	evs := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	if status != 200 || len(evs) != 3 || bytes.Contains(b, []byte("[DONE]")) {
		t.Fatalf("error after tokens: %d %q", status, evs)
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(evs[2], "data: ")), &e); err != nil || e.Error.Code != "engine_error" || e.Error.Type != "server_error" {
		t.Fatalf("error chunk %q", evs[2])
	}

	// Usage in OpenAI's layout for a client that asks, none for one that does not.
	for _, include := range []bool{false, true} {
		body := `{"model":"bench","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
		if include {
			body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
		}
		status, b = post(body)
		evs = strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
		n := bytes.Count(b, []byte(`"usage":{`))
		if status != 200 || evs[len(evs)-1] != "data: [DONE]" || (include && (n != 1 || !strings.Contains(evs[len(evs)-2], `"choices":[],"usage":{`))) || (!include && n != 0) {
			t.Fatalf("include_usage %v: %q", include, evs)
		}
	}
}
