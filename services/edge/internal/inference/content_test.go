package inference

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/events"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInputMessagesChat(t *testing.T) {
	body := mustJSON(t, map[string]any{"model": "m", "messages": []any{
		map[string]any{"role": "system", "content": "be brief"},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "what is this?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,SECRETPIXELS"}},
		}},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
			map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "lookup", "arguments": `{"q":"x"}`}},
		}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "42"},
	}})
	ms, dropped, ok := InputMessages(events.EndpointChatCompletions, body)
	if !ok || dropped != 0 {
		t.Fatalf("ok %v dropped %d", ok, dropped)
	}
	got := encode(ms)
	want := `[{"role":"system","parts":[{"type":"text","content":"be brief"}]},` +
		`{"role":"user","parts":[{"type":"text","content":"what is this?"},{"type":"image_url"}]},` +
		`{"role":"assistant","parts":[{"type":"tool_call","id":"call_1","name":"lookup","arguments":"{\"q\":\"x\"}"}]},` +
		`{"role":"tool","parts":[{"type":"tool_call_response","id":"call_1","response":"42"}]}]`
	if got != want {
		t.Fatalf("input messages\n got %s\nwant %s", got, want)
	}
	if strings.Contains(got, "SECRETPIXELS") {
		t.Fatal("image data recorded")
	}
}

func TestInputMessagesCompletions(t *testing.T) {
	ms, _, ok := InputMessages(events.EndpointCompletions, []byte(`{"model":"m","prompt":["one","two"]}`))
	if !ok {
		t.Fatal("not ok")
	}
	if got, want := encode(ms), `[{"role":"user","parts":[{"type":"text","content":"one"},{"type":"text","content":"two"}]}]`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
	if _, _, ok := InputMessages(events.EndpointCompletions, []byte(`{"model":"m","prompt":[1,2,3]}`)); ok {
		t.Fatal("token prompt recorded")
	}
	if _, _, ok := InputMessages(events.EndpointEmbeddings, []byte(`{"model":"m","input":"x"}`)); ok {
		t.Fatal("embeddings input recorded")
	}
}

func TestInputMessagesBounds(t *testing.T) {
	huge := strings.Repeat("é", MaxContentPartBytes) // 2 bytes each: twice the bound
	var msgs []any
	for i := range MaxContentMessages + 5 {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("turn %d ", i) + huge})
	}
	ms, dropped, ok := InputMessages(events.EndpointChatCompletions, mustJSON(t, map[string]any{"messages": msgs}))
	if !ok {
		t.Fatal("not ok")
	}
	if dropped != 5 || len(ms) != MaxContentMessages {
		t.Fatalf("dropped %d, kept %d", dropped, len(ms))
	}
	// 64 KiB of budget: the last four turns get 16 KiB each.
	if c := *ms[len(ms)-4].Parts[0].Content; !strings.HasPrefix(c, fmt.Sprintf("turn %d ", MaxContentMessages+1)) {
		t.Fatalf("the earliest messages were not the ones dropped: %.20q", c)
	}
	total := 0
	for i, m := range ms {
		c := *m.Parts[0].Content
		if !utf8.ValidString(c) {
			t.Fatalf("message %d cut inside a UTF-8 sequence", i)
		}
		text, _, cut := strings.Cut(c, truncatedMarkerHead)
		if !cut {
			t.Fatalf("message %d not marked truncated", i)
		}
		if len(text) > MaxContentPartBytes {
			t.Fatalf("message %d keeps %d bytes", i, len(text))
		}
		total += len(text)
	}
	if total > MaxContentBytes {
		t.Fatalf("%d bytes in all, bound %d", total, MaxContentBytes)
	}
	// The budget goes to the latest turns: the last one is kept in full
	// up to the part bound, the first ones are empty.
	last := *ms[len(ms)-1].Parts[0].Content
	if !strings.HasPrefix(last, fmt.Sprintf("turn %d ", MaxContentMessages+4)) || len(strings.Split(last, truncatedMarkerHead)[0]) < MaxContentPartBytes-1 {
		t.Fatalf("last turn %d bytes", len(last))
	}
	if first := *ms[0].Parts[0].Content; !strings.HasPrefix(first, truncatedMarkerHead) {
		t.Fatalf("first kept turn has text past the budget: %.30q", first)
	}
	if a := len(encode(ms)); a > MaxContentBytes+MaxContentMessages*200 {
		t.Fatalf("attribute of %d bytes", a)
	}
}

func TestOutputRecorderStream(t *testing.T) {
	o := NewOutputRecorder(events.EndpointChatCompletions)
	o.Chunk([]byte(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`))
	o.Chunk([]byte(`{"choices":[{"index":0,"delta":{"content":"Hello, "},"finish_reason":null}]}`))
	o.Chunk([]byte(`{"choices":[{"index":0,"delta":{"content":"world"},"finish_reason":null}]}`))
	o.Chunk([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"get","arguments":"{\"a\""}}]}}]}`))
	o.Chunk([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}`))
	o.Chunk([]byte(`{"choices":[],"usage":{"prompt_tokens":3}}`))
	ms, dropped := o.Messages(false)
	got := encode(ms)
	want := `[{"role":"assistant","parts":[{"type":"text","content":"Hello, world"},{"type":"tool_call","id":"c1","name":"get","arguments":"{\"a\":1}"}],"finish_reason":"tool_calls"}]`
	if got != want || dropped != 0 {
		t.Fatalf("got %s (dropped %d)\nwant %s", got, dropped, want)
	}
}

func TestOutputRecorderBounds(t *testing.T) {
	o := NewOutputRecorder(events.EndpointChatCompletions)
	piece := strings.Repeat("x", 1000)
	n := 3 * MaxContentPartBytes / 1000
	for range n {
		o.Chunk(mustJSON(t, map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": piece}}}}))
	}
	o.Chunk([]byte(`{"choices":[{"index":500,"delta":{"content":"far"}}]}`))
	ms, dropped := o.Messages(true)
	if dropped != 1 || len(ms) != 1 {
		t.Fatalf("dropped %d, %d messages", dropped, len(ms))
	}
	c := *ms[0].Parts[0].Content
	want := strings.Repeat("x", MaxContentPartBytes) + truncatedMarker(n*1000-MaxContentPartBytes)
	if c != want {
		t.Fatalf("content %d bytes, ends %q; want %d bytes", len(c), c[len(c)-30:], len(want))
	}
	if *ms[0].FinishReason != "error" {
		t.Fatalf("finish %q, want error for a failed stream", *ms[0].FinishReason)
	}
}

func TestOutputRecorderBody(t *testing.T) {
	o := NewOutputRecorder(events.EndpointCompletions)
	o.Body([]byte(`{"choices":[{"index":0,"text":"abc","finish_reason":"length"},{"index":1,"text":"def","finish_reason":"stop"}]}`))
	ms, _ := o.Messages(false)
	want := `[{"role":"assistant","parts":[{"type":"text","content":"abc"}],"finish_reason":"length"},{"role":"assistant","parts":[{"type":"text","content":"def"}],"finish_reason":"stop"}]`
	if got := encode(ms); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if NewOutputRecorder(events.EndpointEmbeddings) != nil {
		t.Fatal("embeddings recorded")
	}
}
