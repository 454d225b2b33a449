package routing

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// A completion streamed as chunks and rebuilt by the assembler is the
// same completion, its content cut only between UTF-8 sequences.
func TestChunksRoundTrip(t *testing.T) {
	content := strings.Repeat("naïve café 東京 ", 40) + strings.Repeat("é", 150)
	c := Completion{ID: "chatcmpl-1", Created: 1700000000, Model: "chat", Role: "assistant", Content: content, FinishReason: "stop",
		Usage: &Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10}}
	chunks := c.Chunks(true)
	if len(chunks) < 4 {
		t.Fatalf("%d chunks", len(chunks))
	}
	var a StreamAssembler
	for _, p := range chunks {
		var piece struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(p, &piece); err != nil {
			t.Fatalf("chunk %s: %v", p, err)
		}
		for _, ch := range piece.Choices {
			if ch.Delta.Content != nil && !utf8.ValidString(*ch.Delta.Content) {
				t.Fatalf("a chunk cut inside a UTF-8 sequence: %q", *ch.Delta.Content)
			}
		}
		a.Add(p)
	}
	got, ok := a.Completion()
	if !ok || got.Content != content || got.ID != c.ID || got.Model != c.Model || got.FinishReason != "stop" || got.Usage == nil || got.Usage.TotalTokens != 10 {
		t.Fatalf("rebuilt %+v ok %v", got, ok)
	}
	// Without the usage chunk, the last chunk is the finish reason.
	if last := c.Chunks(false); !strings.Contains(string(last[len(last)-1]), `"finish_reason":"stop"`) {
		t.Fatalf("last chunk %s", last[len(last)-1])
	}
	// A body round trip too.
	back, ok := ParseCompletion(c.Body())
	if !ok || back.Content != content || back.Usage.PromptTokens != 7 {
		t.Fatalf("body round trip %+v %v", back, ok)
	}
}

// Only a complete one-choice text answer is kept: not tool calls, several
// choices, an unfinished stream, an error chunk or an answer over MaxBytes.
func TestOnlyCompleteTextAnswers(t *testing.T) {
	for _, body := range []string{
		`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c"}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"index":0,"message":{"content":"a"},"finish_reason":"stop"},{"index":1,"message":{"content":"b"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"content":"a"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"message":{"content":"a","tool_calls":[{"id":"c"}]},"finish_reason":"stop"}]}`,
	} {
		if _, ok := ParseCompletion([]byte(body)); ok {
			t.Errorf("kept %s", body)
		}
	}
	if c, ok := ParseCompletion([]byte(`{"id":"x","choices":[{"index":0,"message":{"content":"a","tool_calls":[]},"finish_reason":"stop"}]}`)); !ok || c.Role != "assistant" {
		t.Errorf("an empty tool_calls list refused: %+v", c)
	}

	unfinished := StreamAssembler{}
	unfinished.Add([]byte(`{"id":"x","choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}]}`))
	if _, ok := unfinished.Completion(); ok {
		t.Error("an unfinished stream was kept")
	}
	for _, p := range []string{
		`{"error":{"message":"engine died"}}`,
		`{"choices":[{"index":1,"delta":{"content":"b"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]},"finish_reason":"stop"}]}`,
	} {
		a := StreamAssembler{}
		a.Add([]byte(`{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null}]}`))
		a.Add([]byte(p))
		a.Add([]byte(`{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
		if _, ok := a.Completion(); ok {
			t.Errorf("kept a stream with %s", p)
		}
	}
	big := StreamAssembler{MaxBytes: 4}
	big.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"12345"},"finish_reason":"stop"}]}`))
	if _, ok := big.Completion(); ok {
		t.Error("kept an answer over MaxBytes")
	}
}
