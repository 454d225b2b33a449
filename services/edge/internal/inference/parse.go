package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

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
}

// Request is what the edge reads of an inference request.
type Request struct {
	Model        string
	Stream       bool
	IncludeUsage bool
	// MaxTokens is the requested output bound (0 when unset).
	MaxTokens int64
	// InputBytes is the size of the prompt field: an upper bound of its
	// tokens, used to reserve budget and count tokens per minute.
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
			return p, contracts.ErrBadRequest(mt.name, contracts.CodeInvalidType, fmt.Sprintf("Invalid '%s': expected a non-negative integer.", mt.name))
		}
		p.MaxTokens = max(p.MaxTokens, n)
	}
	p.InputBytes = int64(len(f.Messages) + len(f.Prompt) + len(f.Input))
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
