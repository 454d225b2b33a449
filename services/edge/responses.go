package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// POST /v1/responses with the file_search tool: retrieval over the tenant's
// vector stores, prompt assembly with numbered sources, and generation
// through the same path as chat completions (admitted, limited and
// metered), answered in the Responses API's shape with file_citation
// annotations. Beyond OpenAI, citations and search results carry the pages
// their text came from.

type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    string          `json:"instructions"`
	Stream          bool            `json:"stream"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Temperature     *float64        `json:"temperature"`
	Include         []string        `json:"include"`
	Tools           []struct {
		Type           string          `json:"type"`
		VectorStoreIDs []string        `json:"vector_store_ids"`
		MaxNumResults  *int            `json:"max_num_results"`
		Filters        json.RawMessage `json:"filters"`
		RankingOptions *struct {
			ScoreThreshold *float64 `json:"score_threshold"`
		} `json:"ranking_options"`
	} `json:"tools"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// inputMessages reads the Responses API input: a string, or a list of
// messages whose content is a string or input_text parts.
func inputMessages(raw json.RawMessage) ([]chatMessage, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []chatMessage{{Role: "user", Content: s}}, nil
	}
	var items []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, errors.New("expected a string or a list of messages")
	}
	out := make([]chatMessage, 0, len(items))
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
		out = append(out, chatMessage{Role: role, Content: text})
	}
	return out, nil
}

type citation struct {
	Type     string `json:"type"`
	Index    int    `json:"index"`
	FileID   string `json:"file_id"`
	Filename string `json:"filename"`
	Pages    []int  `json:"pages,omitempty"`
}

func (s *Service) responses(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	key := s.authenticateKey(r)
	if key == nil {
		contracts.Write(w, contracts.ErrInvalidAPIKey())
		return
	}
	var req responsesRequest
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not valid JSON: "+trimJSONErr(err)))
		return
	}
	if req.Model == "" {
		contracts.Write(w, contracts.ErrBadRequest("model", contracts.CodeMissingParam, "Missing required parameter: 'model'."))
		return
	}
	msgs, err := inputMessages(req.Input)
	if err != nil {
		contracts.Write(w, contracts.ErrBadRequest("input", contracts.CodeInvalidRequest, "Invalid 'input': "+err.Error()))
		return
	}
	if _, ok := s.lookupModel(req.Model); !ok {
		contracts.Write(w, contracts.ErrModelNotFound(req.Model))
		return
	}
	if !key.Allows(req.Model) {
		contracts.Write(w, contracts.ErrModelNotAllowed(req.Model))
		return
	}

	// Retrieval.
	query := ""
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			query = msgs[i].Content
			break
		}
	}
	var results []searchResult
	searched := false
	for _, t := range req.Tools {
		if t.Type != "file_search" {
			contracts.Write(w, contracts.ErrBadRequest("tools", contracts.CodeInvalidRequest, fmt.Sprintf("Tool type %q is not supported here; use file_search.", t.Type)))
			return
		}
		if len(t.VectorStoreIDs) == 0 {
			contracts.Write(w, contracts.ErrBadRequest("tools.vector_store_ids", contracts.CodeMissingParam, "file_search needs 'vector_store_ids'."))
			return
		}
		var stores []VectorStore
		for _, id := range t.VectorStoreIDs {
			vs, _, err := kvGet[VectorStore](r.Context(), s.vsKV, vsKey(key.Tenant, id))
			if err != nil || !validID("vs_", id) {
				notFound(w, "vector store", id)
				return
			}
			stores = append(stores, vs)
		}
		limit := 10
		if t.MaxNumResults != nil {
			limit = min(max(*t.MaxNumResults, 1), 50)
		}
		threshold := 0.0
		if t.RankingOptions != nil && t.RankingOptions.ScoreThreshold != nil {
			threshold = *t.RankingOptions.ScoreThreshold
		}
		res, e := s.searchStores(r.Context(), key.Tenant, stores, []string{query}, t.Filters, limit, threshold)
		if e != nil {
			contracts.Write(w, e)
			return
		}
		results = append(results, res...)
		searched = true
	}

	// Prompt assembly: numbered sources the model is asked to cite.
	chat := make([]chatMessage, 0, len(msgs)+1)
	sys := req.Instructions
	if searched {
		var b strings.Builder
		if sys != "" {
			b.WriteString(sys + "\n\n")
		}
		b.WriteString("Answer from the sources below and cite them as [n]. If they do not contain the answer, say so.\n")
		for i, res := range results {
			fmt.Fprintf(&b, "\n[%d] %s", i+1, res.Filename)
			if p, ok := res.Attributes["page"]; ok {
				fmt.Fprintf(&b, " (page %v)", p)
			}
			fmt.Fprintf(&b, ":\n%s\n", res.Content[0]["text"])
		}
		sys = b.String()
	}
	if sys != "" {
		chat = append(chat, chatMessage{Role: "system", Content: sys})
	}
	chat = append(chat, msgs...)
	cbody := map[string]any{"model": req.Model, "messages": chat, "stream": req.Stream}
	if req.MaxOutputTokens != nil {
		cbody["max_tokens"] = *req.MaxOutputTokens
	}
	if req.Temperature != nil {
		cbody["temperature"] = *req.Temperature
	}
	if req.Stream {
		cbody["stream_options"] = map[string]any{"include_usage": true}
	}
	chatBody, _ := json.Marshal(cbody)
	p := parsed{model: req.Model, stream: req.Stream, includeUsage: req.Stream, inputBytes: int64(len(chatBody))}
	if req.MaxOutputTokens != nil {
		p.maxTokens = *req.MaxOutputTokens
	}
	adm, ref := s.admitSpend(r.Context(), w, key, events.EndpointChatCompletions, p)
	if ref != nil {
		contracts.Write(w, ref.Error)
		return
	}

	includeResults := false
	for _, inc := range req.Include {
		if inc == "file_search_call.results" {
			includeResults = true
		}
	}
	rw := &responseWriter{s: s, w: w, key: key, model: req.Model, id: "resp_" + events.NewID()[:24], created: start.Unix(),
		results: results, searched: searched, includeResults: includeResults, query: query}
	reqID := newRequestID()
	w.Header().Set("X-Request-Id", reqID)
	out := &bridge.OutRequest{Model: req.Model, ID: reqID, Tenant: key.Tenant, KeyID: key.ID, Endpoint: events.EndpointChatCompletions,
		Stream: req.Stream, IncludeUsage: req.Stream, Body: chatBody, Reservations: adm.reservations}
	rw.serve(r, out)
}

// readBody reads a request body within the edge's limit.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	var buf bytes.Buffer
	limit := s.maxBody()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			contracts.Write(w, contracts.ErrBodyTooLarge(limit))
		} else {
			contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, "Could not read the request body."))
		}
		return nil, false
	}
	return buf.Bytes(), true
}

// responseWriter renders one response, plain or streamed.
type responseWriter struct {
	s              *Service
	w              http.ResponseWriter
	key            *registry.Key
	model, id      string
	created        int64
	results        []searchResult
	searched       bool
	includeResults bool
	query          string
	seq            int
}

func (rw *responseWriter) fileSearchCall(status string) map[string]any {
	call := map[string]any{"type": "file_search_call", "id": "fs_" + rw.id[5:], "status": status, "queries": []string{rw.query}, "results": nil}
	if rw.includeResults && status == "completed" {
		res := make([]map[string]any, 0, len(rw.results))
		for _, r := range rw.results {
			res = append(res, map[string]any{"file_id": r.FileID, "filename": r.Filename, "score": r.Score, "text": r.Content[0]["text"], "attributes": r.Attributes})
		}
		call["results"] = res
	}
	return call
}

// citations cite each retrieved file once, at the end of the answer, with
// the pages the retrieved text came from.
func (rw *responseWriter) citations(textLen int) []citation {
	var out []citation
	seen := map[string]int{}
	for _, r := range rw.results {
		i, ok := seen[r.FileID]
		if !ok {
			i = len(out)
			seen[r.FileID] = i
			out = append(out, citation{Type: "file_citation", Index: textLen, FileID: r.FileID, Filename: r.Filename})
		}
		if p, ok := r.Attributes["page"].(int); ok {
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

func (rw *responseWriter) message(text, status string) map[string]any {
	return map[string]any{"type": "message", "id": "msg_" + rw.id[5:], "status": status, "role": "assistant",
		"content": []map[string]any{{"type": "output_text", "text": text, "annotations": rw.citations(len(text)), "logprobs": []any{}}}}
}

func (rw *responseWriter) response(status string, output []map[string]any, usage map[string]any) map[string]any {
	return map[string]any{"id": rw.id, "object": "response", "created_at": rw.created, "status": status, "model": rw.model,
		"output": output, "usage": usage, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}, "error": nil,
		"incomplete_details": nil, "instructions": nil, "metadata": map[string]string{}, "text": map[string]any{"format": map[string]string{"type": "text"}}}
}

func usageOf(prompt, completion, cached int64) map[string]any {
	return map[string]any{"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion,
		"input_tokens_details": map[string]int64{"cached_tokens": cached}, "output_tokens_details": map[string]int64{"reasoning_tokens": 0}}
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

func (rw *responseWriter) serve(r *http.Request, out *bridge.OutRequest) {
	ctx := r.Context()
	if !out.Stream {
		var buf bytes.Buffer
		res, err := rw.s.client.Do(ctx, out, func(p []byte) error { buf.Write(p); return nil })
		if err == nil && res.Status != http.StatusOK {
			err = &bridge.Error{Status: res.Status, Code: contracts.CodeEngineError, Body: buf.Bytes()}
		}
		if err != nil {
			rw.releaseIfUnsent(err, out)
			writeAPIError(rw.w, rw.s.mapError(ctx, err, rw.model), err)
			return
		}
		var cc struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
			Usage *chatUsage `json:"usage"`
		}
		_ = json.Unmarshal(buf.Bytes(), &cc)
		text := ""
		if len(cc.Choices) > 0 {
			text = cc.Choices[0].Message.Content
		}
		var output []map[string]any
		if rw.searched {
			output = append(output, rw.fileSearchCall("completed"))
		}
		output = append(output, rw.message(text, "completed"))
		writeJSON(rw.w, http.StatusOK, rw.response("completed", output, cc.Usage.asMap()))
		return
	}

	rc := http.NewResponseController(rw.w)
	h := rw.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	rw.w.WriteHeader(http.StatusOK)
	rw.emit("response.created", map[string]any{"response": rw.response("in_progress", []map[string]any{}, nil)})
	rw.emit("response.in_progress", map[string]any{"response": rw.response("in_progress", []map[string]any{}, nil)})
	var output []map[string]any
	idx := 0
	if rw.searched {
		rw.emit("response.output_item.added", map[string]any{"output_index": idx, "item": rw.fileSearchCall("in_progress")})
		rw.emit("response.file_search_call.in_progress", map[string]any{"output_index": idx, "item_id": "fs_" + rw.id[5:]})
		rw.emit("response.file_search_call.searching", map[string]any{"output_index": idx, "item_id": "fs_" + rw.id[5:]})
		rw.emit("response.file_search_call.completed", map[string]any{"output_index": idx, "item_id": "fs_" + rw.id[5:]})
		call := rw.fileSearchCall("completed")
		rw.emit("response.output_item.done", map[string]any{"output_index": idx, "item": call})
		output = append(output, call)
		idx++
	}
	msgID := "msg_" + rw.id[5:]
	rw.emit("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"type": "message", "id": msgID, "status": "in_progress", "role": "assistant", "content": []any{}}})
	rw.emit("response.content_part.added", map[string]any{"output_index": idx, "item_id": msgID, "content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	_ = rc.Flush()
	var text strings.Builder
	var usage *chatUsage
	out.Flush = rc.Flush
	_, err := rw.s.client.Do(ctx, out, func(p []byte) error {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *chatUsage `json:"usage"`
		}
		if json.Unmarshal(p, &chunk) != nil {
			return nil
		}
		if chunk.Usage != nil {
			usage = chunk.Usage
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" {
				text.WriteString(c.Delta.Content)
				rw.emitNoFlush("response.output_text.delta", map[string]any{"output_index": idx, "item_id": msgID, "content_index": 0, "delta": c.Delta.Content, "logprobs": []any{}})
			}
		}
		return nil
	})
	if err != nil {
		rw.releaseIfUnsent(err, out)
		apiErr := rw.s.mapError(ctx, err, rw.model)
		rw.emit("error", map[string]any{"code": apiErr.Code, "message": apiErr.Message, "param": nil})
		return
	}
	final := text.String()
	rw.emit("response.output_text.done", map[string]any{"output_index": idx, "item_id": msgID, "content_index": 0, "text": final, "logprobs": []any{}})
	msg := rw.message(final, "completed")
	rw.emit("response.content_part.done", map[string]any{"output_index": idx, "item_id": msgID, "content_index": 0, "part": msg["content"].([]map[string]any)[0]})
	rw.emit("response.output_item.done", map[string]any{"output_index": idx, "item": msg})
	output = append(output, msg)
	rw.emit("response.completed", map[string]any{"response": rw.response("completed", output, usage.asMap())})
}

// releaseIfUnsent gives back the budget reservations of a request no worker
// took (no usage event will settle them).
func (rw *responseWriter) releaseIfUnsent(err error, out *bridge.OutRequest) {
	if errors.Is(err, bridge.ErrNoWorker) && len(out.Reservations) > 0 {
		go rw.s.release(out.Reservations)
	}
}

func (rw *responseWriter) emitNoFlush(typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = rw.seq
	rw.seq++
	b, _ := json.Marshal(fields)
	fmt.Fprintf(rw.w, "event: %s\ndata: %s\n\n", typ, b)
}

func (rw *responseWriter) emit(typ string, fields map[string]any) {
	rw.emitNoFlush(typ, fields)
	_ = http.NewResponseController(rw.w).Flush()
}
