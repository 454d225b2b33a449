package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// inferFields are the request fields the edge reads; the body itself goes
// to the engine unchanged, so tools, response_format and unknown fields pass
// through.
type inferFields struct {
	Model         json.RawMessage `json:"model"`
	Stream        json.RawMessage `json:"stream"`
	StreamOptions json.RawMessage `json:"stream_options"`
	Messages      json.RawMessage `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	Input         json.RawMessage `json:"input"`
	MaxTokens     json.RawMessage `json:"max_tokens"`
	MaxCompletion json.RawMessage `json:"max_completion_tokens"`
	N             json.RawMessage `json:"n"`
	BestOf        json.RawMessage `json:"best_of"`
}

// Bounds of the admission inputs a request sets.
const (
	// MaxOutputTokens bounds max_tokens and max_completion_tokens: the
	// registry does not know a model's context, and no model has one of
	// 2^31 tokens.
	MaxOutputTokens = 1 << 31
	// MaxChoices bounds n and best_of (OpenAI allows n up to 128).
	MaxChoices = 128
)

// Request is what the edge reads of an inference request.
type Request struct {
	Model        string
	Stream       bool
	IncludeUsage bool
	// MaxTokens is the requested output bound per choice (0 when unset).
	MaxTokens int64
	// MaxTokensParam names the parameter MaxTokens came from, for errors;
	// default "max_tokens".
	MaxTokensParam string
	// Choices is how many sequences the engine generates, each up to
	// MaxTokens: chat's n, completions' max(n, best_of); 0 means 1.
	Choices int64
	// InputBytes bounds the prompt's tokens from above, for budget
	// reservations and tokens per minute: the size of the prompt or input
	// field; for chat, what messageTokensBound counts.
	InputBytes int64
}

// MaxModelName bounds the length of a model name in bytes; longer ones are
// refused before any lookup, so they are never echoed or counted.
const MaxModelName = 256

func errModelTooLong() *contracts.Error {
	return contracts.ErrBadRequest("model", contracts.CodeInvalidRequest,
		fmt.Sprintf("Invalid 'model': longer than %d bytes.", MaxModelName))
}

func isNull(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }

func parseInference(endpoint string, body []byte) (Request, *contracts.Error) {
	var p Request
	var f inferFields
	if err := json.Unmarshal(body, &f); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return p, contracts.ErrBadRequest("", contracts.CodeInvalidType, "The request body must be a JSON object.")
			}
			return p, contracts.ErrBadRequest(te.Field, contracts.CodeInvalidType, fmt.Sprintf("Invalid type for '%s': expected %s.", te.Field, te.Type))
		}
		return p, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not valid JSON: "+httpapi.TrimJSONErr(err))
	}
	if isNull(f.Model) {
		return p, contracts.ErrBadRequest("model", contracts.CodeMissingParam, "Missing required parameter: 'model'.")
	}
	if err := json.Unmarshal(f.Model, &p.Model); err != nil || p.Model == "" {
		return p, contracts.ErrBadRequest("model", contracts.CodeInvalidType, "Invalid 'model': expected a non-empty string.")
	}
	if len(p.Model) > MaxModelName {
		return p, errModelTooLong()
	}
	if !isNull(f.Stream) {
		if err := json.Unmarshal(f.Stream, &p.Stream); err != nil {
			return p, contracts.ErrBadRequest("stream", contracts.CodeInvalidType, "Invalid 'stream': expected a boolean.")
		}
	}
	if !isNull(f.StreamOptions) {
		var so struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if err := json.Unmarshal(f.StreamOptions, &so); err != nil {
			return p, contracts.ErrBadRequest("stream_options", contracts.CodeInvalidType, "Invalid 'stream_options': expected an object with a boolean 'include_usage'.")
		}
		if !p.Stream {
			return p, contracts.ErrBadRequest("stream_options", contracts.CodeInvalidRequest, "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
		}
		p.IncludeUsage = so.IncludeUsage != nil && *so.IncludeUsage
	}
	for _, mt := range []struct {
		name string
		raw  json.RawMessage
	}{{"max_tokens", f.MaxTokens}, {"max_completion_tokens", f.MaxCompletion}} {
		if isNull(mt.raw) {
			continue
		}
		var n int64
		if err := json.Unmarshal(mt.raw, &n); err != nil || n < 0 {
			var big json.Number
			if json.Unmarshal(mt.raw, &big) == nil && big.String() != "" && big.String()[0] != '-' && !bytes.ContainsAny(mt.raw, ".eE") {
				return p, tooManyTokens(mt.name) // an integer past int64
			}
			return p, contracts.ErrBadRequest(mt.name, contracts.CodeInvalidType, fmt.Sprintf("Invalid '%s': expected a non-negative integer.", mt.name))
		}
		if n > MaxOutputTokens {
			return p, tooManyTokens(mt.name)
		}
		if n >= p.MaxTokens {
			p.MaxTokens, p.MaxTokensParam = n, mt.name
		}
	}
	if endpoint != events.EndpointEmbeddings {
		var err *contracts.Error
		if p.Choices, err = choices("n", f.N); err != nil {
			return p, err
		}
		if endpoint == events.EndpointCompletions {
			bestOf, err := choices("best_of", f.BestOf)
			if err != nil {
				return p, err
			}
			if bestOf < p.Choices {
				return p, contracts.ErrBadRequest("best_of", contracts.CodeInvalidRequest, "Invalid 'best_of': must be at least 'n'.")
			}
			p.Choices = bestOf
		}
	}
	p.InputBytes = int64(len(f.Messages) + len(f.Prompt) + len(f.Input))
	if endpoint == events.EndpointChatCompletions {
		if n, ok := messageTokensBound(f.Messages); ok {
			p.InputBytes = n + int64(len(f.Prompt)+len(f.Input))
		}
	}
	switch endpoint {
	case events.EndpointChatCompletions:
		if isNull(f.Messages) {
			return p, contracts.ErrBadRequest("messages", contracts.CodeMissingParam, "Missing required parameter: 'messages'.")
		}
		if f.Messages[0] != '[' {
			return p, contracts.ErrBadRequest("messages", contracts.CodeInvalidType, "Invalid 'messages': expected an array.")
		}
		if bytes.Equal(bytes.TrimSpace(f.Messages[1:]), []byte("]")) {
			return p, contracts.ErrBadRequest("messages", contracts.CodeInvalidRequest, "Invalid 'messages': empty array. Expected an array with minimum length 1.")
		}
	case events.EndpointCompletions:
		if isNull(f.Prompt) {
			return p, contracts.ErrBadRequest("prompt", contracts.CodeMissingParam, "Missing required parameter: 'prompt'.")
		}
	case events.EndpointEmbeddings:
		if isNull(f.Input) {
			return p, contracts.ErrBadRequest("input", contracts.CodeMissingParam, "Missing required parameter: 'input'.")
		}
		if p.Stream {
			return p, contracts.ErrBadRequest("stream", contracts.CodeInvalidRequest, "Embeddings cannot be streamed.")
		}
	}
	return p, nil
}

func tooManyTokens(param string) *contracts.Error {
	return contracts.ErrBadRequest(param, contracts.CodeInvalidRequest,
		fmt.Sprintf("Invalid '%s': at most %d tokens can be requested.", param, MaxOutputTokens))
}

// choices reads n or best_of: an integer from 1 to MaxChoices, 1 when unset.
func choices(param string, raw json.RawMessage) (int64, *contracts.Error) {
	if isNull(raw) {
		return 1, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < 1 || n > MaxChoices {
		return 0, contracts.ErrBadRequest(param, contracts.CodeInvalidRequest,
			fmt.Sprintf("Invalid '%s': expected an integer from 1 to %d.", param, MaxChoices))
	}
	return n, nil
}

// withMaxTokens returns body with its output bound set to tokens: every
// max_tokens and max_completion_tokens it has, else max_tokens. Other
// fields pass unchanged (in key order).
func withMaxTokens(body []byte, tokens int64) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	v := json.RawMessage(strconv.FormatInt(tokens, 10))
	set := false
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if _, ok := m[k]; ok {
			m[k], set = v, true
		}
	}
	if !set {
		m["max_tokens"] = v
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// Chat template overheads messageTokensBound adds: per message (role
// markers and separators: ChatML and Llama 3 templates take 4 or 5 tokens
// besides the role) and per request (begin-of-text and the assistant's
// generation prompt).
const (
	messageOverheadTokens = 4
	requestOverheadTokens = 8
)

// messageTokensBound bounds the tokens of a chat prompt from above, for a
// byte-level tokenizer (at most one token per byte): the bytes of every
// string field of every message (contents, roles, names; other values by
// their JSON size) plus the template overheads. It is much tighter than the
// JSON size of the messages for short turns, so a small budget is not taken
// up by JSON syntax. ok is false when messages is not an array of objects.
func messageTokensBound(messages json.RawMessage) (n int64, ok bool) {
	var ms []map[string]json.RawMessage
	if json.Unmarshal(messages, &ms) != nil {
		return 0, false
	}
	n = requestOverheadTokens
	for _, m := range ms {
		n += messageOverheadTokens
		for _, v := range m {
			var str string
			if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &str) == nil {
				n += int64(len(str))
			} else {
				n += int64(len(v))
			}
		}
	}
	return n, true
}
