package contracts

import (
	"encoding/json"
	"testing"
)

func TestCompleteChoicesAddsRequiredNullables(t *testing.T) {
	in := `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a <b> & c"},"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":null,"refusal":"no"},"logprobs":{"content":[]},"finish_reason":"stop"}]}`
	out := CompleteChoices([]byte(in), true)
	var got struct {
		Choices []struct {
			Message  map[string]json.RawMessage `json:"message"`
			Logprobs json.RawMessage            `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Choices) != 2 || string(got.Choices[0].Logprobs) != "null" || string(got.Choices[0].Message["refusal"]) != "null" {
		t.Fatalf("first choice not completed: %s", out)
	}
	if string(got.Choices[1].Message["refusal"]) != `"no"` || string(got.Choices[1].Logprobs) != `{"content":[]}` {
		t.Fatalf("second choice changed: %s", out)
	}
	if string(got.Choices[0].Message["content"]) != `"a <b> & c"` {
		t.Fatalf("content re-escaped: %s", out)
	}
}

func TestCompleteChoicesLeavesCompleteAndForeignBodies(t *testing.T) {
	full := `{"choices":[{"index":0,"message":{"role":"assistant","content":"x","refusal":null},"logprobs":null,"finish_reason":"stop"}]}`
	if got := CompleteChoices([]byte(full), true); string(got) != full {
		t.Fatalf("complete body rewritten: %s", got)
	}
	text := `{"object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"stop"}]}`
	if got := string(CompleteChoices([]byte(text), false)); got != `{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"text":"x"}],"object":"text_completion"}` {
		t.Fatalf("text completion: %s", got)
	}
	for _, b := range []string{`not json`, `{"error":{"message":"x"}}`, `{"choices":[]}`, `[1,2]`} {
		if got := CompleteChoices([]byte(b), true); string(got) != b {
			t.Fatalf("%s became %s", b, got)
		}
	}
}
