// Package tokens estimates token counts without a model's tokenizer, for
// usage an engine never reported (a stream cut before its final usage
// chunk, an answer without usage, a worker lost mid-stream): the engine
// read the prompt all the same.
package tokens

import (
	"encoding/json"

	"github.com/aiforge/aiforge/pkg/events"
)

// Without the model's tokenizer a prompt is estimated from its text: about
// 4 bytes a token, the rule of thumb for BPE tokenizers on English text
// (OpenAI's), plus the chat template's tokens around each message. It is an estimate, not a bound (the edge's
// admission bounds a prompt from above with one token a byte); usage
// events carrying it are marked estimated.
const (
	bytesPerToken = 4
	// Chat template overheads (as the edge's admission bound counts them):
	// per message (role markers and separators) and per request
	// (begin-of-text and the assistant's generation prompt).
	messageOverheadTokens = 4
	requestOverheadTokens = 8
)

// EstimatePrompt estimates the prompt tokens of a request body for
// endpoint (events.EndpointChatCompletions, ...): chat's messages, a
// completion's prompt or an embedding's input (strings, arrays of strings,
// or token id arrays, which count exactly), a rerank's query and
// documents (strings or {"text"} objects). It is 0 for a body it cannot
// read.
func EstimatePrompt(endpoint string, body []byte) int64 {
	var req struct {
		Messages  []map[string]json.RawMessage `json:"messages"`
		Prompt    json.RawMessage              `json:"prompt"`
		Input     json.RawMessage              `json:"input"`
		Query     json.RawMessage              `json:"query"`
		Documents []json.RawMessage            `json:"documents"`
	}
	if json.Unmarshal(body, &req) != nil {
		return 0
	}
	switch endpoint {
	case events.EndpointChatCompletions:
		if len(req.Messages) == 0 {
			return 0
		}
		var textBytes int64
		for _, m := range req.Messages {
			for _, v := range m {
				textBytes += valueBytes(v)
			}
		}
		return ceilDiv(textBytes, bytesPerToken) + requestOverheadTokens + messageOverheadTokens*int64(len(req.Messages))
	case events.EndpointCompletions:
		return promptTokens(req.Prompt)
	case events.EndpointEmbeddings:
		return promptTokens(req.Input)
	case events.EndpointRerank:
		// A cross-encoder reads the query once per document.
		q := promptTokens(req.Query)
		var n int64
		for _, d := range req.Documents {
			var doc struct {
				Text string `json:"text"`
			}
			if len(d) > 0 && d[0] == '{' && json.Unmarshal(d, &doc) == nil {
				n += q + ceilDiv(int64(len(doc.Text)), bytesPerToken)
				continue
			}
			n += q + promptTokens(d)
		}
		return n
	}
	return 0
}

// valueBytes is the text size of a message field: a string's bytes, or
// the JSON size of anything else (content parts, tool calls: their syntax
// is small beside their text).
func valueBytes(v json.RawMessage) int64 {
	var s string
	if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
		return int64(len(s))
	}
	if string(v) == "null" {
		return 0
	}
	return int64(len(v))
}

// promptTokens estimates a prompt or input: a string, an array of strings,
// an array of token ids (counted exactly) or an array of such arrays.
func promptTokens(v json.RawMessage) int64 {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return ceilDiv(int64(len(s)), bytesPerToken)
	}
	var items []json.RawMessage
	if json.Unmarshal(v, &items) != nil {
		return 0
	}
	var n int64
	for _, it := range items {
		if len(it) > 0 && (it[0] == '"' || it[0] == '[') {
			n += promptTokens(it)
		} else {
			n++ // a token id
		}
	}
	return n
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
