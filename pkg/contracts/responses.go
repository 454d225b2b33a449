package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The Responses API as a chat completion: the batch service runs a
// /v1/responses line on the chat completions endpoint of the model's
// workers (the one generation path of the engines) and answers it in the
// Responses API's shape. The translation is the edge's
// (services/edge/internal/responses) without retrieval: instructions become
// the system message, input the messages, max_output_tokens max_tokens.

// ErrResponsesFileSearch is wrapped by ResponsesToChat for a request with a
// file_search tool, which needs the edge's retrieval and is not run here.
var ErrResponsesFileSearch = errors.New("the file_search tool is not supported in batch lines")

// ResponsesError is a request ResponsesToChat cannot translate: the
// parameter at fault and why.
type ResponsesError struct {
	Param   string
	Message string
	// Err is ErrResponsesFileSearch for a file_search tool, else nil.
	Err error
}

func (e *ResponsesError) Error() string { return "invalid '" + e.Param + "': " + e.Message }

func (e *ResponsesError) Unwrap() error { return e.Err }

type responsesBody struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Temperature     *float64        `json:"temperature"`
	TopP            *float64        `json:"top_p"`
	User            *string         `json:"user"`
	Tools           []struct {
		Type string `json:"type"`
	} `json:"tools"`
}

// ChatMessage is a chat completions message with text content.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ResponsesToChat translates a Responses API request body into a chat
// completions request body (never streamed) and returns the model it asks
// for. Errors are *ResponsesError.
func ResponsesToChat(body []byte) (chat []byte, model string, err error) {
	var req responsesBody
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, "", &ResponsesError{Param: "body", Message: "not a JSON object: " + err.Error()}
	}
	if req.Model == "" {
		return nil, "", &ResponsesError{Param: "model", Message: "missing required parameter"}
	}
	if len(req.Tools) > 0 {
		if t := req.Tools[0].Type; t != "file_search" {
			return nil, "", &ResponsesError{Param: "tools", Message: fmt.Sprintf("tool type %q is not supported", t)}
		}
		return nil, "", &ResponsesError{Param: "tools", Message: ErrResponsesFileSearch.Error(), Err: ErrResponsesFileSearch}
	}
	msgs, err := ResponsesInput(req.Input)
	if err != nil {
		return nil, "", &ResponsesError{Param: "input", Message: err.Error()}
	}
	if req.Instructions != nil && *req.Instructions != "" {
		msgs = append([]ChatMessage{{Role: "system", Content: *req.Instructions}}, msgs...)
	}
	out := map[string]any{"model": req.Model, "messages": msgs}
	if req.MaxOutputTokens != nil {
		out["max_tokens"] = *req.MaxOutputTokens
	}
	if req.Temperature != nil {
		out["temperature"] = *req.Temperature
	}
	if req.TopP != nil {
		out["top_p"] = *req.TopP
	}
	if req.User != nil {
		out["user"] = *req.User
	}
	chat, err = json.Marshal(out)
	if err != nil {
		return nil, "", &ResponsesError{Param: "body", Message: err.Error()}
	}
	return chat, req.Model, nil
}

// ResponsesInput reads the Responses API input: a string, or a list of
// messages whose content is a string or a list of input_text parts.
func ResponsesInput(raw json.RawMessage) ([]ChatMessage, error) {
	if len(raw) == 0 {
		return nil, errors.New("missing required parameter")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []ChatMessage{{Role: "user", Content: s}}, nil
	}
	var items []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, errors.New("expected a string or a list of messages")
	}
	out := make([]ChatMessage, 0, len(items))
	for _, it := range items {
		var text string
		if json.Unmarshal(it.Content, &text) != nil {
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(it.Content, &parts); err != nil {
				return nil, errors.New("message content must be a string or a list of input_text parts")
			}
			var b strings.Builder
			for _, p := range parts {
				b.WriteString(p.Text)
			}
			text = b.String()
		}
		role := it.Role
		if role == "" {
			role = "user"
		}
		out = append(out, ChatMessage{Role: role, Content: text})
	}
	return out, nil
}

// IncompleteReason is the Responses API's incomplete_details.reason of an
// answer that ended with the chat completion's finish_reason: "length"
// (the engine stopped at max_tokens, which is max_output_tokens) is
// "max_output_tokens", "content_filter" is "content_filter"; an answer the
// model finished ("stop", "tool_calls", none) is "", a completed response.
func IncompleteReason(finishReason string) string {
	switch finishReason {
	case "length":
		return "max_output_tokens"
	case "content_filter":
		return "content_filter"
	}
	return ""
}

// ChatToResponse builds the Responses API response object (id, created_at
// and model as given; the id starts with "resp_") from a chat completion
// answer body. temperature and top_p, which the object requires, are null:
// the line's own values, if any, went to the engine with it.
func ChatToResponse(id string, created int64, model string, chatAnswer []byte) ([]byte, error) {
	var cc struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens        int64 `json:"prompt_tokens"`
			CompletionTokens    int64 `json:"completion_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(chatAnswer, &cc); err != nil {
		return nil, fmt.Errorf("contracts: chat completion answer: %w", err)
	}
	text, status := "", "completed"
	var incomplete any
	if len(cc.Choices) > 0 {
		text = cc.Choices[0].Message.Content
		if r := IncompleteReason(cc.Choices[0].FinishReason); r != "" {
			status = "incomplete"
			incomplete = map[string]string{"reason": r}
		}
	}
	var prompt, completion, cached int64
	if cc.Usage != nil {
		prompt, completion = cc.Usage.PromptTokens, cc.Usage.CompletionTokens
		if cc.Usage.PromptTokensDetails != nil {
			cached = cc.Usage.PromptTokensDetails.CachedTokens
		}
	}
	suffix := strings.TrimPrefix(id, "resp_")
	msg := map[string]any{"type": "message", "id": "msg_" + suffix, "status": status, "role": "assistant",
		"content": []map[string]any{{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}}}
	resp := map[string]any{"id": id, "object": "response", "created_at": created, "status": status, "model": model,
		"output": []any{msg}, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}, "error": nil,
		"incomplete_details": incomplete, "instructions": nil, "metadata": map[string]string{},
		"text": map[string]any{"format": map[string]string{"type": "text"}}, "temperature": nil, "top_p": nil,
		"usage": map[string]any{"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion,
			"input_tokens_details": map[string]int64{"cached_tokens": cached, "cache_write_tokens": 0}, "output_tokens_details": map[string]int64{"reasoning_tokens": 0}}}
	return json.Marshal(resp)
}
