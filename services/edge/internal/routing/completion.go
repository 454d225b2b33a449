package routing

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/aiforge/aiforge/pkg/contracts"
)

// Completion is the part of a chat completion that routing and the cache
// read and write: one choice, text content.
type Completion struct {
	ID           string
	Created      int64
	Model        string
	Role         string
	Content      string
	FinishReason string
	Usage        *Usage
}

// Usage is a chat completion's usage, cached tokens included.
type Usage struct {
	PromptTokens       int64 `json:"prompt_tokens"`
	CompletionTokens   int64 `json:"completion_tokens"`
	TotalTokens        int64 `json:"total_tokens"`
	PromptTokenDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
}

type wireCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role      string          `json:"role"`
			Content   *string         `json:"content"`
			ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage,omitempty"`
}

// ParseCompletion reads a chat completion with exactly one choice of text
// content and a finish reason; ok is false for anything else (tool calls,
// several choices, an unfinished answer).
func ParseCompletion(body []byte) (Completion, bool) {
	var w wireCompletion
	if json.Unmarshal(body, &w) != nil || len(w.Choices) != 1 {
		return Completion{}, false
	}
	ch := w.Choices[0]
	if ch.Message.Content == nil || ch.FinishReason == nil || *ch.FinishReason == "" || (len(ch.Message.ToolCalls) > 0 && string(ch.Message.ToolCalls) != "null" && string(ch.Message.ToolCalls) != "[]") {
		return Completion{}, false
	}
	return Completion{ID: w.ID, Created: w.Created, Model: w.Model, Role: orDefault(ch.Message.Role, "assistant"), Content: *ch.Message.Content,
		FinishReason: *ch.FinishReason, Usage: w.Usage}, true
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Body is c as a chat completion JSON object.
func (c Completion) Body() []byte {
	// refusal and logprobs are required (nullable) by OpenAI's schema.
	type msg struct {
		Role    string  `json:"role"`
		Content string  `json:"content"`
		Refusal *string `json:"refusal"`
	}
	type choice struct {
		Index        int             `json:"index"`
		Message      msg             `json:"message"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason string          `json:"finish_reason"`
	}
	b, _ := json.Marshal(struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Created int64    `json:"created"`
		Model   string   `json:"model"`
		Choices []choice `json:"choices"`
		Usage   *Usage   `json:"usage,omitempty"`
	}{c.ID, "chat.completion", c.Created, c.Model, []choice{{0, msg{orDefault(c.Role, "assistant"), c.Content, nil}, json.RawMessage("null"), orDefault(c.FinishReason, "stop")}}, c.Usage})
	return b
}

// streamPiece is how many bytes of content one replayed chunk carries at
// most (cut at a space where there is one).
const streamPiece = 96

// Chunks is c as the payloads of a chat completion stream in OpenAI's
// shape: the role, the content in pieces, the finish reason, and, with
// includeUsage, a last chunk with no choices and the usage.
func (c Completion) Chunks(includeUsage bool) [][]byte {
	head := fmt.Sprintf(`{"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,"choices":`, quote(c.ID), c.Created, quote(c.Model))
	var out [][]byte
	out = append(out, []byte(head+`[{"index":0,"delta":{"role":`+quote(orDefault(c.Role, "assistant"))+`,"content":""},"finish_reason":null}]}`))
	rest := c.Content
	for rest != "" {
		n := min(len(rest), streamPiece)
		if n < len(rest) {
			if i := strings.LastIndexByte(rest[:n], ' '); i > 0 {
				n = i + 1
			}
			for n < len(rest) && n > 0 && rest[n]&0xC0 == 0x80 { // not inside a UTF-8 sequence
				n--
			}
			if n == 0 {
				n = len(rest)
			}
		}
		out = append(out, []byte(head+`[{"index":0,"delta":{"content":`+quote(rest[:n])+`},"finish_reason":null}]}`))
		rest = rest[n:]
	}
	out = append(out, []byte(head+`[{"index":0,"delta":{},"finish_reason":`+quote(orDefault(c.FinishReason, "stop"))+`}]}`))
	if includeUsage {
		u, _ := json.Marshal(c.Usage)
		if c.Usage == nil {
			u = []byte(`{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`)
		}
		out = append(out, []byte(head+`[],"usage":`+string(u)+`}`))
	}
	return out
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// StartSSE writes the headers of a 200 event stream.
func StartSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}

// Write answers with c: a stream of chunks, or the completion body.
func Write(w http.ResponseWriter, c Completion, stream, includeUsage bool) {
	if stream {
		StartSSE(w)
		for _, p := range c.Chunks(includeUsage) {
			if contracts.WriteEvent(w, p) != nil {
				return
			}
		}
		_ = contracts.WriteDone(w)
		_ = http.NewResponseController(w).Flush()
		return
	}
	WriteBody(w, c.Body())
}

// WriteBody answers 200 with a JSON body.
func WriteBody(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// StreamAssembler rebuilds a chat completion from the payloads of its
// stream.
type StreamAssembler struct {
	c      Completion
	text   strings.Builder
	broken bool
	// MaxBytes bounds the content kept; past it the answer is not kept.
	MaxBytes int
}

// Add reads one stream payload.
func (a *StreamAssembler) Add(payload []byte) {
	if a.broken {
		return
	}
	var ch struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Role      string          `json:"role"`
				Content   *string         `json:"content"`
				ToolCalls json.RawMessage `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *Usage           `json:"usage"`
		Error *json.RawMessage `json:"error"`
	}
	if json.Unmarshal(payload, &ch) != nil || ch.Error != nil {
		a.broken = true
		return
	}
	if a.c.ID == "" {
		a.c.ID, a.c.Created, a.c.Model = ch.ID, ch.Created, ch.Model
	}
	if ch.Usage != nil {
		a.c.Usage = ch.Usage
	}
	for _, c := range ch.Choices {
		if c.Index != 0 || (len(c.Delta.ToolCalls) > 0 && string(c.Delta.ToolCalls) != "null") {
			a.broken = true
			return
		}
		if c.Delta.Role != "" {
			a.c.Role = c.Delta.Role
		}
		if c.Delta.Content != nil {
			a.text.WriteString(*c.Delta.Content)
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			a.c.FinishReason = *c.FinishReason
		}
	}
	if a.MaxBytes > 0 && a.text.Len() > a.MaxBytes {
		a.broken = true
	}
}

// Completion is the answer streamed so far; ok is false when it is not a
// complete one-choice text answer.
func (a *StreamAssembler) Completion() (Completion, bool) {
	if a.broken || a.c.FinishReason == "" {
		return Completion{}, false
	}
	c := a.c
	c.Content = a.text.String()
	return c, true
}
