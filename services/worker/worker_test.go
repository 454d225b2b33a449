package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

const chatBody = `{"model":"served","messages":[{"role":"user","content":"hello there world"}],"max_tokens":6}`

func TestConfigValidate(t *testing.T) {
	err := Config{Engine: registry.Engine{BaseURL: "ftp://x", MaxConcurrency: -1}, DrainTimeout: -1}.Validate()
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"(Model) is required", "Engine.BaseURL", "Engine.Model", "MaxConcurrency", "DrainTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	good := modelFor("a", "b", "http://127.0.0.1:1/v1")
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(good, Deps{}); err == nil || !strings.Contains(err.Error(), "Deps.Metrics") {
		t.Fatalf("New without deps: %v", err)
	}
}

func TestStartupChecksEngineModel(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"real-weights", "other"}})

	t.Run("wrong model", func(t *testing.T) {
		// The worker does not serve it and says why; it keeps checking.
		svc, done := h.runWorker(modelFor("served", "expected-weights", base), h.deps())
		eventually(t, 10*time.Second, "the misnamed state", func() bool { return svc.State().State == registry.WorkerMisnamed })
		st := svc.State()
		for _, want := range []string{`"expected-weights"`, "real-weights", "other"} {
			if !strings.Contains(st.LastError, want) {
				t.Errorf("last error %q does not name %s", st.LastError, want)
			}
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned for an engine without the model: %v", err)
		default:
		}
		if svc.Ready() || st.UpstreamVerified {
			t.Fatal("ready after a failed check")
		}
	})

	t.Run("right model", func(t *testing.T) {
		svc := h.startWorker(modelFor("served", "real-weights", base))
		if !strings.HasPrefix(svc.ID(), "w-") || len(svc.ID()) != 10 {
			t.Fatalf("worker id %q", svc.ID())
		}
	})

	t.Run("unreachable engine is waited for", func(t *testing.T) {
		_, deadBase, closeFn, err := enginesim.Start(enginesim.Config{})
		if err != nil {
			t.Fatal(err)
		}
		closeFn()
		svc, err := New(modelFor("served", "sim-model", deadBase), h.deps())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		eventually(t, 10*time.Second, "a retry logged", func() bool {
			return strings.Contains(h.logs.String(), "engine not reachable yet")
		})
		select {
		case err := <-done:
			t.Fatalf("Run returned while the engine was unreachable: %v", err)
		default:
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	})
}

func TestNonStreamChat(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	svc := h.startWorker(modelFor("served", "up", base))

	body := `{"model":"served","messages":[{"role":"user","content":"hello there <world> & co"}],"max_tokens":5,` +
		`"temperature":0.2,"response_format":{"type":"json_object"},"x_vendor":{"a":[1,2,{"b":null}],"html":"<b>"}}`
	req := newReq("served", events.EndpointChatCompletions, false, false, body)
	frames, res, err := h.do(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusOK || res.WorkerID != svc.ID() || res.ContentType != "application/json" {
		t.Fatalf("result %+v", res)
	}
	got := bytes.Join(frames, nil)

	// The engine saw the upstream model name and every other field as sent.
	up := decodeJSON(t, sim.LastBody())
	sent := decodeJSON(t, []byte(body))
	if up["model"] != "up" {
		t.Fatalf("upstream model %v", up["model"])
	}
	sent["model"] = "up"
	if a, b := mustJSON(t, up), mustJSON(t, sent); a != b {
		t.Fatalf("upstream body\n got %s\nwant %s", a, b)
	}

	// The answer is the engine's but for the model name and the fields
	// OpenAI's schema requires that the engine left out (refusal, as null).
	want, _ := simCall(t, base+"/chat/completions", string(sim.LastBody()))
	want = bytes.Replace(want, []byte(`"model":"up"`), []byte(`"model":"served"`), 1)
	want = contracts.CompleteChoices(want, true)
	if mustJSON(t, decodeJSON(t, []byte(normalize(got)))) != mustJSON(t, decodeJSON(t, []byte(normalize(want)))) {
		t.Fatalf("answer\n got %s\nwant %s", got, want)
	}

	var answer struct {
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(got, &answer); err != nil {
		t.Fatal(err)
	}
	ev, msg := h.usageEvent(req.Tenant)
	if msg.Header.Get(nats.MsgIdHdr) != req.ID || ev.RequestID != req.ID {
		t.Fatalf("msg id %q, event request id %q, want %q", msg.Header.Get(nats.MsgIdHdr), ev.RequestID, req.ID)
	}
	if ev.PromptTokens != answer.Usage.PromptTokens || ev.CompletionTokens != 5 || ev.CompletionTokens != answer.Usage.CompletionTokens {
		t.Fatalf("event tokens %d/%d, answer %+v", ev.PromptTokens, ev.CompletionTokens, answer.Usage)
	}
	if ev.Status != events.UsageStatusOK || ev.Estimated || ev.Model != "served" || ev.Endpoint != events.EndpointChatCompletions ||
		ev.Stream || ev.WorkerID != svc.ID() || ev.Reporter != DefaultSource || ev.KeyID != "key_test" || ev.Tenant != req.Tenant {
		t.Fatalf("event %+v", ev)
	}
	if msg.Header.Get(events.HeaderSource) != DefaultSource || msg.Header.Get(events.HeaderTenant) != req.Tenant {
		t.Fatalf("envelope %v", msg.Header)
	}

	// Metrics.
	if v := counterValue(t, h, "aiforge_worker_requests_total", map[string]string{"model": "served", "endpoint": "chat.completions", "status": "ok"}); v != 1 {
		t.Fatalf("requests_total = %v", v)
	}
	if v := counterValue(t, h, "aiforge_worker_generation_tokens_total", map[string]string{"model": "served"}); v != 5 {
		t.Fatalf("generation_tokens_total = %v", v)
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCompletionsEndpoint(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))

	req := newReq("served", events.EndpointCompletions, true, true, `{"model":"served","prompt":"one two three","max_tokens":4,"stream":true}`)
	frames, _, err := h.do(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	_, want := simCall(t, base+"/completions", string(sim.LastBody()))
	if len(frames) != len(want) {
		t.Fatalf("%d frames, want %d", len(frames), len(want))
	}
	for i := range frames {
		w := bytes.Replace(want[i], []byte(`"model":"up"`), []byte(`"model":"served"`), 1)
		if normalize(frames[i]) != normalize(w) {
			t.Fatalf("frame %d\n got %s\nwant %s", i, frames[i], w)
		}
	}
	ev, _ := h.usageEvent(req.Tenant)
	if ev.CompletionTokens != 4 || ev.PromptTokens != 3 || ev.Endpoint != events.EndpointCompletions || !ev.Stream {
		t.Fatalf("event %+v", ev)
	}
}

func TestStreamChatUsage(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))

	// The engine's own count, asked directly.
	whole, _ := simCall(t, base+"/chat/completions", strings.Replace(chatBody, `"served"`, `"up"`, 1))
	var direct struct {
		Usage struct{ PromptTokens, CompletionTokens int64 } `json:"usage"`
	}
	if err := json.Unmarshal(whole, &direct); err != nil {
		t.Fatal(err)
	}
	var ds struct {
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(whole, &ds)

	for _, include := range []bool{false, true} {
		name := "without include_usage"
		body := strings.Replace(chatBody, `"max_tokens":6`, `"max_tokens":6,"stream":true`, 1)
		if include {
			name = "with include_usage"
			body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}`, 1)
		}
		t.Run(name, func(t *testing.T) {
			req := newReq("served", events.EndpointChatCompletions, true, include, body)
			frames, res, err := h.do(testCtx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != http.StatusOK || res.ContentType != "text/event-stream" {
				t.Fatalf("result %+v", res)
			}
			// Upstream always asked for usage; other stream options kept.
			up := decodeJSON(t, sim.LastBody())
			so, _ := up["stream_options"].(map[string]any)
			if up["stream"] != true || so["include_usage"] != true {
				t.Fatalf("upstream body %s", sim.LastBody())
			}
			if include && so["continuous_usage_stats"] != false {
				t.Fatalf("client stream option lost: %s", sim.LastBody())
			}
			usageChunks := 0
			for _, f := range frames {
				if !bytes.Contains(f, []byte(`"model":"served"`)) {
					t.Fatalf("frame without served model: %s", f)
				}
				if bytes.Contains(f, []byte(`"usage":{`)) {
					usageChunks++
					if !bytes.Contains(f, []byte(`"choices":[]`)) {
						t.Fatalf("usage chunk with choices: %s", f)
					}
				}
			}
			ev, _ := h.usageEvent(req.Tenant)
			if ev.PromptTokens != ds.Usage.PromptTokens || ev.CompletionTokens != ds.Usage.CompletionTokens || ev.Estimated {
				t.Fatalf("event %+v, engine usage %+v", ev, ds.Usage)
			}
			if include {
				if usageChunks != 1 {
					t.Fatalf("%d usage chunks forwarded, want 1", usageChunks)
				}
				last := frames[len(frames)-1]
				var u struct {
					Choices []any `json:"choices"`
					Usage   struct {
						PromptTokens     int64 `json:"prompt_tokens"`
						CompletionTokens int64 `json:"completion_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal(last, &u); err != nil || len(u.Choices) != 0 || u.Usage.CompletionTokens != ev.CompletionTokens {
					t.Fatalf("last frame %s (%v)", last, err)
				}
			} else if usageChunks != 0 {
				t.Fatalf("%d usage chunks forwarded to a client that did not ask", usageChunks)
			}
			if ev.TTFTMS <= 0 || ev.LatencyMS < ev.TTFTMS || !ev.Stream {
				t.Fatalf("event timings %+v", ev)
			}
		})
	}
	if n := histogramCount(t, h, "aiforge_worker_time_to_first_token_seconds", "served"); n != 2 {
		t.Fatalf("ttft observations %d, want 2", n)
	}
	if n := histogramCount(t, h, "aiforge_worker_inter_token_latency_seconds", "served"); n == 0 {
		t.Fatal("no inter-token latency observed")
	}
}

func TestToolCallStreaming(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))

	body := `{"model":"served","stream":true,"messages":[{"role":"user","content":"weather?"}],` +
		`"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}],` +
		`"tool_choice":"auto","parallel_tool_calls":false}`
	req := newReq("served", events.EndpointChatCompletions, true, false, body)
	frames, _, err := h.do(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	up := decodeJSON(t, sim.LastBody())
	if up["tool_choice"] != "auto" || up["parallel_tool_calls"] != false || up["tools"] == nil {
		t.Fatalf("upstream body lost tool fields: %s", sim.LastBody())
	}
	_, want := simCall(t, base+"/chat/completions", string(sim.LastBody()))
	var wantFrames []string
	for _, w := range want {
		if bytes.Contains(w, []byte(`"choices":[]`)) {
			continue // the usage chunk the client did not ask for
		}
		w = bytes.Replace(w, []byte(`"model":"up"`), []byte(`"model":"served"`), 1)
		wantFrames = append(wantFrames, normalize(w))
	}
	if len(frames) != len(wantFrames) {
		t.Fatalf("%d frames, want %d", len(frames), len(wantFrames))
	}
	var args strings.Builder
	for i, f := range frames {
		if normalize(f) != wantFrames[i] {
			t.Fatalf("frame %d\n got %s\nwant %s", i, f, wantFrames[i])
		}
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Index    *int `json:"index"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(f, &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index == nil || *tc.Index != 0 {
					t.Fatalf("tool call without index 0: %s", f)
				}
				args.WriteString(tc.Function.Arguments)
			}
		}
	}
	var parsed map[string]string
	if err := json.Unmarshal([]byte(args.String()), &parsed); err != nil || parsed["q"] == "" {
		t.Fatalf("tool arguments %q: %v", args.String(), err)
	}
	ev, _ := h.usageEvent(req.Tenant)
	if ev.CompletionTokens != 3 || ev.Estimated {
		t.Fatalf("event %+v", ev)
	}
}

func TestEmbeddingsFloatAndBase64(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}, EmbeddingDims: 16})
	h.startWorker(modelFor("served", "up", base))

	type answer struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []struct {
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	get := func(format string) (answer, events.UsageRecordedV1) {
		body := `{"model":"served","input":["the quick fox","jumps"],"user":"u1"}`
		if format != "" {
			body = strings.Replace(body, `"user"`, `"encoding_format":"`+format+`","user"`, 1)
		}
		req := newReq("served", events.EndpointEmbeddings, false, false, body)
		frames, _, err := h.do(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		var a answer
		if err := json.Unmarshal(bytes.Join(frames, nil), &a); err != nil {
			t.Fatal(err)
		}
		if a.Model != "served" || a.Object != "list" || len(a.Data) != 2 {
			t.Fatalf("answer %s", bytes.Join(frames, nil))
		}
		up := decodeJSON(t, sim.LastBody())
		if format == "base64" && up["encoding_format"] != "float" {
			t.Fatalf("base64 asked upstream: %s", sim.LastBody())
		}
		if up["user"] != "u1" {
			t.Fatalf("field lost upstream: %s", sim.LastBody())
		}
		ev, _ := h.usageEvent(req.Tenant)
		return a, ev
	}
	floats, ev := get("float")
	if ev.PromptTokens != floats.Usage.PromptTokens || ev.PromptTokens != 4 || ev.CompletionTokens != 0 || ev.Endpoint != events.EndpointEmbeddings {
		t.Fatalf("event %+v", ev)
	}
	b64, _ := get("base64")
	for i := range floats.Data {
		var f []float32
		if err := json.Unmarshal(floats.Data[i].Embedding, &f); err != nil {
			t.Fatal(err)
		}
		var s string
		if err := json.Unmarshal(b64.Data[i].Embedding, &s); err != nil {
			t.Fatalf("base64 embedding is not a string: %s", b64.Data[i].Embedding)
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) != 4*len(f) || len(f) != 16 {
			t.Fatalf("%d bytes for %d floats", len(raw), len(f))
		}
		for j := range f {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])); got != f[j] {
				t.Fatalf("data[%d][%d] = %v, want %v", i, j, got, f[j])
			}
		}
	}
}

func TestEngineErrorBeforeFirstToken(t *testing.T) {
	h := newHarness(t)
	bad, badBase := startSim(t, enginesim.Config{Models: []string{"up"}})
	bad.SetFailure(enginesim.Failure{Mode: enginesim.FailBeforeFirstToken})
	badWorker := h.startWorker(modelFor("m", "up", badBase))
	body := strings.Replace(chatBody, `"max_tokens":6`, `"max_tokens":6,"stream":true`, 1)

	t.Run("alone", func(t *testing.T) {
		_, res, err := h.do(testCtx(t), newReq("m", events.EndpointChatCompletions, true, false, body))
		var be *bridge.Error
		if !errors.As(err, &be) {
			t.Fatalf("err %v", err)
		}
		if be.Status != http.StatusBadGateway || be.Code != contracts.CodeEngineError || !be.Retryable || be.AfterData {
			t.Fatalf("error %+v", be)
		}
		if !res.Retried || res.DataFrames != 0 {
			t.Fatalf("result %+v", res)
		}
		if e, ok := contracts.ParseError(be.Status, be.Body); !ok || e.Code != contracts.CodeEngineError {
			t.Fatalf("error body %s", be.Body)
		}
	})

	t.Run("fails over to a healthy replica", func(t *testing.T) {
		_, goodBase := startSim(t, enginesim.Config{Models: []string{"up"}})
		good := h.startWorker(modelFor("m", "up", goodBase))
		retried := false
		for i := 0; i < 64 && !retried; i++ {
			req := newReq("m", events.EndpointChatCompletions, true, false, body)
			frames, res, err := h.do(testCtx(t), req)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if res.WorkerID != good.ID() || len(frames) == 0 {
				t.Fatalf("result %+v from %s", res, badWorker.ID())
			}
			if res.Retried {
				retried = true
				// The failed attempt left no usage event: the retry's is kept.
				ev, _ := h.usageEvent(req.Tenant)
				if ev.Status != events.UsageStatusOK || ev.WorkerID != good.ID() || ev.CompletionTokens != 6 {
					t.Fatalf("event %+v", ev)
				}
			}
		}
		if !retried {
			t.Fatal("no request landed on the failing replica first")
		}
	})
}

func TestEngine4xxPassesThrough(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))
	req := newReq("served", events.EndpointChatCompletions, false, false, `{"model":"served","messages":[]}`)
	_, res, err := h.do(testCtx(t), req)
	var be *bridge.Error
	if !errors.As(err, &be) || be.Status != http.StatusBadRequest || be.Retryable || res.Retried {
		t.Fatalf("err %v result %+v", err, res)
	}
	e, ok := contracts.ParseError(be.Status, be.Body)
	if !ok || e.Param != "messages" || !strings.Contains(e.Message, "messages") {
		t.Fatalf("engine body not passed through: %s", be.Body)
	}
	ev, _ := h.usageEvent(req.Tenant)
	if ev.Status != events.UsageStatusError || ev.CompletionTokens != 0 {
		t.Fatalf("event %+v", ev)
	}
}

func TestEngineFailsAfterFirstToken(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))
	for _, mode := range []enginesim.FailureMode{enginesim.FailAfterFirstToken, enginesim.FailDisconnect} {
		t.Run(mode.String(), func(t *testing.T) {
			sim.SetFailure(enginesim.Failure{Mode: mode, AfterTokens: 3, Count: 1})
			body := strings.Replace(chatBody, `"max_tokens":6`, `"max_tokens":6,"stream":true`, 1)
			req := newReq("served", events.EndpointChatCompletions, true, true, body)
			frames, res, err := h.do(testCtx(t), req)
			var be *bridge.Error
			if !errors.As(err, &be) || be.Code != contracts.CodeEngineError || be.Retryable || !be.AfterData {
				t.Fatalf("err %v", err)
			}
			if len(frames) != 3 || res.Retried {
				t.Fatalf("%d frames, result %+v", len(frames), res)
			}
			ev, _ := h.usageEvent(req.Tenant)
			if ev.Status != events.UsageStatusError || ev.ErrorCode != contracts.CodeEngineError ||
				ev.CompletionTokens != 3 || !ev.Estimated {
				t.Fatalf("event %+v", ev)
			}
		})
	}
}

func TestEdgeCancelStopsEngine(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}, TokensPerSecond: 100, DefaultMaxTokens: 100000})
	h.startWorker(modelFor("served", "up", base))

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	req := newReq("served", events.EndpointChatCompletions, true, false,
		`{"model":"served","stream":true,"messages":[{"role":"user","content":"go on"}]}`)
	n := 0
	_, err := h.client.Do(ctx, req, func([]byte) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	eventually(t, 10*time.Second, "the engine to see the cancel", func() bool { return sim.Stats().Canceled == 1 })
	ev, _ := h.usageEvent(req.Tenant)
	if ev.Status != events.UsageStatusCanceled || ev.CompletionTokens < 3 || !ev.Estimated {
		t.Fatalf("event %+v", ev)
	}
	if st := sim.Stats(); st.InFlight != 0 || st.Completed != 0 {
		t.Fatalf("sim stats %+v", st)
	}
}

func TestRequestTimeout(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	cfg := modelFor("served", "up", base)
	cfg.RequestTimeout = 300 * time.Millisecond
	h.startWorker(cfg)
	sim.SetFailure(enginesim.Failure{Mode: enginesim.FailHang, Count: 1})
	req := newReq("served", events.EndpointChatCompletions, false, false, chatBody)
	_, _, err := h.do(testCtx(t), req)
	var be *bridge.Error
	if !errors.As(err, &be) || be.Status != http.StatusGatewayTimeout || be.Code != contracts.CodeEngineTimeout {
		t.Fatalf("err %v", err)
	}
	eventually(t, 10*time.Second, "the engine to see the cancel", func() bool { return sim.Stats().Canceled == 1 })
	ev, _ := h.usageEvent(req.Tenant)
	if ev.Status != events.UsageStatusError || ev.ErrorCode != contracts.CodeEngineTimeout {
		t.Fatalf("event %+v", ev)
	}
}

func TestHealthPausesWorker(t *testing.T) {
	h := newHarness(t)
	sim := enginesim.New(enginesim.Config{Models: []string{"up"}})
	var failing atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" && failing.Load() {
			http.Error(w, "engine sick", http.StatusServiceUnavailable)
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	cfg := modelFor("served", "up", ts.URL+"/v1")
	cfg.HealthInterval = 20 * time.Millisecond
	svc := h.startWorker(cfg)

	failing.Store(true)
	eventually(t, 10*time.Second, "the worker to pause", func() bool { return !svc.Ready() })
	eventually(t, 10*time.Second, "requests to find no worker", func() bool {
		_, _, err := h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, chatBody))
		return errors.Is(err, bridge.ErrNoWorker)
	})
	failing.Store(false)
	eventually(t, 10*time.Second, "the worker to resume", svc.Ready)
	eventually(t, 10*time.Second, "requests to be served again", func() bool {
		_, _, err := h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, chatBody))
		return err == nil
	})
}

func TestEngineAPIKeyNeverLogged(t *testing.T) {
	h := newHarness(t)
	const secret = "sk-engine-SECRET-7f3a9c"
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}, APIKey: secret})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	deps := h.deps()
	deps.Tracer = tp

	// Without the key the engine refuses: a clear error, no key in it.
	bad, _ := h.runWorker(modelFor("served", "up", base), deps)
	eventually(t, 10*time.Second, "the unauthorized state", func() bool {
		st := bad.State()
		return st.State == registry.WorkerUnauthorized && strings.Contains(st.LastError, "401")
	})

	cfg := modelFor("served", "up", base)
	cfg.Engine.APIKey = secret
	h.startWorkerDeps(cfg, deps)
	for _, stream := range []bool{false, true} {
		body := chatBody
		if stream {
			body = strings.Replace(chatBody, `"max_tokens":6`, `"max_tokens":6,"stream":true`, 1)
		}
		req := newReq("served", events.EndpointChatCompletions, stream, false, body)
		if _, _, err := h.do(testCtx(t), req); err != nil {
			t.Fatal(err)
		}
		ev, msg := h.usageEvent(req.Tenant)
		if strings.Contains(string(msg.Data), secret) || strings.Contains(mustJSON(t, msg.Header), secret) || ev.Status != events.UsageStatusOK {
			t.Fatalf("usage event %s", msg.Data)
		}
	}
	if got := sim.LastPostHeaders().Get("Authorization"); got != "Bearer "+secret {
		t.Fatalf("engine got Authorization %q", got)
	}
	sim.SetFailure(enginesim.Failure{Mode: enginesim.FailAfterFirstToken, Count: 1})
	_, _, _ = h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, true, false,
		strings.Replace(chatBody, `"max_tokens":6`, `"max_tokens":6,"stream":true`, 1)))

	logs := h.logs.String()
	if !strings.Contains(logs, "worker serving") {
		t.Fatalf("logs were not captured: %s", logs)
	}
	if strings.Contains(logs, secret) {
		t.Fatalf("the engine API key appears in the logs:\n%s", logs)
	}
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), secret) {
				t.Fatalf("span %s attribute %s holds the key", s.Name(), kv.Key)
			}
		}
	}
}

func TestTracePropagation(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	deps := h.deps()
	deps.Tracer = tp
	h.startWorkerDeps(modelFor("served", "up", base), deps)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const parentID = "00f067aa0ba902b7"
	req := newReq("served", events.EndpointChatCompletions, false, false, chatBody)
	req.Header = nats.Header{bridge.HdrTraceParent: []string{"00-" + traceID + "-" + parentID + "-01"}}
	if _, _, err := h.do(testCtx(t), req); err != nil {
		t.Fatal(err)
	}
	tp0 := sim.LastPostHeaders().Get("traceparent")
	parts := strings.Split(tp0, "-")
	if len(parts) != 4 || parts[1] != traceID || parts[2] == parentID {
		t.Fatalf("engine got traceparent %q", tp0)
	}
	_, msg := h.usageEvent(req.Tenant)
	var span, eng sdktrace.ReadOnlySpan
	eventually(t, 5*time.Second, "the worker and engine spans", func() bool {
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "worker chat.completions":
				span = s
			case "chat up":
				eng = s
			}
		}
		return span != nil && eng != nil
	})
	// client → worker (server span) → engine (client span, whose id the
	// engine got); the usage event is in the worker's span.
	if span.Parent().SpanID().String() != parentID || span.SpanKind() != trace.SpanKindServer {
		t.Fatalf("worker span parent %s kind %v", span.Parent().SpanID(), span.SpanKind())
	}
	if eng.Parent().SpanID() != span.SpanContext().SpanID() || eng.SpanContext().SpanID().String() != parts[2] || eng.SpanKind() != trace.SpanKindClient {
		t.Fatalf("engine span parent %s id %s kind %v, engine got %s", eng.Parent().SpanID(), eng.SpanContext().SpanID(), eng.SpanKind(), parts[2])
	}
	if got, want := msg.Header.Get(events.HeaderTraceParent), "00-"+traceID+"-"+span.SpanContext().SpanID().String()+"-01"; got != want {
		t.Fatalf("usage event traceparent %q, want %q", got, want)
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range span.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["gen_ai.request.model"].AsString() != "served" || attrs["gen_ai.operation.name"].AsString() != "chat" ||
		attrs["gen_ai.usage.output_tokens"].AsInt64() != 6 || attrs["aiforge.tenant.id"].AsString() != req.Tenant ||
		attrs["aiforge.key.id"].AsString() != req.KeyID || !slices.Equal(attrs["gen_ai.response.finish_reasons"].AsStringSlice(), []string{"length"}) {
		t.Fatalf("worker span attributes %v", span.Attributes())
	}
	attrs = map[attribute.Key]attribute.Value{}
	for _, kv := range eng.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["gen_ai.request.model"].AsString() != "up" || attrs["gen_ai.response.model"].AsString() != "up" ||
		attrs["gen_ai.usage.output_tokens"].AsInt64() != 6 || attrs["gen_ai.usage.input_tokens"].AsInt64() == 0 ||
		attrs["server.address"].AsString() != "127.0.0.1" || attrs["gen_ai.provider.name"].AsString() == "" {
		t.Fatalf("engine span attributes %v", eng.Attributes())
	}
}

func TestUnknownEndpoint(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))
	_, _, err := h.do(testCtx(t), newReq("served", "images.generations", false, false, `{}`))
	var be *bridge.Error
	if !errors.As(err, &be) || be.Status != http.StatusBadRequest || be.Retryable {
		t.Fatalf("err %v", err)
	}
	_, _, err = h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, `[1,2]`))
	if !errors.As(err, &be) || be.Status != http.StatusBadRequest || be.Code != contracts.CodeInvalidJSON {
		t.Fatalf("err %v", err)
	}
}

func TestRunningGaugeAndDrain(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}, TokensPerSecond: 200, DefaultMaxTokens: 40})
	cfg := modelFor("served", "up", base)
	cfg.DrainTimeout = 10 * time.Second
	svc, done, stop := h.runWorkerCancel(cfg, h.deps())
	eventually(t, 10*time.Second, "ready", svc.Ready)

	started := make(chan struct{})
	type out struct {
		frames int
		err    error
	}
	result := make(chan out, 1)
	req := newReq("served", events.EndpointChatCompletions, true, false,
		`{"model":"served","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	go func() {
		n := 0
		_, err := h.client.Do(testCtx(t), req, func([]byte) error {
			if n++; n == 1 {
				close(started)
			}
			return nil
		})
		result <- out{n, err}
	}()
	<-started
	if v := gaugeValue(t, h, "aiforge_worker_requests_running", "served"); v != 1 {
		t.Fatalf("running = %v", v)
	}
	// Stop the worker mid-stream: the request in flight still finishes.
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := <-result
	if r.err != nil || r.frames != 41 { // 40 tokens and the finish chunk
		t.Fatalf("drained request: %d frames, %v", r.frames, r.err)
	}
	if ev, _ := h.usageEvent(req.Tenant); ev.Status != events.UsageStatusOK || ev.CompletionTokens != 40 {
		t.Fatalf("event %+v", ev)
	}
	if _, ok := gaugeValueOK(t, h, "aiforge_worker_requests_running", "served"); ok {
		t.Fatal("a stopped worker is still exported")
	}
}

// BenchmarkWorkerStream measures one streamed chat request of 64 tokens
// through bridge client -> worker -> engine simulator, against the same
// request sent to the simulator directly (the baseline of the same run).
func BenchmarkWorkerStream(b *testing.B) {
	h := newHarness(b)
	_, base := startSim(b, enginesim.Config{Models: []string{"up"}, DefaultMaxTokens: 64})
	h.startWorker(modelFor("served", "up", base))
	body := `{"model":"served","stream":true,"messages":[{"role":"user","content":"benchmark me"}]}`
	upBody := strings.Replace(body, `"served"`, `"up"`, 1)
	client := NewHTTPClient()

	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Post(base+"/chat/completions", "application/json", strings.NewReader(upBody))
			if err != nil {
				b.Fatal(err)
			}
			rd := contracts.NewSSEReader(resp.Body)
			n := 0
			for {
				p, err := rd.Next()
				if err != nil {
					b.Fatal(err)
				}
				if bytes.Equal(p, contracts.DoneMarker) {
					break
				}
				n++
			}
			resp.Body.Close()
			if n != 65 {
				b.Fatalf("%d chunks", n)
			}
		}
	})
	b.Run("worker", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		for b.Loop() {
			req := newReq("served", events.EndpointChatCompletions, true, false, body)
			n := 0
			if _, err := h.client.Do(ctx, req, func([]byte) error { n++; return nil }); err != nil {
				b.Fatal(err)
			}
			if n != 65 {
				b.Fatalf("%d chunks", n)
			}
		}
	})
}

// A model's TTFT timeout ends a stream whose engine sends no first token
// with 504 engine_timeout; a stream that starts in time is not cut by it.
func TestTTFTTimeout(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}, TimeToFirstToken: time.Hour})
	cfg := modelFor("served", "up", base)
	cfg.Engine.TTFTTimeout = registry.Duration(100 * time.Millisecond)
	h.startWorker(cfg)
	req := newReq("served", events.EndpointChatCompletions, true, false, chatBody)
	frames, _, err := h.do(testCtx(t), req)
	var be *bridge.Error
	if !errors.As(err, &be) || be.Status != http.StatusGatewayTimeout || be.Code != contracts.CodeEngineTimeout || len(frames) != 0 {
		t.Fatalf("frames %d, err %v; want 504 engine_timeout", len(frames), err)
	}
	if e, ok := contracts.ParseError(be.Status, be.Body); !ok || !strings.Contains(e.Message, "first token") {
		t.Fatalf("error body %s", be.Body)
	}
	eventually(t, 10*time.Second, "the engine to see the cancel", func() bool { return sim.Stats().Canceled == 1 })
	ev, _ := h.usageEvent(req.Tenant)
	if ev.Status != events.UsageStatusError || ev.ErrorCode != contracts.CodeEngineTimeout {
		t.Fatalf("event %+v", ev)
	}

	// The first token in time: the stream is served whole.
	sim.SetTiming(0, 0)
	frames, _, err = h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, true, false, chatBody))
	if err != nil || len(frames) == 0 {
		t.Fatalf("stream after SetTiming(0): %d frames, %v", len(frames), err)
	}
}

// A model's own request timeout takes the place of the worker's.
func TestModelRequestTimeout(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	cfg := modelFor("served", "up", base)
	cfg.Engine.RequestTimeout = registry.Duration(100 * time.Millisecond)
	h.startWorker(cfg)
	sim.SetFailure(enginesim.Failure{Mode: enginesim.FailHang, Count: 1})
	_, _, err := h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, chatBody))
	var be *bridge.Error
	if !errors.As(err, &be) || be.Status != http.StatusGatewayTimeout || be.Code != contracts.CodeEngineTimeout {
		t.Fatalf("err %v", err)
	}
}
