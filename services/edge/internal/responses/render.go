package responses

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
	"github.com/aiforge/aiforge/services/edge/internal/inference"
	"github.com/aiforge/aiforge/services/edge/internal/vectorstores"
)

// renderer renders one response, plain or streamed, from the chat
// completion the inference path serves (an inference.Renderer).
type renderer struct {
	model, id      string
	created        int64
	results        []vectorstores.Result
	searched       bool
	includeResults bool
	query          string
	// extra are fields of the response object beyond the answer's
	// (previous_response_id, prompt, store: stored.go).
	extra map[string]any
	// keep, when set, stores the finished response before it is answered.
	keep func(resp map[string]any) error
	// temperature and top_p as asked (null when not: the engine's default
	// applied); the response object requires both.
	temperature, topP *float64

	// incomplete is why the answer was cut (incomplete_details.reason:
	// "max_output_tokens", "content_filter"), "" when the model finished it.
	incomplete string

	// Stream state.
	seq    int
	idx    int
	output []map[string]any
	text   strings.Builder
	usage  *chatUsage
}

var _ inference.Renderer = (*renderer)(nil)

func (rw *renderer) fileSearchCall(status string) map[string]any {
	call := map[string]any{"type": "file_search_call", "id": "fs_" + rw.id[5:], "status": status, "queries": []string{rw.query}, "results": nil}
	if rw.includeResults && status == "completed" {
		res := make([]map[string]any, 0, len(rw.results))
		for _, r := range rw.results {
			res = append(res, map[string]any{"file_id": r.FileID, "filename": r.Filename, "score": r.Score, "text": r.Text(), "attributes": r.Attributes})
		}
		call["results"] = res
	}
	return call
}

// citations places the answer's file_citation annotations at the
// sentences they support (placeCitations, cite.go); an answer none of
// whose sentences is supported cites each retrieved file once, at its end,
// with the pages the retrieved text came from.
func (rw *renderer) citations(text string) []citation {
	if out := placeCitations(text, rw.results); len(out) > 0 {
		return out
	}
	textLen := utf8.RuneCountInString(text)
	var out []citation
	seen := map[string]int{}
	for _, r := range rw.results {
		i, ok := seen[r.FileID]
		if !ok {
			i = len(out)
			seen[r.FileID] = i
			out = append(out, citation{Type: "file_citation", Index: textLen, FileID: r.FileID, Filename: r.Filename})
		}
		for _, p := range r.Pages {
			out[i].Pages = appendUnique(out[i].Pages, p)
		}
	}
	if out == nil {
		out = []citation{}
	}
	return out
}

func appendUnique(ps []int, p int) []int {
	for _, x := range ps {
		if x == p {
			return ps
		}
	}
	return append(ps, p)
}

// cut records the answer's finish_reason.
func (rw *renderer) cut(finish string) {
	if r := contracts.IncompleteReason(finish); r != "" {
		rw.incomplete = r
	}
}

// itemStatus is the status of the answer's message item: "incomplete"
// when the answer was cut, as OpenAI's.
func (rw *renderer) itemStatus() string {
	if rw.incomplete != "" {
		return "incomplete"
	}
	return "completed"
}

// finished is the response at its end: "completed", or "incomplete" with
// its incomplete_details when the answer was cut.
func (rw *renderer) finished(output []map[string]any, usage map[string]any) map[string]any {
	if rw.incomplete == "" {
		return rw.response("completed", output, usage)
	}
	resp := rw.response("incomplete", output, usage)
	resp["incomplete_details"] = map[string]any{"reason": rw.incomplete}
	return resp
}

func (rw *renderer) message(text, status string) map[string]any {
	return map[string]any{"type": "message", "id": "msg_" + rw.id[5:], "status": status, "role": "assistant",
		"content": []map[string]any{{"type": "output_text", "text": text, "annotations": rw.citations(text), "logprobs": []any{}}}}
}

func (rw *renderer) response(status string, output []map[string]any, usage map[string]any) map[string]any {
	resp := map[string]any{"id": rw.id, "object": "response", "created_at": rw.created, "status": status, "model": rw.model,
		"output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}, "error": nil,
		"incomplete_details": nil, "instructions": nil, "metadata": map[string]string{}, "text": map[string]any{"format": map[string]string{"type": "text"}},
		"temperature": rw.temperature, "top_p": rw.topP}
	if usage != nil { // usage is not nullable: left out until known
		resp["usage"] = usage
	}
	for k, v := range rw.extra {
		resp[k] = v
	}
	return resp
}

// final answers a finished response (not streamed), completed or
// incomplete, stored first when asked.
func (rw *renderer) final(w http.ResponseWriter, resp map[string]any) {
	if e := rw.stored(resp); e != nil {
		contracts.Write(w, e)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, resp)
}

// stored keeps resp when the request asked to store it.
func (rw *renderer) stored(resp map[string]any) *contracts.Error {
	if rw.keep == nil {
		return nil
	}
	return notStored(rw.keep(resp))
}

func usageOf(prompt, completion, cached int64) map[string]any {
	return map[string]any{"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion,
		"input_tokens_details": map[string]int64{"cached_tokens": cached, "cache_write_tokens": 0}, "output_tokens_details": map[string]int64{"reasoning_tokens": 0}}
}

type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *chatUsage) asMap() map[string]any {
	if u == nil {
		return usageOf(0, 0, 0)
	}
	var cached int64
	if u.PromptTokensDetails != nil {
		cached = u.PromptTokensDetails.CachedTokens
	}
	return usageOf(u.PromptTokens, u.CompletionTokens, cached)
}

func (rw *renderer) msgID() string { return "msg_" + rw.id[5:] }

// Chunk renders one chat completion chunk as output text deltas; the first
// opens the stream with the response's preamble (and the file search call).
func (rw *renderer) Chunk(w http.ResponseWriter, p []byte, first bool) error {
	if first {
		rw.open(w)
	}
	var chunk struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *chatUsage `json:"usage"`
	}
	if json.Unmarshal(p, &chunk) != nil {
		return nil
	}
	if chunk.Usage != nil {
		rw.usage = chunk.Usage
	}
	for _, c := range chunk.Choices {
		if c.FinishReason != nil {
			rw.cut(*c.FinishReason)
		}
		if c.Delta.Content != "" {
			rw.text.WriteString(c.Delta.Content)
			rw.emitNoFlush(w, "response.output_text.delta", map[string]any{"output_index": rw.idx, "item_id": rw.msgID(), "content_index": 0, "delta": c.Delta.Content, "logprobs": []any{}})
		}
	}
	return nil
}

func (rw *renderer) open(w http.ResponseWriter) {
	rw.openPreamble(w)
	rw.openMessage(w)
}

// openPreamble starts the stream: the response created, in progress, and
// the file search call when there was one.
func (rw *renderer) openPreamble(w http.ResponseWriter) {
	inference.StartSSE(w)
	rw.emit(w, "response.created", map[string]any{"response": rw.response("in_progress", []map[string]any{}, nil)})
	rw.emit(w, "response.in_progress", map[string]any{"response": rw.response("in_progress", []map[string]any{}, nil)})
	if rw.searched {
		fs := "fs_" + rw.id[5:]
		rw.emit(w, "response.output_item.added", map[string]any{"output_index": rw.idx, "item": rw.fileSearchCall("in_progress")})
		rw.emit(w, "response.file_search_call.in_progress", map[string]any{"output_index": rw.idx, "item_id": fs})
		rw.emit(w, "response.file_search_call.searching", map[string]any{"output_index": rw.idx, "item_id": fs})
		rw.emit(w, "response.file_search_call.completed", map[string]any{"output_index": rw.idx, "item_id": fs})
		call := rw.fileSearchCall("completed")
		rw.emit(w, "response.output_item.done", map[string]any{"output_index": rw.idx, "item": call})
		rw.output = append(rw.output, call)
		rw.idx++
	}
}

// openMessage opens the answer's message item.
func (rw *renderer) openMessage(w http.ResponseWriter) {
	rw.emit(w, "response.output_item.added", map[string]any{"output_index": rw.idx, "item": map[string]any{"type": "message", "id": rw.msgID(), "status": "in_progress", "role": "assistant", "content": []any{}}})
	rw.emit(w, "response.content_part.added", map[string]any{"output_index": rw.idx, "item_id": rw.msgID(), "content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}})
}

// Done closes the stream with the finished message and response: the
// message "completed" and response.completed, or, when the answer was cut
// (max_output_tokens, content filter), the message "incomplete" and
// response.incomplete, as OpenAI's.
func (rw *renderer) Done(w http.ResponseWriter) {
	final := rw.text.String()
	rw.emit(w, "response.output_text.done", map[string]any{"output_index": rw.idx, "item_id": rw.msgID(), "content_index": 0, "text": final, "logprobs": []any{}})
	msg := rw.message(final, rw.itemStatus())
	rw.emit(w, "response.content_part.done", map[string]any{"output_index": rw.idx, "item_id": rw.msgID(), "content_index": 0, "part": msg["content"].([]map[string]any)[0]})
	rw.emit(w, "response.output_item.done", map[string]any{"output_index": rw.idx, "item": msg})
	rw.output = append(rw.output, msg)
	resp := rw.finished(rw.output, rw.usage.asMap())
	if e := rw.stored(resp); e != nil {
		rw.fail(w, e, false)
		return
	}
	rw.emit(w, "response."+resp["status"].(string), map[string]any{"response": resp})
}

// Complete renders a chat completion as a response; an engine's error
// answer is relayed.
func (rw *renderer) Complete(w http.ResponseWriter, status int, _ string, body []byte) {
	if status != http.StatusOK {
		err := &bridge.Error{Status: status, Code: contracts.CodeEngineError, Body: body}
		apiErr, ok := contracts.ParseError(status, body)
		if !ok {
			apiErr = contracts.ErrEngine("The engine failed to answer.")
		}
		inference.WriteError(w, apiErr, err)
		return
	}
	var cc struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *chatUsage `json:"usage"`
	}
	_ = json.Unmarshal(body, &cc)
	text := ""
	if len(cc.Choices) > 0 {
		text = cc.Choices[0].Message.Content
		rw.cut(cc.Choices[0].FinishReason)
	}
	var output []map[string]any
	if rw.searched {
		output = append(output, rw.fileSearchCall("completed"))
	}
	output = append(output, rw.message(text, rw.itemStatus()))
	rw.final(w, rw.finished(output, cc.Usage.asMap()))
}

// Fail ends a started stream with the response failed (status "failed",
// its error in the codes of OpenAI's ResponseErrorCode) and then an error
// event with aiforge's own code; an unstarted one is answered the error.
// A failed response is stored when asked, as OpenAI's are: its id was
// sent in response.created.
func (rw *renderer) Fail(w http.ResponseWriter, apiErr *contracts.Error, err error, started bool) {
	if !started {
		inference.WriteError(w, apiErr, err)
		return
	}
	rw.fail(w, apiErr, true)
}

// fail sends response.failed and the error event, storing the failed
// response first when store is set (not when it is storing that failed).
// A failed response that cannot be stored is answered all the same: the
// error the client reads is the generation's.
func (rw *renderer) fail(w http.ResponseWriter, apiErr *contracts.Error, store bool) {
	var usage map[string]any
	if rw.usage != nil {
		usage = rw.usage.asMap()
	}
	output := rw.output
	if output == nil {
		output = []map[string]any{}
	}
	resp := rw.response("failed", output, usage)
	resp["error"] = map[string]any{"code": responseErrorCode(apiErr.Status), "message": apiErr.Message}
	if store {
		_ = rw.stored(resp)
	}
	rw.emit(w, "response.failed", map[string]any{"response": resp})
	rw.emit(w, "error", map[string]any{"code": apiErr.Code, "message": apiErr.Message, "param": nil})
}

// responseErrorCode is the ResponseErrorCode (an enum of OpenAI's) of a
// failed response: aiforge's own code is in the error event that follows.
func responseErrorCode(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case http.StatusBadRequest:
		return "invalid_prompt"
	}
	return "server_error"
}

func (rw *renderer) emitNoFlush(w http.ResponseWriter, typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = rw.seq
	rw.seq++
	b, _ := json.Marshal(fields)
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
}

func (rw *renderer) emit(w http.ResponseWriter, typ string, fields map[string]any) {
	rw.emitNoFlush(w, typ, fields)
	_ = http.NewResponseController(w).Flush()
}
