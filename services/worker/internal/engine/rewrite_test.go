package engine

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/registry"
)

func testClient(served, upstream string) *Client {
	return New(Config{Served: served, Engine: registry.Engine{BaseURL: "http://127.0.0.1:1/v1", Model: upstream},
		RequestTimeout: time.Minute, HTTPClient: http.DefaultClient})
}

func TestRewriteRequest(t *testing.T) {
	s := testClient("served", "up/model")
	cases := []struct {
		name, body string
		ep         Endpoint
		stream     bool
		want       string
		b64        bool
	}{
		{"stream merges options", `{"model":"served","stream":true,"stream_options":{"continuous_usage_stats":true},"x":1}`, Chat, true,
			`{"model":"up/model","stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true},"x":1}`, false},
		{"stream null options", `{"model":"served","stream":true,"stream_options":null}`, Completions, true,
			`{"model":"up/model","stream":true,"stream_options":{"include_usage":true}}`, false},
		{"not streamed keeps html", `{"model":"served","messages":[{"content":"<a>&</a>"}]}`, Chat, false,
			`{"messages":[{"content":"<a>&</a>"}],"model":"up/model"}`, false},
		{"base64 asks float", `{"model":"served","input":"x","encoding_format":"base64"}`, Embeddings, false,
			`{"encoding_format":"float","input":"x","model":"up/model"}`, true},
		{"float stays", `{"input":"x","encoding_format":"float"}`, Embeddings, false,
			`{"encoding_format":"float","input":"x","model":"up/model"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, b64, err := s.rewriteRequest(&bridge.Request{Body: []byte(c.body)}, c.ep, c.stream)
			if err != nil {
				t.Fatal(err)
			}
			if b64 != c.b64 || !jsonEqual(t, got, []byte(c.want)) {
				t.Fatalf("got %s (b64 %v), want %s", got, b64, c.want)
			}
		})
	}
	for _, bad := range []string{`null`, `[1]`, `{`, `{"stream_options":{"a":}}`} {
		if _, _, err := s.rewriteRequest(&bridge.Request{Body: []byte(bad)}, Chat, true); err == nil {
			t.Errorf("body %s: want an error", bad)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return mustJSON(t, x) == mustJSON(t, y)
}

func TestChunkHelpers(t *testing.T) {
	chunk := []byte(`{"id":"1","model":"m","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}}}`)
	at := usageAt(chunk)
	if at < 0 || chunk[at] != '{' {
		t.Fatalf("usageAt = %d", at)
	}
	if got := string(blankUsage(nil, chunk, at)); got != `{"id":"1","model":"m","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}` {
		t.Fatalf("blankUsage = %s", got)
	}
	if usageAt([]byte(`{"choices":[],"usage":null}`)) >= 0 || usageAt([]byte(`{"choices":[{"delta":{"content":"\"usage\":{"}}]}`)) >= 0 {
		t.Fatal("usageAt matched a null usage or content")
	}
	for in, want := range map[string]bool{
		`{"choices":[{"delta":{"content":"hi"}}]}`:                                true,
		`{"choices":[{"delta":{"content":""}}]}`:                                  false,
		`{"choices":[{"delta":{"role":"assistant"}}]}`:                            false,
		`{"choices":[{"delta":{"reasoning_content":"x"}}]}`:                       true,
		`{"choices":[{"text":" a"}]}`:                                             true,
		`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":""}}]}}]}`:  false,
		`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{"}}]}}]}`: true,
		`{"choices":[{"delta":{"content": "spaced"}}]}`:                           true,
	} {
		if hasContent([]byte(in)) != want {
			t.Errorf("hasContent(%s) != %v", in, want)
		}
	}
	for in, want := range map[string]bool{
		`{"error":{"message":"x"}}`:                                    true,
		` {"error": {"message":"x"}}`:                                  true,
		`{"object":"error","message":"x","code":400}`:                  true,
		`{"id":"1","choices":[{"delta":{"content":"{\"error\":1}"}}]}`: false,
	} {
		if isErrorEvent([]byte(in)) != want {
			t.Errorf("isErrorEvent(%s) != %v", in, want)
		}
	}
	u, err := findUsage([]byte(`{"model":"m","usage":{"prompt_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}}}`))
	if err != nil || u.PromptTokens != 7 || u.CompletionTokens != 2 || u.PromptTokensDetails.CachedTokens != 4 {
		t.Fatalf("findUsage = %+v, %v", u, err)
	}
	if u, err := findUsage([]byte(`{"model":"m"}`)); err != nil || u != nil {
		t.Fatalf("findUsage without usage = %+v, %v", u, err)
	}
	if _, err := findUsage([]byte(`not json`)); err == nil {
		t.Fatal("findUsage of garbage")
	}
}

func TestRewriteModelWhole(t *testing.T) {
	s := testClient("served", "up")
	if got := string(s.rewriteModelWhole([]byte(`{"id":"x","model":"up","choices":[]}`))); got != `{"id":"x","model":"served","choices":[]}` {
		t.Fatalf("compact: %s", got)
	}
	got := s.rewriteModelWhole([]byte(`{"id": "x", "model": "up", "choices": []}`))
	if !jsonEqual(t, got, []byte(`{"id":"x","model":"served","choices":[]}`)) {
		t.Fatalf("spaced: %s", got)
	}
	same := testClient("m", "m")
	in := []byte(`{"model":"m"}`)
	if got := same.rewriteModelWhole(in); &got[0] != &in[0] {
		t.Fatal("equal names must not copy")
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
