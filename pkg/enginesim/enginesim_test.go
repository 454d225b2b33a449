package enginesim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- helpers ----------------------------------------------------------------

func startSim(t testing.TB, cfg Config) (*Sim, string) {
	t.Helper()
	sim, base, closeFn, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(closeFn)
	return sim, base
}

func doReq(t testing.TB, ctx context.Context, method, url, body string, hdr map[string]string) (*http.Response, error) {
	t.Helper()
	if ctx == nil {
		ctx = context.Background()
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

// call does a request and returns status and full body, failing on transport
// errors.
func call(t testing.TB, method, url, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := doReq(t, nil, method, url, body, hdr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, b
}

func mustJSON(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
}

// sseEvents splits an SSE body into the payloads of its data events. It fails
// on anything that is not a well-formed `data: ...\n\n` event.
func sseEvents(t testing.TB, body []byte) []string {
	t.Helper()
	var out []string
	rest := string(body)
	for rest != "" {
		ev, after, ok := strings.Cut(rest, "\n\n")
		if !ok {
			t.Fatalf("unterminated SSE event %q in body %q", rest, body)
		}
		payload, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(payload, "\n") {
			t.Fatalf("malformed SSE event %q", ev)
		}
		out = append(out, payload)
		rest = after
	}
	return out
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type toolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

type chatResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []toolCall      `json:"tool_calls"`
		} `json:"message"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason string          `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      *string    `json:"role"`
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func checkError(t testing.TB, status, wantStatus int, body []byte, wantType, wantCode string) errorBody {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status = %d, want %d (body %s)", status, wantStatus, body)
	}
	var e errorBody
	mustJSON(t, body, &e)
	if e.Error.Message == "" || e.Error.Type != wantType {
		t.Fatalf("error body %s: want type %q and a message", body, wantType)
	}
	if wantCode != "" && (e.Error.Code == nil || *e.Error.Code != wantCode) {
		t.Fatalf("error body %s: want code %q", body, wantCode)
	}
	return e
}

func checkWords(t testing.TB, text string, n int) {
	t.Helper()
	ws := strings.Split(text, " ")
	if len(ws) != n {
		t.Fatalf("text %q has %d words, want %d", text, len(ws), n)
	}
	for _, w := range ws {
		if !slices.Contains(words[:], w) {
			t.Fatalf("text %q: %q is not a vocabulary word", text, w)
		}
	}
}

const chatBody = `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hello there  world"}],"max_tokens":5,"n":3,"temperature":0.7,"some_unknown_field":{"x":[1,2]}}`

func chatNonStream(t testing.TB, base, body string) chatResponse {
	t.Helper()
	status, _, b := call(t, "POST", base+"/chat/completions", body, nil)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	var r chatResponse
	mustJSON(t, b, &r)
	if len(r.Choices) != 1 {
		t.Fatalf("want exactly 1 choice, got %s", b)
	}
	return r
}

func contentString(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	var s string
	mustJSON(t, raw, &s)
	return s
}

// ---- tests ------------------------------------------------------------------

func TestModels(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"a", "b", "a"}})
	status, _, b := call(t, "GET", base+"/models", "", nil)
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	mustJSON(t, b, &list)
	if list.Object != "list" || len(list.Data) != 2 {
		t.Fatalf("models = %s", b)
	}
	for i, id := range []string{"a", "b"} {
		d := list.Data[i]
		if d.ID != id || d.Object != "model" || d.Created != modelsCreated || d.OwnedBy != "enginesim" {
			t.Fatalf("model %d = %+v", i, d)
		}
	}
	status, _, b = call(t, "GET", base+"/models/b", "", nil)
	if status != 200 || !strings.Contains(string(b), `"id":"b"`) {
		t.Fatalf("GET /models/b = %d %s", status, b)
	}
	status, _, b = call(t, "GET", base+"/models/zz", "", nil)
	checkError(t, status, 404, b, "invalid_request_error", "model_not_found")
	if got := sim.Stats().Requests; got != 0 {
		t.Fatalf("GET requests counted as inference requests: %d", got)
	}

	_, base2 := startSim(t, Config{})
	_, _, b = call(t, "GET", base2+"/models", "", nil)
	if !strings.Contains(string(b), `"id":"sim-model"`) {
		t.Fatalf("default models = %s", b)
	}
}

func TestHealth(t *testing.T) {
	_, base := startSim(t, Config{APIKey: "k"})
	root := strings.TrimSuffix(base, "/v1")
	for _, u := range []string{root + "/health", base + "/health"} {
		status, _, b := call(t, "GET", u, "", nil)
		if status != 200 || string(b) != "ok" {
			t.Fatalf("GET %s = %d %q", u, status, b)
		}
	}
}

func TestChatNonStream(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m", "other"}})
	r := chatNonStream(t, base, chatBody)
	if !strings.HasPrefix(r.ID, "chatcmpl-sim-") || r.Object != "chat.completion" || r.Model != "m" || r.Created == 0 {
		t.Fatalf("envelope = %+v", r)
	}
	c := r.Choices[0]
	if c.Index != 0 || c.Message.Role != "assistant" || c.FinishReason != "length" || string(c.Logprobs) != "null" {
		t.Fatalf("choice = %+v", c)
	}
	text := contentString(t, c.Message.Content)
	checkWords(t, text, 5)
	// 3 + 3 words + 1 per message.
	if r.Usage != (usage{PromptTokens: 8, CompletionTokens: 5, TotalTokens: 13}) {
		t.Fatalf("usage = %+v", r.Usage)
	}

	// Deterministic: the same request gives the same text (with a new id).
	r2 := chatNonStream(t, base, chatBody)
	if got := contentString(t, r2.Choices[0].Message.Content); got != text {
		t.Fatalf("not deterministic: %q vs %q", got, text)
	}
	if r2.ID == r.ID {
		t.Fatalf("ids repeat: %s", r.ID)
	}
	// ... and a different prompt gives a different text.
	r3 := chatNonStream(t, base, strings.Replace(chatBody, "hello", "goodbye", 1))
	if got := contentString(t, r3.Choices[0].Message.Content); got == text {
		t.Fatalf("different prompts gave the same text %q", got)
	}

	// No max_tokens: DefaultMaxTokens (16) and finish_reason "stop"; the
	// model defaults to the first one.
	r4 := chatNonStream(t, base, `{"messages":[{"role":"user","content":"hi"}]}`)
	checkWords(t, contentString(t, r4.Choices[0].Message.Content), 16)
	if r4.Choices[0].FinishReason != "stop" || r4.Model != "m" {
		t.Fatalf("default generation = %+v", r4)
	}
	if r4.Usage != (usage{PromptTokens: 2, CompletionTokens: 16, TotalTokens: 18}) {
		t.Fatalf("usage = %+v", r4.Usage)
	}

	// max_completion_tokens; array content counts its text parts only.
	r5 := chatNonStream(t, base, `{"model":"other","max_completion_tokens":3,"messages":[{"role":"user","content":[{"type":"text","text":"a b c"},{"type":"image_url","image_url":{"url":"http://x/y z"}}]},{"role":"assistant","content":null}]}`)
	checkWords(t, contentString(t, r5.Choices[0].Message.Content), 3)
	if r5.Model != "other" || r5.Usage != (usage{PromptTokens: 5, CompletionTokens: 3, TotalTokens: 8}) {
		t.Fatalf("array content: model %q usage %+v", r5.Model, r5.Usage)
	}

	st := sim.Stats()
	if st.Requests != 5 || st.Completed != 5 || st.InFlight != 0 || st.TokensSent != 5+5+5+16+3 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestChatStream(t *testing.T) {
	for _, includeUsage := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "include_usage"}[includeUsage], func(t *testing.T) {
			sim, base := startSim(t, Config{Models: []string{"m"}})
			want := contentString(t, chatNonStream(t, base, chatBody).Choices[0].Message.Content)
			sim.ResetStats()

			body := strings.Replace(chatBody, `"n":3`, `"stream":true`, 1)
			if includeUsage {
				body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
			}
			status, hdr, b := call(t, "POST", base+"/chat/completions", body, nil)
			if status != 200 {
				t.Fatalf("status %d: %s", status, b)
			}
			if ct := hdr.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("Content-Type = %q", ct)
			}
			if cc := hdr.Get("Cache-Control"); cc != "no-cache" {
				t.Fatalf("Cache-Control = %q", cc)
			}
			evs := sseEvents(t, b)
			if evs[len(evs)-1] != "[DONE]" {
				t.Fatalf("last event %q, want [DONE]", evs[len(evs)-1])
			}
			evs = evs[:len(evs)-1]
			wantChunks := 5 + 1 // tokens + finish
			if includeUsage {
				wantChunks++
			}
			if len(evs) != wantChunks {
				t.Fatalf("got %d chunks, want %d: %q", len(evs), wantChunks, evs)
			}
			var got strings.Builder
			var id string
			for i, ev := range evs {
				var raw map[string]json.RawMessage
				mustJSON(t, []byte(ev), &raw)
				u, hasUsage := raw["usage"]
				var c chunk
				mustJSON(t, []byte(ev), &c)
				if i == 0 {
					id = c.ID
				}
				if c.ID != id || !strings.HasPrefix(id, "chatcmpl-sim-") || c.Object != "chat.completion.chunk" || c.Model != "m" || c.Created == 0 {
					t.Fatalf("chunk %d envelope: %s", i, ev)
				}
				if includeUsage && i == len(evs)-1 {
					if len(c.Choices) != 0 || c.Usage == nil || *c.Usage != (usage{8, 5, 13}) {
						t.Fatalf("usage chunk = %s", ev)
					}
					if !strings.Contains(ev, `"choices":[]`) {
						t.Fatalf("usage chunk must carry \"choices\":[]: %s", ev)
					}
					continue
				}
				if includeUsage != hasUsage || (hasUsage && string(u) != "null") {
					t.Fatalf("chunk %d usage field (include_usage=%v): %s", i, includeUsage, ev)
				}
				if len(c.Choices) != 1 || c.Choices[0].Index != 0 {
					t.Fatalf("chunk %d choices: %s", i, ev)
				}
				ch := c.Choices[0]
				if i == 5 { // finish chunk
					if ch.FinishReason == nil || *ch.FinishReason != "length" || !strings.Contains(ev, `"delta":{}`) {
						t.Fatalf("final chunk = %s", ev)
					}
					continue
				}
				if ch.FinishReason != nil || ch.Delta.Content == nil {
					t.Fatalf("token chunk %d = %s", i, ev)
				}
				if (i == 0) != (ch.Delta.Role != nil) || (ch.Delta.Role != nil && *ch.Delta.Role != "assistant") {
					t.Fatalf("role must be in the first chunk only; chunk %d = %s", i, ev)
				}
				got.WriteString(*ch.Delta.Content)
			}
			if got.String() != want {
				t.Fatalf("streamed %q, non-streamed %q", got.String(), want)
			}
			st := sim.Stats()
			if st.TokensSent != 5 || st.Completed != 1 || st.InFlight != 0 {
				t.Fatalf("stats = %+v", st)
			}
		})
	}
}

const toolsBody = `{"model":"m","messages":[{"role":"user","content":"what is up"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}},{"type":"function","function":{"name":"other"}}]`

func TestToolCalls(t *testing.T) {
	_, base := startSim(t, Config{Models: []string{"m"}})

	r := chatNonStream(t, base, toolsBody+`}`)
	c := r.Choices[0]
	if c.FinishReason != "tool_calls" || string(c.Message.Content) != "null" || len(c.Message.ToolCalls) != 1 {
		t.Fatalf("tool call response = %+v", r)
	}
	tc := c.Message.ToolCalls[0]
	if tc.ID != "call_sim_0" || tc.Type != "function" || tc.Function.Name == nil || *tc.Function.Name != "lookup" || tc.Function.Arguments == nil {
		t.Fatalf("tool call = %+v", tc)
	}
	args := *tc.Function.Arguments
	var parsed map[string]string
	mustJSON(t, []byte(args), &parsed)
	if len(parsed) != 1 || !slices.Contains(words[:], parsed["q"]) {
		t.Fatalf("arguments = %q", args)
	}
	if r.Usage.CompletionTokens != 3 {
		t.Fatalf("usage = %+v", r.Usage)
	}

	// Streamed: header chunk, argument pieces (index kept), finish chunk.
	status, _, b := call(t, "POST", base+"/chat/completions", toolsBody+`,"stream":true}`, nil)
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	evs := sseEvents(t, b)
	if evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("no [DONE]: %q", evs)
	}
	evs = evs[:len(evs)-1]
	if n := len(evs) - 2; n < 2 || n > 3 {
		t.Fatalf("want 2-3 argument chunks, got %d: %q", n, evs)
	}
	var first chunk
	mustJSON(t, []byte(evs[0]), &first)
	d := first.Choices[0].Delta
	if d.Role == nil || *d.Role != "assistant" || len(d.ToolCalls) != 1 {
		t.Fatalf("first chunk = %s", evs[0])
	}
	h := d.ToolCalls[0]
	if h.Index == nil || *h.Index != 0 || h.ID != "call_sim_0" || h.Type != "function" ||
		h.Function.Name == nil || *h.Function.Name != "lookup" || h.Function.Arguments == nil || *h.Function.Arguments != "" {
		t.Fatalf("first chunk tool call = %s", evs[0])
	}
	var streamed strings.Builder
	for _, ev := range evs[1 : len(evs)-1] {
		var c chunk
		mustJSON(t, []byte(ev), &c)
		tcs := c.Choices[0].Delta.ToolCalls
		if len(tcs) != 1 || tcs[0].Index == nil || *tcs[0].Index != 0 || tcs[0].Function.Arguments == nil || c.Choices[0].FinishReason != nil {
			t.Fatalf("argument chunk = %s", ev)
		}
		streamed.WriteString(*tcs[0].Function.Arguments)
	}
	if streamed.String() != args {
		t.Fatalf("streamed arguments %q, non-streamed %q", streamed.String(), args)
	}
	var last chunk
	mustJSON(t, []byte(evs[len(evs)-1]), &last)
	if fr := last.Choices[0].FinishReason; fr == nil || *fr != "tool_calls" {
		t.Fatalf("final chunk = %s", evs[len(evs)-1])
	}

	// tool_choice "none": plain text.
	r = chatNonStream(t, base, toolsBody+`,"tool_choice":"none","max_tokens":2}`)
	if r.Choices[0].FinishReason != "length" || len(r.Choices[0].Message.ToolCalls) != 0 {
		t.Fatalf("tool_choice none = %+v", r)
	}
	checkWords(t, contentString(t, r.Choices[0].Message.Content), 2)

	// A named tool_choice picks that function.
	r = chatNonStream(t, base, toolsBody+`,"tool_choice":{"type":"function","function":{"name":"other"}}}`)
	if tcs := r.Choices[0].Message.ToolCalls; len(tcs) != 1 || *tcs[0].Function.Name != "other" {
		t.Fatalf("named tool_choice = %+v", r)
	}
}

// A code tool (a function with a "code" parameter) is called with the
// last fenced code block of the last user message, streamed or not; after
// a tool result the answer is text.
func TestCodeToolCalls(t *testing.T) {
	_, base := startSim(t, Config{Models: []string{"m"}})
	tools := `"tools":[{"type":"function","function":{"name":"python","parameters":{"type":"object","properties":{"code":{"type":"string"}}}}}]`
	user := `{"role":"user","content":"compute this:\n` + "```" + `python\nprint(\"a\" * 2)\n` + "```" + `\nthanks"}`
	body := `{"model":"m","messages":[` + user + `],` + tools
	r := chatNonStream(t, base, body+`}`)
	tcs := r.Choices[0].Message.ToolCalls
	if len(tcs) != 1 || *tcs[0].Function.Name != "python" {
		t.Fatalf("code tool call = %+v", r)
	}
	var args map[string]string
	mustJSON(t, []byte(*tcs[0].Function.Arguments), &args)
	if len(args) != 1 || args["code"] != "print(\"a\" * 2)\n" {
		t.Fatalf("arguments = %q", *tcs[0].Function.Arguments)
	}
	_, _, b := call(t, "POST", base+"/chat/completions", body+`,"stream":true}`, nil)
	var streamed strings.Builder
	for _, ev := range sseEvents(t, b) {
		if ev == "[DONE]" {
			continue
		}
		var c chunk
		mustJSON(t, []byte(ev), &c)
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Function.Arguments != nil {
					streamed.WriteString(*tc.Function.Arguments)
				}
			}
		}
	}
	if streamed.String() != *tcs[0].Function.Arguments {
		t.Fatalf("streamed arguments %q, non-streamed %q", streamed.String(), *tcs[0].Function.Arguments)
	}
	// After the tool's result: text.
	r = chatNonStream(t, base, `{"model":"m","messages":[`+user+`,{"role":"assistant","content":null,"tool_calls":[{"id":"call_sim_0","type":"function","function":{"name":"python","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_sim_0","content":"aa"}],`+tools+`,"max_tokens":3}`)
	if len(r.Choices[0].Message.ToolCalls) != 0 {
		t.Fatalf("after a tool result = %+v", r)
	}
	checkWords(t, contentString(t, r.Choices[0].Message.Content), 3)
}

func TestCompletions(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}, DefaultMaxTokens: 4})
	type compResp struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Text         string          `json:"text"`
			Index        int             `json:"index"`
			Logprobs     json.RawMessage `json:"logprobs"`
			FinishReason string          `json:"finish_reason"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	get := func(body string) compResp {
		status, _, b := call(t, "POST", base+"/completions", body, nil)
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		var r compResp
		mustJSON(t, b, &r)
		if len(r.Choices) != 1 {
			t.Fatalf("choices: %s", b)
		}
		return r
	}
	r := get(`{"model":"m","prompt":"once upon a time"}`)
	if !strings.HasPrefix(r.ID, "cmpl-sim-") || r.Object != "text_completion" || r.Model != "m" ||
		r.Choices[0].FinishReason != "stop" || string(r.Choices[0].Logprobs) != "null" {
		t.Fatalf("completion = %+v", r)
	}
	checkWords(t, r.Choices[0].Text, 4)
	if r.Usage != (usage{4, 4, 8}) {
		t.Fatalf("usage = %+v", r.Usage)
	}
	// An array prompt uses its first element.
	r2 := get(`{"model":"m","prompt":["once upon a time","ignored"]}`)
	if r2.Choices[0].Text != r.Choices[0].Text || r2.Usage != r.Usage {
		t.Fatalf("array prompt: %+v vs %+v", r2, r)
	}
	r3 := get(`{"model":"m","prompt":[1,2,3],"max_tokens":2}`)
	checkWords(t, r3.Choices[0].Text, 2)
	if r3.Choices[0].FinishReason != "length" || r3.Usage != (usage{3, 2, 5}) {
		t.Fatalf("token prompt = %+v", r3)
	}

	// Streamed.
	status, _, b := call(t, "POST", base+"/completions", `{"model":"m","prompt":"once upon a time","stream":true,"stream_options":{"include_usage":true}}`, nil)
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	evs := sseEvents(t, b)
	if len(evs) != 4+1+1+1 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("events = %q", evs)
	}
	var text strings.Builder
	for i, ev := range evs[:4] {
		var c chunk
		mustJSON(t, []byte(ev), &c)
		if c.Object != "text_completion" || len(c.Choices) != 1 || c.Choices[0].Text == nil || c.Choices[0].FinishReason != nil ||
			!strings.Contains(ev, `"logprobs":null`) || !strings.Contains(ev, `"usage":null`) {
			t.Fatalf("chunk %d = %s", i, ev)
		}
		text.WriteString(*c.Choices[0].Text)
	}
	if text.String() != r.Choices[0].Text {
		t.Fatalf("streamed %q, non-streamed %q", text.String(), r.Choices[0].Text)
	}
	var fin, use chunk
	mustJSON(t, []byte(evs[4]), &fin)
	mustJSON(t, []byte(evs[5]), &use)
	if fr := fin.Choices[0].FinishReason; fr == nil || *fr != "stop" || *fin.Choices[0].Text != "" {
		t.Fatalf("final chunk = %s", evs[4])
	}
	if len(use.Choices) != 0 || use.Usage == nil || *use.Usage != (usage{4, 4, 8}) {
		t.Fatalf("usage chunk = %s", evs[5])
	}
	if st := sim.Stats(); st.Completed != 4 || st.TokensSent != 4+4+2+4 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestEmbeddings(t *testing.T) {
	_, base := startSim(t, Config{Models: []string{"e"}})
	type embResp struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []struct {
			Object    string          `json:"object"`
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	get := func(body string) embResp {
		status, _, b := call(t, "POST", base+"/embeddings", body, nil)
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		var r embResp
		mustJSON(t, b, &r)
		if r.Object != "list" || r.Model != "e" {
			t.Fatalf("envelope: %s", b)
		}
		for i, d := range r.Data {
			if d.Object != "embedding" || d.Index != i {
				t.Fatalf("item %d: %s", i, b)
			}
		}
		return r
	}
	floats := func(raw json.RawMessage) []float32 {
		var v []float32
		mustJSON(t, raw, &v)
		return v
	}
	r := get(`{"model":"e","input":["hello world","goodbye"]}`)
	if len(r.Data) != 2 || r.Usage.PromptTokens != 3 || r.Usage.TotalTokens != 3 {
		t.Fatalf("embeddings = %+v", r)
	}
	v0, v1 := floats(r.Data[0].Embedding), floats(r.Data[1].Embedding)
	if len(v0) != 8 || len(v1) != 8 || slices.Equal(v0, v1) {
		t.Fatalf("vectors %v %v", v0, v1)
	}
	for _, v := range [][]float32{v0, v1} {
		var sum float64
		for _, x := range v {
			sum += float64(x) * float64(x)
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Fatalf("vector %v has squared norm %v", v, sum)
		}
	}
	// Deterministic, and a single string input matches the array item.
	if s := get(`{"model":"e","input":"hello world","encoding_format":"float"}`); !slices.Equal(floats(s.Data[0].Embedding), v0) {
		t.Fatalf("not deterministic")
	}

	// base64: little-endian float32, identical to the float result.
	b := get(`{"model":"e","input":["hello world","goodbye"],"encoding_format":"base64"}`)
	for i, want := range [][]float32{v0, v1} {
		var s string
		mustJSON(t, b.Data[i].Embedding, &s)
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw) != 4*len(want) {
			t.Fatalf("base64 %q: %v", s, err)
		}
		for j := range want {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])); got != want[j] {
				t.Fatalf("item %d dim %d: base64 %v, float %v", i, j, got, want[j])
			}
		}
	}

	// dimensions, token-id inputs.
	d := get(`{"model":"e","input":[[1,2,3],[4]],"dimensions":5}`)
	if len(d.Data) != 2 || len(floats(d.Data[0].Embedding)) != 5 || d.Usage.PromptTokens != 4 {
		t.Fatalf("token inputs = %+v", d)
	}
	if d1 := get(`{"model":"e","input":[1,2,3],"dimensions":5}`); !slices.Equal(floats(d1.Data[0].Embedding), floats(d.Data[0].Embedding)) {
		t.Fatalf("[1,2,3] and [[1,2,3]] differ")
	}

	status, _, body := call(t, "POST", base+"/embeddings", `{"model":"e","input":[]}`, nil)
	checkError(t, status, 400, body, "invalid_request_error", "")
	status, _, body = call(t, "POST", base+"/embeddings", `{"model":"e","input":"x","encoding_format":"int8"}`, nil)
	checkError(t, status, 400, body, "invalid_request_error", "")
}

func TestRequestErrors(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}})
	status, _, b := call(t, "POST", base+"/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, nil)
	e := checkError(t, status, 404, b, "invalid_request_error", "model_not_found")
	if e.Error.Param == nil || *e.Error.Param != "model" {
		t.Fatalf("param = %v", e.Error.Param)
	}
	for _, ep := range []string{"/chat/completions", "/completions", "/embeddings"} {
		status, _, b = call(t, "POST", base+ep, `{"model":`, nil)
		checkError(t, status, 400, b, "invalid_request_error", "")
	}
	status, _, b = call(t, "POST", base+"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, nil)
	checkError(t, status, 400, b, "invalid_request_error", "")
	status, _, b = call(t, "GET", base+"/nothing/here", "", nil)
	checkError(t, status, 404, b, "invalid_request_error", "")
	status, _, b = call(t, "GET", strings.TrimSuffix(base, "/v1")+"/elsewhere", "", nil)
	checkError(t, status, 404, b, "invalid_request_error", "")
	status, _, b = call(t, "GET", base+"/chat/completions", "", nil)
	checkError(t, status, 405, b, "invalid_request_error", "")
	if st := sim.Stats(); st.Requests != 5 || st.Rejected != 5 || st.Completed != 0 || st.InFlight != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestAPIKey(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}, APIKey: "sekret"})
	chat := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Authorization": "sekret"}} {
		status, _, b := call(t, "POST", base+"/chat/completions", chat, hdr)
		checkError(t, status, 401, b, "invalid_request_error", "invalid_api_key")
		status, _, b = call(t, "GET", base+"/models", "", hdr)
		checkError(t, status, 401, b, "invalid_request_error", "invalid_api_key")
	}
	ok := map[string]string{"Authorization": "Bearer sekret"}
	if status, _, b := call(t, "POST", base+"/chat/completions", chat, ok); status != 200 {
		t.Fatalf("authorized chat = %d %s", status, b)
	}
	if status, _, b := call(t, "GET", base+"/models", "", ok); status != 200 {
		t.Fatalf("authorized models = %d %s", status, b)
	}
	if st := sim.Stats(); st.Rejected != 3 || st.Completed != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestLastHeadersAndBody(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}})
	if sim.LastHeaders() != nil || sim.LastBody() != nil {
		t.Fatal("expected nothing recorded yet")
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	chat := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	call(t, "POST", base+"/chat/completions", chat, map[string]string{"traceparent": tp, "Authorization": "Bearer abc"})
	if h := sim.LastHeaders(); h.Get("Traceparent") != tp || h.Get("Authorization") != "Bearer abc" {
		t.Fatalf("LastHeaders = %v", h)
	}
	if got := sim.LastBody(); string(got) != chat {
		t.Fatalf("LastBody = %q", got)
	}
	// The returned values are copies.
	sim.LastBody()[0] = 'X'
	sim.LastHeaders().Set("Traceparent", "changed")
	if string(sim.LastBody()) != chat || sim.LastHeaders().Get("Traceparent") != tp {
		t.Fatal("LastBody/LastHeaders return shared state")
	}
	call(t, "GET", base+"/models", "", map[string]string{"X-Probe": "1"})
	if sim.LastHeaders().Get("X-Probe") != "1" {
		t.Fatal("LastHeaders must follow GET /v1/models")
	}
	if h := sim.LastPostHeaders(); h.Get("X-Probe") != "" || h.Get("Traceparent") != tp {
		t.Fatalf("LastPostHeaders = %v", h)
	}
}

func streamBody(n int) string {
	return `{"model":"m","stream":true,"max_tokens":` + strconv.Itoa(n) + `,"messages":[{"role":"user","content":"stream please"}]}`
}

func TestFailBeforeFirstToken(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}})
	sim.SetFailure(Failure{Mode: FailBeforeFirstToken, Count: 2})
	for i := 0; i < 2; i++ {
		status, _, b := call(t, "POST", base+"/chat/completions", streamBody(3), nil)
		checkError(t, status, 500, b, "server_error", "")
		if p := sim.PendingFailure(); i == 0 && (p.Mode != FailBeforeFirstToken || p.Count != 1) {
			t.Fatalf("pending failure after one request = %+v", p)
		}
	}
	if p := sim.PendingFailure(); p.Mode != FailNone {
		t.Fatalf("failure not cleared: %+v", p)
	}
	status, _, b := call(t, "POST", base+"/embeddings", `{"model":"m","input":"x"}`, nil)
	if status != 200 {
		t.Fatalf("after the failures cleared: %d %s", status, b)
	}
	if st := sim.Stats(); st.Failed != 2 || st.Completed != 1 || st.TokensSent != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestFailAfterFirstToken(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}})
	sim.SetFailure(Failure{Mode: FailAfterFirstToken, AfterTokens: 2}) // every request
	for range 2 {
		status, _, b := call(t, "POST", base+"/chat/completions", streamBody(5), nil)
		if status != 200 {
			t.Fatalf("status %d", status)
		}
		evs := sseEvents(t, b)
		if len(evs) != 3 {
			t.Fatalf("want 2 tokens and an error event, got %q", evs)
		}
		for _, ev := range evs[:2] {
			var c chunk
			mustJSON(t, []byte(ev), &c)
			if len(c.Choices) != 1 || c.Choices[0].Delta.Content == nil {
				t.Fatalf("token chunk = %s", ev)
			}
		}
		var e errorBody
		mustJSON(t, []byte(evs[2]), &e)
		if e.Error.Message == "" || e.Error.Type != "server_error" {
			t.Fatalf("error event = %s", evs[2])
		}
	}
	// Not streamed: 500. Embeddings too.
	status, _, b := call(t, "POST", base+"/completions", `{"model":"m","prompt":"x"}`, nil)
	checkError(t, status, 500, b, "server_error", "")
	status, _, b = call(t, "POST", base+"/embeddings", `{"model":"m","input":"x"}`, nil)
	checkError(t, status, 500, b, "server_error", "")

	sim.SetFailure(Failure{})
	_, _, b = call(t, "POST", base+"/chat/completions", streamBody(5), nil)
	if evs := sseEvents(t, b); evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("after clearing: %q", evs)
	}
	if st := sim.Stats(); st.Failed != 4 || st.TokensSent != 2+2+5 || st.Completed != 1 || st.InFlight != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestFailHang(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		sim, base := startSim(t, Config{Models: []string{"m"}})
		sim.SetFailure(Failure{Mode: FailHang, Count: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		resp, err := doReq(t, ctx, "POST", base+"/chat/completions", streamBody(3), nil)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("hung request answered %d", resp.StatusCode)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}
		waitFor(t, "Canceled == 1", func() bool { return sim.Stats().Canceled == 1 })
		waitFor(t, "InFlight == 0", func() bool { return sim.Stats().InFlight == 0 })
		if st := sim.Stats(); st.Failed != 1 || st.Completed != 0 {
			t.Fatalf("stats = %+v", st)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		sim, base := startSim(t, Config{Models: []string{"m"}})
		sim.SetFailure(Failure{Mode: FailHang})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			resp, err := doReq(t, ctx, "POST", base+"/completions", `{"model":"m","prompt":"x"}`, nil)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		waitFor(t, "InFlight == 1", func() bool { return sim.Stats().InFlight == 1 })
		if st := sim.Stats(); st.Canceled != 0 || st.Completed != 0 {
			t.Fatalf("stats while hanging = %+v", st)
		}
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("hung request succeeded")
		}
		waitFor(t, "Canceled == 1 and InFlight == 0", func() bool {
			st := sim.Stats()
			return st.Canceled == 1 && st.InFlight == 0
		})
	})
}

func TestFailDisconnect(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}})
	sim.SetFailure(Failure{Mode: FailDisconnect, AfterTokens: 3, Count: 2})

	resp, err := doReq(t, nil, "POST", base+"/chat/completions", streamBody(10), nil)
	if err != nil {
		t.Fatalf("stream request: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("stream read ended cleanly: %q", b)
	}
	if resp.StatusCode != 200 || bytes.Contains(b, []byte("[DONE]")) || bytes.Count(b, []byte(`"content":`)) != 3 {
		t.Fatalf("partial stream (err %v): %q", err, b)
	}

	resp, err = doReq(t, nil, "POST", base+"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("non-streamed request got a response: %d", resp.StatusCode)
	}
	// Cleared after Count requests.
	if status, _, b := call(t, "POST", base+"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil); status != 200 {
		t.Fatalf("after the failures: %d %s", status, b)
	}
	waitFor(t, "InFlight == 0", func() bool { return sim.Stats().InFlight == 0 })
	if st := sim.Stats(); st.Failed != 2 || st.TokensSent != 3+16 || st.Completed != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestClientCancelMidStream(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}, TokensPerSecond: 500})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := doReq(t, ctx, "POST", base+"/chat/completions", streamBody(100000), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q: %v", line, err)
	}
	cancel()
	waitFor(t, "Canceled == 1 and InFlight == 0", func() bool {
		st := sim.Stats()
		return st.Canceled == 1 && st.InFlight == 0
	})
	if st := sim.Stats(); st.Completed != 0 || st.TokensSent < 1 || st.TokensSent >= 100000 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestTiming(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}})
	_, _, fast := call(t, "POST", base+"/chat/completions", streamBody(4), nil)

	// Paced output is the same output (ids aside).
	sim.SetTiming(time.Millisecond, 2000)
	_, _, slow := call(t, "POST", base+"/chat/completions", streamBody(4), nil)
	content := func(b []byte) string {
		var s strings.Builder
		for _, ev := range sseEvents(t, b) {
			var c chunk
			if ev != "[DONE]" {
				mustJSON(t, []byte(ev), &c)
				if len(c.Choices) == 1 && c.Choices[0].Delta.Content != nil {
					s.WriteString(*c.Choices[0].Delta.Content)
				}
			}
		}
		return s.String()
	}
	if a, b := content(fast), content(slow); a != b || a == "" {
		t.Fatalf("paced %q vs unpaced %q", b, a)
	}

	// Cancel while waiting for the first token: headers arrive, then the
	// client gives up.
	sim.SetTiming(time.Hour, 0)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := doReq(t, ctx, "POST", base+"/chat/completions", streamBody(4), nil)
	if err != nil {
		t.Fatalf("headers should arrive before the first token: %v", err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("response %d %v", resp.StatusCode, resp.Header)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "Canceled == 1", func() bool { return sim.Stats().Canceled == 1 })

	// Non-streamed request canceled during its wait.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if resp, err := doReq(t, ctx, "POST", base+"/embeddings", `{"model":"m","input":"x"}`, nil); err == nil {
		resp.Body.Close()
		t.Fatal("request with a 1h TTFT answered")
	}
	waitFor(t, "Canceled == 2 and InFlight == 0", func() bool {
		st := sim.Stats()
		return st.Canceled == 2 && st.InFlight == 0
	})
}

func TestConcurrent(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"m"}})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := streamBody(8)
			if i%2 == 0 {
				body = strings.Replace(body, `"stream":true`, `"stream":false`, 1)
			}
			if status, _, b := call(t, "POST", base+"/chat/completions", body, nil); status != 200 {
				t.Errorf("status %d: %s", status, b)
			}
		}()
	}
	wg.Wait()
	if st := sim.Stats(); st.Requests != 20 || st.Completed != 20 || st.InFlight != 0 || st.TokensSent != 160 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestHandlerWithRecorder(t *testing.T) {
	sim := New(Config{})
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":2}`,
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`,
	} {
		rec := httptest.NewRecorder()
		sim.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body)))
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"model":"sim-model"`) {
			t.Fatalf("recorder: %d %s", rec.Code, rec.Body)
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uo\te`, "ctl\x00\x01\x1f\n\r\t", "üñí €", "bad\xffutf8\xc3", "sep\u2028\u2029", "<&>"} {
		got := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q encoded as invalid JSON %s: %v", s, got, err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Fatalf("%q round-trips to %q, encoding/json gives %q", s, back, wantBack)
		}
	}
}

func TestCountWords(t *testing.T) {
	for _, s := range []string{"", " ", "a", " a  b\tc\n", "über\u00a0alles", "x\u3000y z"} {
		if got, want := countWords(s), len(strings.Fields(s)); got != want {
			t.Fatalf("countWords(%q) = %d, want %d", s, got, want)
		}
	}
}

// ---- benchmarks -------------------------------------------------------------

func benchChat(b *testing.B, body string) {
	_, base := startSim(b, Config{Models: []string{"m"}})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	url := base + "/chat/completions"
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("status %d: %v", resp.StatusCode, err)
		}
	}
}

func BenchmarkChatNonStream(b *testing.B) {
	benchChat(b, `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"benchmark prompt"}]}`)
}

func BenchmarkChatStream(b *testing.B) {
	benchChat(b, streamBody(16))
}

// discardWriter is a minimal flushing ResponseWriter, to measure the
// handler alone.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

func BenchmarkHandlerChat(b *testing.B) {
	sim := New(Config{Models: []string{"m"}})
	for _, stream := range []bool{false, true} {
		b.Run(map[bool]string{false: "nonstream", true: "stream"}[stream], func(b *testing.B) {
			body := []byte(strings.Replace(streamBody(16), `"stream":true`, `"stream":`+strconv.FormatBool(stream), 1))
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
				w := &discardWriter{h: http.Header{}}
				sim.ServeHTTP(w, req)
			}
		})
	}
}

// TestEmbedIsLexical: the simulator's embeddings are a weak lexical model: unit vectors, deterministic, texts
// that share words or word forms closer than unrelated ones, the same vector over HTTP as from Embed.
func TestEmbedIsLexical(t *testing.T) {
	cos := func(a, b []float32) float64 {
		var d float64
		for i := range a {
			d += float64(a[i]) * float64(b[i])
		}
		return d
	}
	const dims = 384
	q := Embed("How do I keep a package from being upgraded?", dims)
	related := Embed("Holding packages: an upgrade leaves a held package at its version; keep it with apt-mark hold.", dims)
	unrelated := Embed("The bicycle's chain needs oil every few hundred kilometres of riding in the rain.", dims)
	if c := cos(q, q); math.Abs(c-1) > 1e-5 {
		t.Fatalf("|q|² = %v", c)
	}
	if cr, cu := cos(q, related), cos(q, unrelated); cr < 0.2 || cr <= cu+0.1 {
		t.Fatalf("cosine to a related text %.3f, to an unrelated one %.3f", cr, cu)
	}
	// Word forms share stems and trigrams; an unrelated word does not.
	if a, b := cos(Embed("keyrings", dims), Embed("keyring", dims)), cos(Embed("keyrings", dims), Embed("bicycle", dims)); a < 0.9 || b > 0.3 {
		t.Fatalf("keyrings~keyring %.3f, keyrings~bicycle %.3f", a, b)
	}
	if !slices.Equal(Embed("a b c", 16), Embed("a b c", 16)) {
		t.Fatal("not deterministic")
	}
	// Stop words only: no feature, still a unit vector, and different texts differ.
	for _, s := range []string{"", "the and of", "..."} {
		v := Embed(s, 8)
		if n := cos(v, v); math.Abs(n-1) > 1e-5 {
			t.Fatalf("%q: |v|² = %v", s, n)
		}
	}
	if slices.Equal(Embed("the and of", 8), Embed("to be or not", 8)) {
		t.Fatal("two featureless texts got the same vector")
	}

	_, base := startSim(t, Config{Models: []string{"e"}, EmbeddingDims: dims})
	status, _, b := call(t, "POST", base+"/embeddings", `{"model":"e","input":"How do I keep a package from being upgraded?"}`, nil)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	var r struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	mustJSON(t, b, &r)
	if len(r.Data) != 1 || !slices.Equal(r.Data[0].Embedding, q) {
		t.Fatal("the HTTP embedding differs from Embed's")
	}
}
