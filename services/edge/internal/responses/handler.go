package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/guard"
	"github.com/aiforge/aiforge/services/edge/internal/containers"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
	"github.com/aiforge/aiforge/services/edge/internal/inference"
	"github.com/aiforge/aiforge/services/edge/internal/vectorstores"
)

// Deps are what the Responses API needs.
type Deps struct {
	Inference *inference.Service
	Search    *vectorstores.Service
	// Sandbox runs the code_interpreter tool's code; nil: the tool answers
	// 503 sandbox_unavailable.
	Sandbox *containers.Client
	// Responses keeps stored responses (events.BucketResponses), Prompts
	// the prompt templates (events.BucketPrompts); nil: a request that
	// stores or chains, or names a prompt, answers 503.
	Responses jetstream.KeyValue
	Prompts   jetstream.KeyValue
	// Retention is how long a stored response is kept; default
	// DefaultRetention.
	Retention time.Duration
	// Now is the clock of prompt records (tests); default time.Now.
	Now func() time.Time
}

// Service is the Responses API.
type Service struct {
	d       Deps
	store   *store
	prompts *prompts
}

// New builds the Responses API.
func New(d Deps) *Service {
	if d.Retention <= 0 {
		d.Retention = DefaultRetention
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Service{d: d, prompts: &prompts{kv: d.Prompts, now: d.Now}}
	if d.Responses != nil {
		s.store = &store{kv: d.Responses, ttl: d.Retention}
	}
	return s
}

// Routes mounts POST /v1/responses, the stored responses
// (GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items)
// and the prompt templates (/v1/prompts).
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("GET /v1/responses/{id}", s.getResponse)
	mux.HandleFunc("DELETE /v1/responses/{id}", s.deleteResponse)
	mux.HandleFunc("GET /v1/responses/{id}/input_items", s.inputItems)
	s.prompts.routes(mux, s.d.Inference.Authenticate)
}

func (s *Service) responses(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	key := s.d.Inference.Authenticate(r)
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
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not valid JSON: "+httpapi.TrimJSONErr(err)))
		return
	}
	if req.Model == "" {
		contracts.Write(w, contracts.ErrBadRequest("model", contracts.CodeMissingParam, "Missing required parameter: 'model'."))
		return
	}
	var msgs []chatMessage
	if req.Prompt == nil || len(req.Input) > 0 && string(req.Input) != "null" {
		var err error
		if msgs, err = inputMessages(req.Input); err != nil {
			contracts.Write(w, contracts.ErrBadRequest("input", contracts.CodeInvalidRequest, "Invalid 'input': "+err.Error()))
			return
		}
	}
	// The model is checked before retrieval, so a refused request costs no
	// search; Generate checks it again with the rest of admission.
	if len(req.Model) > inference.MaxModelName {
		contracts.Write(w, contracts.ErrBadRequest("model", contracts.CodeInvalidRequest, fmt.Sprintf("Invalid 'model': longer than %d bytes.", inference.MaxModelName)))
		return
	}
	if !s.d.Inference.Serves(req.Model) {
		contracts.Write(w, contracts.ErrModelNotFound(req.Model))
		return
	}
	if !key.Allows(req.Model) {
		contracts.Write(w, contracts.ErrModelNotAllowed(req.Model))
		return
	}

	id := "resp_" + events.NewID()[:24]
	turn, e := s.prepare(r.Context(), key.Tenant, &req, id, msgs)
	if e != nil {
		contracts.Write(w, e)
		return
	}
	msgs = turn.msgs

	// Retrieval.
	question := ""
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			question = msgs[i].Content
			break
		}
	}
	var results []vectorstores.Result
	searched := false
	var code *codeTool
	for i, t := range req.Tools {
		if t.Type == "code_interpreter" {
			if code != nil {
				contracts.Write(w, contracts.ErrBadRequest("tools", contracts.CodeInvalidRequest, "Give at most one code_interpreter tool."))
				return
			}
			var e *contracts.Error
			if code, e = parseCodeTool(i, t.Container); e != nil {
				contracts.Write(w, e)
				return
			}
		}
	}
	for _, t := range req.Tools {
		if t.Type == "code_interpreter" {
			continue
		}
		if t.Type != "file_search" {
			contracts.Write(w, contracts.ErrBadRequest("tools", contracts.CodeInvalidRequest, fmt.Sprintf("Tool type %q is not supported here; use file_search or code_interpreter.", t.Type)))
			return
		}
		if len(t.VectorStoreIDs) == 0 {
			contracts.Write(w, contracts.ErrBadRequest("tools.vector_store_ids", contracts.CodeMissingParam, "file_search needs 'vector_store_ids'."))
			return
		}
		limit := 10
		if t.MaxNumResults != nil {
			limit = min(max(*t.MaxNumResults, 1), 50)
		}
		ranking, e := t.RankingOptions.Ranking("tools.ranking_options")
		if e != nil {
			contracts.Write(w, e)
			return
		}
		ranker := ""
		if ro := t.RankingOptions; ro != nil {
			if ranker, e = s.d.Search.Ranker(key, ro.Ranker, "tools.ranking_options.ranker"); e != nil {
				contracts.Write(w, e)
				return
			}
		}
		var res []vectorstores.Result
		if ranker == "" {
			res, e = s.d.Search.Search(r.Context(), key.Tenant, t.VectorStoreIDs, []string{question}, t.Filters, limit, ranking)
		} else {
			first := ranking
			first.ScoreThreshold = 0
			if res, e = s.d.Search.Search(r.Context(), key.Tenant, t.VectorStoreIDs, []string{question}, t.Filters, vectorstores.RerankCandidates(limit), first); e == nil {
				res, e = s.d.Search.Rerank(r.Context(), key, ranker, []string{question}, res, limit, ranking.ScoreThreshold)
			}
		}
		if e != nil {
			contracts.Write(w, e)
			return
		}
		results = append(results, res...)
		searched = true
	}

	// Prompt assembly: numbered sources the model is asked to cite.
	chat := make([]chatMessage, 0, len(turn.prior)+len(msgs)+1)
	sys := turn.instructions
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
			fmt.Fprintf(&b, ":\n%s\n", res.Text())
		}
		sys = b.String()
	}
	if sys != "" {
		chat = append(chat, chatMessage{Role: "system", Content: sys})
	}
	for _, it := range turn.prior {
		chat = append(chat, chatMessage{Role: it.Role, Content: it.Content})
	}
	chat = append(chat, msgs...)
	cbody := map[string]any{"model": req.Model, "messages": chat, "stream": req.Stream}
	if req.MaxOutputTokens != nil {
		cbody["max_tokens"] = *req.MaxOutputTokens
	}
	if req.Temperature != nil {
		cbody["temperature"] = *req.Temperature
	}
	if req.TopP != nil {
		cbody["top_p"] = *req.TopP
	}
	if req.Stream {
		cbody["stream_options"] = map[string]any{"include_usage": true}
	}
	chatBody, _ := json.Marshal(cbody)
	if e := turn.fits(len(chatBody), s.d.Inference.MaxBody()); e != nil {
		contracts.Write(w, e)
		return
	}
	p := inference.Request{Model: req.Model, Stream: req.Stream, IncludeUsage: req.Stream, InputBytes: int64(len(chatBody)), MaxTokensParam: "max_output_tokens"}
	if req.MaxOutputTokens != nil {
		p.MaxTokens = *req.MaxOutputTokens
	}

	includeResults := false
	for _, inc := range req.Include {
		if inc == "file_search_call.results" {
			includeResults = true
		}
	}
	// Admission judges the retrieved chunks as documents (indirect
	// injection), apart from the instructions and the input.
	segs := make([]guard.Segment, 0, len(turn.prior)+len(msgs)+len(results)+1)
	if turn.instructions != "" {
		segs = append(segs, guard.Segment{Role: "system", Source: guard.SourceMessage, Text: turn.instructions})
	}
	for _, res := range results {
		segs = append(segs, guard.Segment{Source: guard.SourceDocument, Text: fmt.Sprint(res.Text())})
	}
	for _, it := range turn.prior {
		segs = append(segs, guard.Segment{Role: it.Role, Source: guard.SourceMessage, Text: it.Content})
	}
	for _, m := range msgs {
		src := guard.SourceMessage
		if m.Role == "tool" {
			src = guard.SourceTool
		}
		segs = append(segs, guard.Segment{Role: m.Role, Source: src, Text: m.Content})
	}
	rw := &renderer{model: req.Model, id: id, created: start.Unix(),
		results: results, searched: searched, includeResults: includeResults, query: question,
		temperature: req.Temperature, topP: req.TopP,
		extra: turn.fields(), keep: s.keeper(key.Tenant, id, start, turn)}
	call := inference.Call{Key: key, Endpoint: events.EndpointChatCompletions, Operation: "responses",
		Start: start, Segments: segs, Bridge: turn.bridge(), Attributes: turn.attributes()}
	if code != nil {
		s.runCode(w, r, call, &req, chat, rw, code)
		return
	}
	call.Request, call.Body = p, chatBody
	s.d.Inference.Generate(w, r, call, rw)
}

// readBody reads a request body within the edge's limit.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	var buf bytes.Buffer
	limit := s.d.Inference.MaxBody()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		httpapi.BodyError(w, r, err)
		return nil, false
	}
	return buf.Bytes(), true
}
