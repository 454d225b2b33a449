package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
)

// Engine protocol robustness: what real engines send besides OpenAI's
// `data:` chunks, their error bodies, and which failures are retried.

const longPrompt = `{"model":"served","messages":[{"role":"user","content":"one two three four five six seven eight nine ten eleven twelve"}],"max_tokens":4`

func streamed(body string) string {
	return strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
}

func withUsage(body string) string {
	return strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
}

// apiError checks that err is a bridge error with an OpenAI-shaped body and
// returns both.
func apiError(t *testing.T, err error) (*bridge.Error, *contracts.Error) {
	t.Helper()
	var be *bridge.Error
	if !errors.As(err, &be) {
		t.Fatalf("err %v, want a bridge error", err)
	}
	e, ok := contracts.ParseError(be.Status, be.Body)
	if !ok {
		t.Fatalf("error body %q is not OpenAI-shaped", be.Body)
	}
	var raw struct {
		Error struct {
			Code any `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(be.Body, &raw)
	if _, str := raw.Error.Code.(string); !str {
		t.Fatalf("error body %s: code is not a string", be.Body)
	}
	if e.Code != be.Code {
		t.Fatalf("frame code %q, body code %q", be.Code, e.Code)
	}
	return be, e
}

// A llama-server that finds the prompt longer than its context answers 200,
// then `error: {...}` and `data: [DONE]`: the client gets the context
// overflow (before any data: an HTTP 400 the edge can fall back on), the
// usage event says error, and the engine was asked once.
func TestLlamaErrorLine(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.LlamaLike(enginesim.Config{Models: []string{"up"}, ContextSize: 8}))
	h.startWorker(modelFor("served", "up", base))

	for _, include := range []bool{false, true} {
		body := streamed(longPrompt + "}")
		if include {
			body = withUsage(body)
		}
		sim.ResetStats()
		req := newReq("served", events.EndpointChatCompletions, true, include, body)
		frames, res, err := h.do(testCtx(t), req)
		be, e := apiError(t, err)
		if be.Status != 400 || e.Code != contracts.CodeContextLengthExceeded || e.Param != "messages" ||
			!strings.Contains(e.Message, "exceeds the available context size") || be.Retryable || be.AfterData {
			t.Fatalf("error %+v %+v", be, e)
		}
		if len(frames) != 0 || res.Retried || sim.Stats().Requests != 1 {
			t.Fatalf("%d frames, result %+v, engine asked %d times", len(frames), res, sim.Stats().Requests)
		}
		ev, _ := h.usageEvent(req.Tenant)
		if ev.Status != events.UsageStatusError || ev.ErrorCode != contracts.CodeContextLengthExceeded || ev.CompletionTokens != 0 {
			t.Fatalf("event %+v", ev)
		}
	}

	// After tokens: the stream ends with the error (an SSE error chunk at
	// the edge), never as a success.
	sim.SetFailure(enginesim.Failure{Mode: enginesim.FailErrorLine, AfterTokens: 2, Count: 1})
	req := newReq("served", events.EndpointChatCompletions, true, true, withUsage(streamed(chatBody)))
	frames, _, err := h.do(testCtx(t), req)
	be, e := apiError(t, err)
	if !be.AfterData || len(frames) != 2 || e.Code != contracts.CodeEngineError || !strings.Contains(e.Message, "simulated engine failure") {
		t.Fatalf("%d frames, error %+v %+v", len(frames), be, e)
	}
	ev, _ := h.usageEvent(req.Tenant)
	if ev.Status != events.UsageStatusError || ev.ErrorCode != contracts.CodeEngineError || ev.CompletionTokens != 2 {
		t.Fatalf("event %+v", ev)
	}
}

func TestEventError(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))
	sim.SetFailure(enginesim.Failure{Mode: enginesim.FailErrorEvent, AfterTokens: 1, Count: 1})
	req := newReq("served", events.EndpointChatCompletions, true, false, streamed(chatBody))
	frames, _, err := h.do(testCtx(t), req)
	be, e := apiError(t, err)
	if !be.AfterData || len(frames) != 1 || e.Code != contracts.CodeEngineError {
		t.Fatalf("%d frames, error %+v %+v", len(frames), be, e)
	}
	ev, _ := h.usageEvent(req.Tenant)
	if ev.Status != events.UsageStatusError || ev.ErrorCode != contracts.CodeEngineError {
		t.Fatalf("event %+v", ev)
	}
}

// llama-server puts usage on its last chunk with choices: a client that
// asked for include_usage gets OpenAI's separate usage chunk, one that did
// not gets no usage, and the counts are the engine's.
func TestLlamaUsageLayout(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.LlamaLike(enginesim.Config{Models: []string{"up"}}))
	h.startWorker(modelFor("served", "up", base))
	_, direct := simCall(t, base+"/chat/completions", strings.Replace(streamed(chatBody), `"served"`, `"up"`, 1))
	var engine struct {
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(direct[len(direct)-1], &engine); err != nil || engine.Usage.CompletionTokens != 6 {
		t.Fatalf("the engine's last chunk %s", direct[len(direct)-1])
	}
	for _, include := range []bool{false, true} {
		body := streamed(chatBody)
		if include {
			body = withUsage(body)
		}
		req := newReq("served", events.EndpointChatCompletions, true, include, body)
		frames, _, err := h.do(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		var usageFrames []int
		for i, f := range frames {
			if bytes.Contains(f, []byte(`"usage":{`)) {
				usageFrames = append(usageFrames, i)
			}
		}
		if !include {
			if len(usageFrames) != 0 || len(frames) != 7 {
				t.Fatalf("usage sent to a client that did not ask: %q", frames)
			}
		} else {
			if len(usageFrames) != 1 || usageFrames[0] != len(frames)-1 || len(frames) != 8 {
				t.Fatalf("usage frames %v of %d", usageFrames, len(frames))
			}
			var u struct {
				ID      string          `json:"id"`
				Object  string          `json:"object"`
				Model   string          `json:"model"`
				Choices json.RawMessage `json:"choices"`
				Usage   struct {
					PromptTokens     int64 `json:"prompt_tokens"`
					CompletionTokens int64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			last := frames[len(frames)-1]
			if err := json.Unmarshal(last, &u); err != nil || string(u.Choices) != "[]" || u.Model != "served" ||
				u.Object != "chat.completion.chunk" || u.ID == "" || u.Usage != engine.Usage {
				t.Fatalf("usage chunk %s, engine usage %+v", last, engine.Usage)
			}
			fin := frames[len(frames)-2]
			if !bytes.Contains(fin, []byte(`"finish_reason":"length"`)) || !bytes.Contains(fin, []byte(`"usage":null`)) {
				t.Fatalf("finish chunk %s", fin)
			}
		}
		ev, _ := h.usageEvent(req.Tenant)
		if ev.Status != events.UsageStatusOK || ev.PromptTokens != engine.Usage.PromptTokens ||
			ev.CompletionTokens != engine.Usage.CompletionTokens || ev.Estimated {
			t.Fatalf("event %+v, engine %+v", ev, engine.Usage)
		}
	}
}

// Engine errors reach the client in OpenAI's shape with string codes; only
// overload and 5xx are retried (the engine is asked twice), deterministic
// failures once.
func TestEngineErrorMapping(t *testing.T) {
	h := newHarness(t)
	type engine struct {
		sim    *enginesim.Sim
		served string
	}
	engines := map[enginesim.ErrorStyle]engine{}
	for _, st := range []enginesim.ErrorStyle{enginesim.StyleOpenAI, enginesim.StyleLlama, enginesim.StyleVLLM, enginesim.StyleOllama} {
		sim, base := startSim(t, enginesim.Config{Models: []string{"up"}, ErrorStyle: st, ContextSize: 8})
		served := "m-" + st.String()
		h.startWorker(modelFor(served, "up", base))
		engines[st] = engine{sim, served}
	}
	for _, tc := range []struct {
		name     string
		style    enginesim.ErrorStyle
		fail     enginesim.Failure
		endpoint string
		body     string
		status   int
		code     string
		param    string
		attempts int64
	}{
		{"openai context", enginesim.StyleOpenAI, enginesim.Failure{}, "", longPrompt + "}", 400, contracts.CodeContextLengthExceeded, "messages", 1},
		{"llama context", enginesim.StyleLlama, enginesim.Failure{}, "", longPrompt + "}", 400, contracts.CodeContextLengthExceeded, "messages", 1},
		{"vllm context", enginesim.StyleVLLM, enginesim.Failure{}, "", longPrompt + "}", 400, contracts.CodeContextLengthExceeded, "messages", 1},
		{"ollama context", enginesim.StyleOllama, enginesim.Failure{}, "", longPrompt + "}", 400, contracts.CodeContextLengthExceeded, "messages", 1},
		{"llama context, completions", enginesim.StyleLlama, enginesim.Failure{}, events.EndpointCompletions,
			`{"model":"served","prompt":"one two three four five six seven eight nine ten","max_tokens":2}`, 400, contracts.CodeContextLengthExceeded, "prompt", 1},
		{"llama 400", enginesim.StyleLlama, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 400}, "", chatBody, 400, contracts.CodeInvalidRequest, "", 1},
		{"vllm 400 streamed", enginesim.StyleVLLM, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 400}, "", streamed(chatBody), 400, contracts.CodeInvalidRequest, "", 1},
		{"openai 422", enginesim.StyleOpenAI, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 422}, "", chatBody, 422, contracts.CodeInvalidRequest, "", 1},
		{"llama 401", enginesim.StyleLlama, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 401}, "", chatBody, 502, contracts.CodeUpstreamAuth, "", 1},
		{"vllm 401", enginesim.StyleVLLM, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 401}, "", streamed(chatBody), 502, contracts.CodeUpstreamAuth, "", 1},
		{"openai 403", enginesim.StyleOpenAI, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 403}, "", chatBody, 502, contracts.CodeUpstreamAuth, "", 1},
		{"openai 404", enginesim.StyleOpenAI, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 404}, "", chatBody, 502, contracts.CodeEngineError, "", 1},
		{"ollama 500", enginesim.StyleOllama, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 500}, "", chatBody, 502, contracts.CodeEngineError, "", 2},
		{"llama 503", enginesim.StyleLlama, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 503}, "", chatBody, 502, contracts.CodeEngineError, "", 2},
		{"vllm 429", enginesim.StyleVLLM, enginesim.Failure{Mode: enginesim.FailBeforeFirstToken, Status: 429}, "", chatBody, 429, contracts.CodeOverloaded, "", 2},
		{"connection closed before headers", enginesim.StyleOpenAI, enginesim.Failure{Mode: enginesim.FailDisconnect}, "", chatBody, 502, contracts.CodeEngineError, "", 2},
		{"llama error line before data", enginesim.StyleLlama, enginesim.Failure{Mode: enginesim.FailErrorLine, Status: 400}, "", streamed(chatBody), 400, contracts.CodeInvalidRequest, "", 1},
		{"llama error line 503", enginesim.StyleLlama, enginesim.Failure{Mode: enginesim.FailErrorLine, Status: 503}, "", streamed(chatBody), 502, contracts.CodeEngineError, "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := engines[tc.style]
			eng.sim.SetFailure(tc.fail)
			defer eng.sim.SetFailure(enginesim.Failure{})
			eng.sim.ResetStats()
			ep := tc.endpoint
			if ep == "" {
				ep = events.EndpointChatCompletions
			}
			body := strings.Replace(tc.body, `"served"`, `"`+eng.served+`"`, 1)
			req := newReq(eng.served, ep, strings.Contains(body, `"stream":true`), false, body)
			_, res, err := h.do(testCtx(t), req)
			be, e := apiError(t, err)
			if be.Status != tc.status || e.Code != tc.code || e.Param != tc.param || e.Message == "" {
				t.Fatalf("error %d %+v, want %d %s param %q", be.Status, e, tc.status, tc.code, tc.param)
			}
			if got := eng.sim.Stats().Requests; got != tc.attempts || res.Retried != (tc.attempts == 2) {
				t.Fatalf("engine asked %d times (retried %v), want %d", got, res.Retried, tc.attempts)
			}
			ev, _ := h.usageEvent(req.Tenant)
			if ev.Status != events.UsageStatusError || ev.ErrorCode != tc.code {
				t.Fatalf("event %+v", ev)
			}
		})
	}
}

// fakeEngine serves /v1/models listing "up" and answers inference requests
// with chat.
func fakeEngine(t *testing.T, chat http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"up","object":"model"}]}`)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		chat(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

func sse(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, s)
}

const chunk = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`

func TestStreamFields(t *testing.T) {
	h := newHarness(t)
	const key = "engine-secret-key-0123"
	var answer string
	base := fakeEngine(t, func(w http.ResponseWriter, r *http.Request) { sse(w, answer) })
	cfg := modelFor("served", "up", base)
	cfg.Engine.APIKey = key
	h.startWorker(cfg)
	run := func(include bool) ([][]byte, *events.UsageRecordedV1, error) {
		body := streamed(chatBody)
		if include {
			body = withUsage(body)
		}
		req := newReq("served", events.EndpointChatCompletions, true, include, body)
		frames, _, err := h.do(testCtx(t), req)
		ev, _ := h.usageEvent(req.Tenant)
		return frames, &ev, err
	}

	t.Run("comments, id, retry and other events are not chunks", func(t *testing.T) {
		answer = ": ping\n\nretry: 3000\n\nid: 1\nevent: message\ndata: " + chunk + "\n\n: ping\r\n\r\nid: 2\r\ndata: " + chunk + "\r\n\r\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` +
			"\n\ndata: [DONE]\n\n"
		frames, ev, err := run(true)
		if err != nil || len(frames) != 3 || ev.Status != events.UsageStatusOK || ev.CompletionTokens != 2 || ev.PromptTokens != 3 {
			t.Fatalf("err %v, frames %q, event %+v", err, frames, ev)
		}
		for _, f := range frames[:2] {
			if !bytes.Contains(f, []byte(`"model":"served"`)) || !json.Valid(f) {
				t.Fatalf("frame %s", f)
			}
		}
	})
	t.Run("an error object as data, numeric code, key echoed", func(t *testing.T) {
		answer = "data: " + chunk + "\n\n" + `data: {"error":{"code":500,"message":"upstream http://user:pw@10.0.0.1/x said Bearer ` + key + ` is bad","type":"server_error"}}` + "\n\n"
		frames, ev, err := run(false)
		be, e := apiError(t, err)
		if len(frames) != 1 || !be.AfterData || e.Code != contracts.CodeEngineError || ev.Status != events.UsageStatusError {
			t.Fatalf("%d frames, error %+v, event %+v", len(frames), e, ev)
		}
		if strings.Contains(string(be.Body), key) || strings.Contains(string(be.Body), "pw@") || !strings.Contains(e.Message, "[redacted]") {
			t.Fatalf("secrets in %s", be.Body)
		}
	})
	t.Run("event: error without data", func(t *testing.T) {
		answer = "data: " + chunk + "\n\nevent: error\n\n"
		_, ev, err := run(false)
		if _, e := apiError(t, err); e.Code != contracts.CodeEngineError || ev.Status != events.UsageStatusError {
			t.Fatalf("error %+v, event %+v", e, ev)
		}
	})
	t.Run("an error line the engine closes the stream after", func(t *testing.T) {
		answer = `error: {"code":400,"message":"Cannot use tools with stream","type":"invalid_request_error"}`
		frames, ev, err := run(false)
		be, e := apiError(t, err)
		if len(frames) != 0 || be.Status != 400 || be.Retryable || e.Code != contracts.CodeInvalidRequest ||
			e.Message != "Cannot use tools with stream" || ev.ErrorCode != contracts.CodeInvalidRequest {
			t.Fatalf("error %+v %+v, event %+v", be, e, ev)
		}
	})
	t.Run("empty data fields are skipped", func(t *testing.T) {
		answer = "data:\n\ndata: " + chunk + "\n\ndata: \n\ndata: [DONE]\n\n"
		frames, ev, err := run(false)
		if err != nil || len(frames) != 1 || ev.Status != events.UsageStatusOK {
			t.Fatalf("err %v, frames %q", err, frames)
		}
	})
	t.Run("a stream without [DONE] still fails", func(t *testing.T) {
		answer = "data: " + chunk + "\n\n"
		_, ev, err := run(false)
		if _, e := apiError(t, err); e.Code != contracts.CodeEngineError || ev.Status != events.UsageStatusError {
			t.Fatalf("error %+v, event %+v", e, ev)
		}
	})
}

// A stream request answered with JSON: the engine's error, or a failure.
func TestStreamAnsweredWithJSON(t *testing.T) {
	h := newHarness(t)
	var answer string
	base := fakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	})
	h.startWorker(modelFor("served", "up", base))
	for _, tc := range []struct{ answer, code string }{
		{`{"error":{"code":400,"message":"Cannot use tools with stream","type":"invalid_request_error"}}`, contracts.CodeInvalidRequest},
		{`{"id":"x","object":"chat.completion","choices":[]}`, contracts.CodeEngineError},
	} {
		answer = tc.answer
		req := newReq("served", events.EndpointChatCompletions, true, false, streamed(chatBody))
		_, _, err := h.do(testCtx(t), req)
		if _, e := apiError(t, err); e.Code != tc.code {
			t.Fatalf("%s: %+v", tc.answer, e)
		}
		if ev, _ := h.usageEvent(req.Tenant); ev.Status != events.UsageStatusError || ev.ErrorCode != tc.code {
			t.Fatalf("event %+v", ev)
		}
	}
}

func TestEngineErrorBodies(t *testing.T) {
	h := newHarness(t)
	const key = "engine-secret-key-4567"
	// What the worker's key probe at start ({} to chat) gets: an engine
	// that accepted the key refuses the empty body.
	var mu sync.Mutex // the worker's key probes run on their own goroutine
	status := http.StatusBadRequest
	var answer string
	calls := make(chan struct{}, 16)
	base := fakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 2 { // the key probe's "{}" is not a forwarded request
			calls <- struct{}{}
		}
		mu.Lock()
		st, body := status, answer
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(st)
		_, _ = io.WriteString(w, body)
	})
	cfg := modelFor("served", "up", base)
	cfg.Engine.APIKey = key
	h.startWorker(cfg)
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   contracts.Error
	}{
		{"llama tools with stream", 400, `{"error":{"code":400,"message":"Cannot use tools with stream","type":"invalid_request_error"}}`,
			contracts.Error{Status: 400, Code: contracts.CodeInvalidRequest, Message: "Cannot use tools with stream"}},
		{"vllm", 400, `{"object":"error","message":"This model's maximum context length is 2048 tokens. However, you requested 4000 tokens.","type":"BadRequestError","param":null,"code":400}`,
			contracts.Error{Status: 400, Code: contracts.CodeContextLengthExceeded, Param: "messages", Message: "This model's maximum context length is 2048 tokens. However, you requested 4000 tokens."}},
		{"openai code and param kept", 400, `{"error":{"message":"bad temperature","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`,
			contracts.Error{Status: 400, Code: "invalid_value", Param: "temperature", Message: "bad temperature"}},
		{"ollama string", 404, `{"error":"model \"up\" not found, try pulling it first"}`,
			contracts.Error{Status: 502, Code: contracts.CodeEngineError}},
		{"fastapi detail", 422, `{"detail":"field required"}`, contracts.Error{Status: 422, Code: contracts.CodeInvalidRequest, Message: "field required"}},
		{"plain text", 400, `bad request for https://admin:hunter2@engine.local/v1`, contracts.Error{Status: 400, Code: contracts.CodeInvalidRequest}},
		{"an error answered 200", 200, `{"error":{"message":"model is loading","type":"server_error","code":503}}`, contracts.Error{Status: 502, Code: contracts.CodeEngineError}},
		// Last: a refused key makes the worker check its key at once, and
		// with the engine still refusing it the replica stops serving.
		{"key refused", 401, `{"error":"Invalid API key ` + key + `"}`, contracts.Error{Status: 502, Code: contracts.CodeUpstreamAuth}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			status, answer = tc.status, tc.body
			mu.Unlock()
			for len(calls) > 0 {
				<-calls
			}
			req := newReq("served", events.EndpointChatCompletions, false, false, chatBody)
			_, _, err := h.do(testCtx(t), req)
			be, e := apiError(t, err)
			if be.Status != tc.want.Status || e.Code != tc.want.Code || e.Param != tc.want.Param || (tc.want.Message != "" && e.Message != tc.want.Message) {
				t.Fatalf("got %d %+v, want %+v", be.Status, e, tc.want)
			}
			for _, secret := range []string{key, "hunter2"} {
				if strings.Contains(string(be.Body), secret) {
					t.Fatalf("secret in %s", be.Body)
				}
			}
			want := 1
			if tc.status == 200 { // a 503 inside: retryable
				want = 2
			}
			if n := len(calls); n != want {
				t.Fatalf("engine asked %d times, want %d", n, want)
			}
		})
	}
}

// vLLM's continuous_usage_stats: usage on every chunk, as the client asked.
func TestContinuousUsageKept(t *testing.T) {
	h := newHarness(t)
	u := func(n int) string {
		return `,"usage":{"prompt_tokens":3,"completion_tokens":` + string(rune('0'+n)) + `,"total_tokens":9}}`
	}
	c := strings.TrimSuffix(chunk, "}")
	base := fakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, "data: "+c+u(1)+"\n\ndata: "+c+u(2)+"\n\ndata: [DONE]\n\n")
	})
	h.startWorker(modelFor("served", "up", base))
	for _, continuous := range []bool{false, true} {
		body := withUsage(streamed(chatBody))
		if continuous {
			body = strings.Replace(body, `"include_usage":true`, `"include_usage":true,"continuous_usage_stats":true`, 1)
		}
		req := newReq("served", events.EndpointChatCompletions, true, true, body)
		frames, _, err := h.do(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		withUsage := 0
		for _, f := range frames {
			if bytes.Contains(f, []byte(`"usage":{`)) {
				withUsage++
			}
		}
		if continuous && (len(frames) != 2 || withUsage != 2) || !continuous && (len(frames) != 3 || withUsage != 1) {
			t.Fatalf("continuous %v: frames %q", continuous, frames)
		}
		if ev, _ := h.usageEvent(req.Tenant); ev.CompletionTokens != 2 || ev.PromptTokens != 3 {
			t.Fatalf("event %+v", ev)
		}
	}
}
