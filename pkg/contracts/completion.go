package contracts

import (
	"bytes"
	"encoding/json"
)

// OpenAI's chat completion object requires choices[].logprobs and
// choices[].message.refusal, both nullable; its text completion object
// requires choices[].logprobs. Engines often leave them out (llama.cpp,
// Ollama), so answers relayed from them are completed here.

var (
	refusalKey  = []byte(`"refusal"`)
	logprobsKey = []byte(`"logprobs"`)
	finishKey   = []byte(`"finish_reason"`)
	messageKey  = []byte(`"message"`)
	jsonNull    = json.RawMessage("null")
)

// CompleteChoices adds the required nullable fields an engine's whole
// answer lacks: logprobs on every choice and, for a chat completion,
// refusal on every message, as null. Every other byte of a body that has
// them (or is not a JSON object with choices) is returned as it is.
func CompleteChoices(body []byte, chat bool) []byte {
	// A quoted key cannot occur inside a JSON string (its quotes would be
	// escaped), so counting keys tells a body that has them all.
	if n := bytes.Count(body, finishKey); n > 0 && bytes.Count(body, logprobsKey) >= n &&
		(!chat || bytes.Count(body, refusalKey) >= bytes.Count(body, messageKey)) {
		return body
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return body
	}
	var choices []map[string]json.RawMessage
	if err := json.Unmarshal(top["choices"], &choices); err != nil || len(choices) == 0 {
		return body
	}
	changed := false
	for _, ch := range choices {
		if ch == nil {
			continue
		}
		if _, ok := ch["logprobs"]; !ok {
			ch["logprobs"] = jsonNull
			changed = true
		}
		if !chat {
			continue
		}
		var msg map[string]json.RawMessage
		if err := json.Unmarshal(ch["message"], &msg); err != nil || msg == nil {
			continue
		}
		if _, ok := msg["refusal"]; ok {
			continue
		}
		msg["refusal"] = jsonNull
		b, err := marshalNoEscape(msg)
		if err != nil {
			return body
		}
		ch["message"] = b
		changed = true
	}
	if !changed {
		return body
	}
	b, err := marshalNoEscape(choices)
	if err != nil {
		return body
	}
	top["choices"] = b
	out, err := marshalNoEscape(top)
	if err != nil {
		return body
	}
	return out
}

// marshalNoEscape encodes v without HTML escaping (engines' text kept as
// it was) and without the encoder's trailing newline.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
