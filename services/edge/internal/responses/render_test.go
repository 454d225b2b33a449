package responses

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
)

// sseEvent is one event of a recorded Responses stream.
type sseEvent struct {
	name string
	data map[string]any
}

func readEvents(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
			continue
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(v), &m); err != nil {
				t.Fatalf("event %s is not JSON: %s", name, v)
			}
			if m["type"] != name {
				t.Fatalf("SSE event %q carries type %v", name, m["type"])
			}
			out = append(out, sseEvent{name, m})
		}
	}
	return out
}

// stored reads the record of id back as the edge keeps it.
func storedRecord(t *testing.T, s *Service, id string) *record {
	t.Helper()
	rec, ok, err := s.store.get(testCtx(t), "acme", id)
	if err != nil || !ok {
		t.Fatalf("response %s not stored: %v %v", id, ok, err)
	}
	return rec
}

func asJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func newRenderer(s *Service, id string) *renderer {
	tr := &turn{store: true, msgs: []chatMessage{{Role: "user", Content: "Tell me a long story."}}}
	return &renderer{model: "chat", id: id, created: 1, extra: tr.fields(), keep: s.keeper("acme", id, time.Unix(1, 0), tr)}
}

func chatBody(text, finish string) []byte {
	b, _ := json.Marshal(map[string]any{"object": "chat.completion",
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}})
	return b
}

// A chat completion the engine cut (finish_reason "length": max_tokens,
// which is max_output_tokens; "content_filter") answers the response
// "incomplete" with incomplete_details.reason and the message item
// "incomplete", as OpenAI's; one the model finished is "completed" with
// incomplete_details null. Each is stored as answered, and a chain onto
// the incomplete one reads its partial output.
func TestCutAnswerIsIncomplete(t *testing.T) {
	s := New(Deps{Responses: bucket(t, events.BucketResponses)})
	for _, c := range []struct {
		finish, status, reason string
	}{
		{"length", "incomplete", "max_output_tokens"},
		{"content_filter", "incomplete", "content_filter"},
		{"stop", "completed", ""},
	} {
		id := "resp_" + strings.Repeat("a", 20) + c.finish[:4]
		rw := newRenderer(s, id)
		w := httptest.NewRecorder()
		rw.Complete(w, http.StatusOK, "application/json", chatBody("Once upon a", c.finish))
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.finish, w.Code, w.Body)
		}
		var resp map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		msg := resp["output"].([]any)[0].(map[string]any)
		wantItem := "completed"
		if c.reason != "" {
			wantItem = "incomplete"
		}
		if resp["status"] != c.status || msg["status"] != wantItem || msg["content"].([]any)[0].(map[string]any)["text"] != "Once upon a" {
			t.Fatalf("%s: status %v, message %v", c.finish, resp["status"], msg)
		}
		details, has := resp["incomplete_details"]
		switch {
		case !has:
			t.Fatalf("%s: no incomplete_details (required)", c.finish)
		case c.reason == "" && details != nil:
			t.Fatalf("%s: incomplete_details %v, want null", c.finish, details)
		case c.reason != "" && !reflect.DeepEqual(details, map[string]any{"reason": c.reason}):
			t.Fatalf("%s: incomplete_details %v, want reason %s", c.finish, details, c.reason)
		}
		rec := storedRecord(t, s, id)
		var got map[string]any
		_ = json.Unmarshal(rec.Response, &got)
		if !reflect.DeepEqual(got, resp) {
			t.Fatalf("%s: stored %s, answered %s", c.finish, rec.Response, w.Body)
		}
		conv := rec.conversation()
		if len(conv) != 2 || conv[1].Role != "assistant" || conv[1].Content != "Once upon a" {
			t.Fatalf("%s: a chain would read %+v", c.finish, conv)
		}
	}
}

// A stream the engine cut ends with the message item "incomplete" and
// response.incomplete (never response.completed), stored as sent; one the
// model finished ends with response.completed.
func TestCutStreamEndsIncomplete(t *testing.T) {
	s := New(Deps{Responses: bucket(t, events.BucketResponses)})
	for _, c := range []struct{ finish, last, item string }{
		{"length", "response.incomplete", "incomplete"},
		{"stop", "response.completed", "completed"},
	} {
		id := "resp_" + strings.Repeat("b", 20) + c.finish[:4]
		rw := newRenderer(s, id)
		w := httptest.NewRecorder()
		chunks := []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Once"},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"content":" upon"},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"` + c.finish + `"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`,
		}
		for i, ch := range chunks {
			if err := rw.Chunk(w, []byte(ch), i == 0); err != nil {
				t.Fatal(err)
			}
		}
		rw.Done(w)
		evs := readEvents(t, w.Body.String())
		last := evs[len(evs)-1]
		if last.name != c.last {
			t.Fatalf("%s: the stream ended with %s, want %s", c.finish, last.name, c.last)
		}
		for _, ev := range evs[:len(evs)-1] {
			if ev.name == "response.completed" || ev.name == "response.incomplete" {
				t.Fatalf("%s: %s before the end", c.finish, ev.name)
			}
		}
		done := evs[len(evs)-2]
		if done.name != "response.output_item.done" || done.data["item"].(map[string]any)["status"] != c.item {
			t.Fatalf("%s: item done %v, want status %s", c.finish, done.data, c.item)
		}
		resp := last.data["response"].(map[string]any)
		wantStatus, wantDetails := "completed", any(nil)
		if c.item == "incomplete" {
			wantStatus, wantDetails = "incomplete", map[string]any{"reason": "max_output_tokens"}
		}
		if resp["status"] != wantStatus || !reflect.DeepEqual(resp["incomplete_details"], wantDetails) ||
			resp["output"].([]any)[0].(map[string]any)["status"] != c.item {
			t.Fatalf("%s: final response %v", c.finish, resp)
		}
		if u := resp["usage"].(map[string]any); u["output_tokens"] != 2.0 {
			t.Fatalf("%s: usage %v: a cut answer is billed as generated", c.finish, u)
		}
		var got map[string]any
		_ = json.Unmarshal(storedRecord(t, s, id).Response, &got)
		if !reflect.DeepEqual(got, resp) {
			t.Fatalf("%s: stored %v, sent %v", c.finish, got, resp)
		}
	}
}

// A stream that fails after it started is stored failed, as sent in
// response.failed (OpenAI keeps failed responses; its id was sent in
// response.created); a stream whose response cannot be stored fails once,
// without a second try at storing.
func TestFailedStreamStored(t *testing.T) {
	s := New(Deps{Responses: bucket(t, events.BucketResponses)})
	id := "resp_" + strings.Repeat("c", 24)
	rw := newRenderer(s, id)
	w := httptest.NewRecorder()
	if err := rw.Chunk(w, []byte(`{"choices":[{"index":0,"delta":{"content":"Once"}}]}`), true); err != nil {
		t.Fatal(err)
	}
	rw.Fail(w, contracts.ErrEngine("The engine broke off."), errors.New("broken"), true)
	evs := readEvents(t, w.Body.String())
	if len(evs) < 2 || evs[len(evs)-2].name != "response.failed" || evs[len(evs)-1].name != "error" {
		t.Fatalf("events %v", evs)
	}
	sent := evs[len(evs)-2].data["response"].(map[string]any)
	var got map[string]any
	rec := storedRecord(t, s, id)
	_ = json.Unmarshal(rec.Response, &got)
	if got["status"] != "failed" || !reflect.DeepEqual(got, sent) {
		t.Fatalf("stored %s, sent %v", rec.Response, sent)
	}
	if conv := rec.conversation(); len(conv) != 1 || conv[0].Role != "user" {
		t.Fatalf("a chain onto the failed response would read %+v (its input; no output item was done)", conv)
	}

	keeps := 0
	rw = &renderer{model: "chat", id: "resp_" + strings.Repeat("d", 24), created: 1, extra: map[string]any{"store": true},
		keep: func(map[string]any) error { keeps++; return errors.New("bucket down") }}
	w = httptest.NewRecorder()
	_ = rw.Chunk(w, []byte(`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}]}`), true)
	rw.Done(w)
	evs = readEvents(t, w.Body.String())
	if keeps != 1 || evs[len(evs)-2].name != "response.failed" || evs[len(evs)-1].data["code"] != contracts.CodeServiceUnavailable {
		t.Fatalf("keeps %d, events end %v %v", keeps, evs[len(evs)-2], evs[len(evs)-1].data)
	}
	if asJSON(t, evs[len(evs)-2].data)["response"].(map[string]any)["status"] != "failed" {
		t.Fatal("the unstored response was not failed")
	}
}
