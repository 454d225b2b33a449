package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/tokens"
)

// Ollama's usage layout and errors, as Ollama v0.6.5 answered the e2e
// suite (e2e/ollama_test.go), reproduced with the simulator so CI without
// Ollama covers them.

var maxTokensRE = regexp.MustCompile(`"max_tokens":\d+`)

const completionBody = `{"model":"served","prompt":"the tiny model is a test of the forge","max_tokens":5}`

type usageOnly struct {
	Choices []json.RawMessage `json:"choices"`
	Usage   *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

// Zero usage on every chunk (Ollama's /v1/completions): the client gets
// "usage": null on every chunk with choices and the engine's final usage
// chunk alone; the usage event is the engine's final count.
func TestZeroUsageChunks(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}, ZeroUsageChunks: true})
	h.startWorker(modelFor("served", "up", base))
	_, direct := simCall(t, base+"/completions", withUsage(streamed(strings.Replace(completionBody, `"served"`, `"up"`, 1))))
	var engine usageOnly
	if err := json.Unmarshal(direct[len(direct)-1], &engine); err != nil || engine.Usage == nil || engine.Usage.CompletionTokens != 5 ||
		!bytes.Contains(direct[0], []byte(`"usage":{"prompt_tokens":0,`)) {
		t.Fatalf("the engine's chunks %q", direct)
	}
	for _, ep := range []string{events.EndpointCompletions, events.EndpointChatCompletions} {
		body, n := completionBody, int64(5)
		if ep == events.EndpointChatCompletions {
			body, n = chatBody, 6
		}
		for _, include := range []bool{false, true} {
			b := streamed(body)
			if include {
				b = withUsage(b)
			}
			req := newReq("served", ep, true, include, b)
			frames, _, err := h.do(testCtx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			usageChunks := 0
			for i, f := range frames {
				var u usageOnly
				if err := json.Unmarshal(f, &u); err != nil {
					t.Fatalf("frame %s: %v", f, err)
				}
				if u.Usage == nil {
					continue
				}
				if len(u.Choices) != 0 || i != len(frames)-1 || u.Usage.CompletionTokens != n || u.Usage.PromptTokens == 0 {
					t.Fatalf("%s include_usage=%v: usage on frame %d of %d: %s", ep, include, i, len(frames), f)
				}
				usageChunks++
			}
			if want := map[bool]int{false: 0, true: 1}[include]; usageChunks != want {
				t.Fatalf("%s include_usage=%v: %d usage chunks in %q", ep, include, usageChunks, frames)
			}
			ev, _ := h.usageEvent(req.Tenant)
			if ev.Status != events.UsageStatusOK || ev.Estimated || ev.CompletionTokens != n || ev.PromptTokens == 0 {
				t.Fatalf("%s include_usage=%v: event %+v", ep, include, ev)
			}
		}
	}
}

// A stream cut before the engine's final usage (the engine gone, or the
// client) is estimated: the tokens streamed, and the prompt the engine
// read; never the zeros of a chunk's placeholder usage.
func TestCutStreamEstimated(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}, ZeroUsageChunks: true})
	h.startWorker(modelFor("served", "up", base))

	for _, ep := range []string{events.EndpointCompletions, events.EndpointChatCompletions} {
		body := completionBody
		if ep == events.EndpointChatCompletions {
			body = chatBody
		}
		prompt := tokens.EstimatePrompt(ep, []byte(body))
		if prompt <= 0 {
			t.Fatalf("%s: prompt estimate %d", ep, prompt)
		}
		for _, include := range []bool{false, true} {
			b := streamed(body)
			if include {
				b = withUsage(b)
			}
			// the engine goes away after 3 tokens
			sim.SetFailure(enginesim.Failure{Mode: enginesim.FailDisconnect, AfterTokens: 3, Count: 1})
			req := newReq("served", ep, true, include, b)
			frames, _, err := h.do(testCtx(t), req)
			if _, e := apiError(t, err); e.Code != contracts.CodeEngineError || len(frames) != 3 {
				t.Fatalf("%s: %d frames, error %+v", ep, len(frames), e)
			}
			for _, f := range frames {
				if bytes.Contains(f, []byte(`"usage":{`)) {
					t.Fatalf("%s: usage on a chunk with choices: %s", ep, f)
				}
			}
			ev, _ := h.usageEvent(req.Tenant)
			if ev.Status != events.UsageStatusError || !ev.Estimated || ev.CompletionTokens != 3 || ev.PromptTokens != prompt {
				t.Fatalf("%s include_usage=%v, engine gone: event %+v, want 3 completion and %d prompt tokens estimated", ep, include, ev, prompt)
			}
		}

		// the client goes away after 3 chunks of a long stream
		sim.SetTiming(0, 1000)
		stop := errors.New("client gone")
		n := 0
		long := maxTokensRE.ReplaceAllString(body, `"max_tokens":100000`)
		req := newReq("served", ep, true, true, withUsage(streamed(long)))
		_, err := h.client.Do(testCtx(t), req, func([]byte) error {
			if n++; n == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) {
			t.Fatalf("%s: client gone: %v", ep, err)
		}
		ev, _ := h.usageEvent(req.Tenant)
		if ev.Status != events.UsageStatusCanceled || !ev.Estimated || ev.CompletionTokens < 3 || ev.PromptTokens != prompt {
			t.Fatalf("%s, client gone: event %+v, want at least 3 completion and %d prompt tokens estimated", ep, ev, prompt)
		}
		sim.SetTiming(0, 0)
	}
}

// A running count on chunks (vLLM's continuous_usage_stats) is not the
// final count either, but it is the engine's prompt count: a cut stream
// takes it for the estimate.
func TestCutStreamRunningCount(t *testing.T) {
	h := newHarness(t)
	c := strings.TrimSuffix(chunk, "}")
	base := fakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, "data: "+c+`,"usage":{"prompt_tokens":17,"completion_tokens":1,"total_tokens":18}}`+"\n\ndata: "+c+
			`,"usage":{"prompt_tokens":17,"completion_tokens":2,"total_tokens":19}}`+"\n\n")
	})
	h.startWorker(modelFor("served", "up", base))
	req := newReq("served", events.EndpointChatCompletions, true, false, streamed(chatBody))
	frames, _, err := h.do(testCtx(t), req)
	if _, e := apiError(t, err); e.Code != contracts.CodeEngineError || len(frames) != 2 {
		t.Fatalf("%d frames, error %+v", len(frames), e)
	}
	ev, _ := h.usageEvent(req.Tenant)
	if ev.Status != events.UsageStatusError || !ev.Estimated || ev.CompletionTokens != 2 || ev.PromptTokens != 17 {
		t.Fatalf("event %+v", ev)
	}
}

// Ollama's error bodies: OpenAI's shape with type api_error and a null
// code, 500 for faults of the request (an invalid response_format) as for
// its own failures. The client gets string codes and OpenAI's types; a
// 500 the engine attributes to the request is a 400 asked once, any other
// 500 is retried.
func TestOllamaErrors(t *testing.T) {
	h := newHarness(t)
	status := http.StatusOK // the worker's probes before the first case
	var answer string
	calls := make(chan struct{}, 16)
	base := fakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		calls <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	})
	h.startWorker(modelFor("served", "up", base))
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		want     contracts.Error
		attempts int
	}{
		{"tools unsupported", 400, `{"error":{"message":"registry.ollama.ai/library/tiny:latest does not support tools","type":"api_error","param":null,"code":null}}`,
			contracts.Error{Status: 400, Type: contracts.TypeInvalidRequest, Code: contracts.CodeInvalidRequest}, 1},
		{"invalid format", 500, `{"error":{"message":"invalid format: \"7\"; expected \"json\" or a valid JSON Schema object","type":"api_error","param":null,"code":null}}`,
			contracts.Error{Status: 400, Type: contracts.TypeInvalidRequest, Code: contracts.CodeInvalidRequest, Param: "response_format"}, 1},
		{"invalid schema", 500, `{"error":{"message":"invalid JSON schema in format","type":"api_error","param":null,"code":null}}`,
			contracts.Error{Status: 400, Type: contracts.TypeInvalidRequest, Code: contracts.CodeInvalidRequest, Param: "response_format"}, 1},
		{"a 500 typed invalid_request_error", 500, `{"error":{"message":"bad stop sequence","type":"invalid_request_error","param":"stop","code":null}}`,
			contracts.Error{Status: 400, Type: contracts.TypeInvalidRequest, Code: contracts.CodeInvalidRequest, Param: "stop"}, 1},
		{"runner crashed", 500, `{"error":{"message":"llama runner process has terminated: exit status 2","type":"api_error","param":null,"code":null}}`,
			contracts.Error{Status: 502, Type: contracts.TypeServer, Code: contracts.CodeEngineError}, 2},
		{"a 503 typed invalid_request_error", 503, `{"error":{"message":"server busy","type":"invalid_request_error"}}`,
			contracts.Error{Status: 502, Type: contracts.TypeServer, Code: contracts.CodeEngineError}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, answer = tc.status, tc.body
			for len(calls) > 0 {
				<-calls
			}
			for _, stream := range []bool{false, true} {
				body := chatBody
				if stream {
					body = streamed(chatBody)
				}
				req := newReq("served", events.EndpointChatCompletions, stream, false, body)
				_, _, err := h.do(testCtx(t), req)
				be, e := apiError(t, err)
				if be.Status != tc.want.Status || e.Type != tc.want.Type || e.Code != tc.want.Code || e.Param != tc.want.Param || e.Message == "" {
					t.Fatalf("stream=%v: got %d %+v, want %+v", stream, be.Status, e, tc.want)
				}
				if n := len(calls); n != tc.attempts {
					t.Fatalf("stream=%v: engine asked %d times, want %d", stream, n, tc.attempts)
				}
				for len(calls) > 0 {
					<-calls
				}
				if ev, _ := h.usageEvent(req.Tenant); ev.Status != events.UsageStatusError || ev.ErrorCode != tc.want.Code {
					t.Fatalf("event %+v", ev)
				}
			}
		})
	}
}
