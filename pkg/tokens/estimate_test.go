package tokens

import (
	"testing"

	"github.com/aiforge/aiforge/pkg/events"
)

func TestEstimatePrompt(t *testing.T) {
	for _, tc := range []struct {
		ep   string
		body string
		want int64
	}{
		// 16 bytes of text in 2 messages: 4 tokens, 2 x 4 + 8 of template
		{events.EndpointChatCompletions, `{"messages":[{"role":"user","content":"0123456789"},{"role":"as","content":null}]}`, 4 + 2*4 + 8},
		{events.EndpointChatCompletions, `{"messages":[]}`, 0},
		{events.EndpointChatCompletions, `{"messages":"x"}`, 0},
		{events.EndpointCompletions, `{"prompt":"0123456789"}`, 3},
		{events.EndpointCompletions, `{"prompt":["0123","4567"]}`, 2},
		{events.EndpointCompletions, `{"prompt":[1,2,3,4,5]}`, 5},
		{events.EndpointCompletions, `{"prompt":[[1,2],[3]]}`, 3},
		{events.EndpointCompletions, `{"prompt":7.5}`, 0},
		{events.EndpointEmbeddings, `{"input":"01234567"}`, 2},
		{events.EndpointCompletions, `not json`, 0},
	} {
		if got := EstimatePrompt(tc.ep, []byte(tc.body)); got != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.ep, tc.body, got, tc.want)
		}
	}
}

// A rerank reads the query once per document, documents as strings or
// {"text"} objects.
func TestEstimateRerank(t *testing.T) {
	body := []byte(`{"model":"rr","query":"abcdefgh","documents":["abcd",{"text":"abcdefghijkl"}]}`)
	if got := EstimatePrompt(events.EndpointRerank, body); got != (2+1)+(2+3) {
		t.Fatalf("rerank estimate %d", got)
	}
}
