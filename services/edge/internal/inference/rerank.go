package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/rerank"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// POST /v1/rerank, in the Jina/Cohere shape:
//
//	{"model", "query", "documents": [string | {"text"}], "top_n", "return_documents"}
//
// answered
//
//	{"id", "object": "rerank", "model", "results": [{"index", "relevance_score", "document"?: {"text"}}],
//	 "usage": {"prompt_tokens", "total_tokens"}, "meta": {"billed_units": {"search_units"}}}
//
// results by descending relevance_score, at most top_n; "document" only
// with return_documents true (default false, as Cohere's v1). usage is
// Jina's (its total_tokens are the tokens billed: the engine's count, or
// an estimate from the text when the engine gives none, marked
// "estimated": true); meta.billed_units is Cohere's (one search unit per
// query and up to 100 documents), so the clients of either read it.
// The model must be registered with kind "rerank"; it is admitted,
// limited, budgeted and metered like any request (usage endpoint
// "rerank").

// rerankBody is what /v1/rerank reads.
type rerankBody struct {
	Model           json.RawMessage   `json:"model"`
	Query           json.RawMessage   `json:"query"`
	Documents       []json.RawMessage `json:"documents"`
	TopN            *int              `json:"top_n"`
	ReturnDocuments *bool             `json:"return_documents"`
}

// kindMismatch refuses a request to endpoint of a model of another kind.
func kindMismatch(m registry.Model, endpoint string) *contracts.Error {
	rr := m.Kind == registry.ModelKindRerank
	switch {
	case rr && endpoint != events.EndpointRerank:
		return contracts.ErrBadRequest("model", contracts.CodeModelKindMismatch,
			fmt.Sprintf("The model '%s' is a rerank model: it serves /v1/rerank only.", m.Name))
	case !rr && endpoint == events.EndpointRerank:
		return contracts.ErrBadRequest("model", contracts.CodeModelKindMismatch,
			fmt.Sprintf("The model '%s' is not a rerank model (register it with kind \"rerank\").", m.Name))
	}
	return nil
}

// ParseRerank reads a /v1/rerank body: the bus request (documents as
// strings) and whether documents are returned. Every bound is checked.
func ParseRerank(body []byte) (rerank.Request, bool, *contracts.Error) {
	var in rerankBody
	var out rerank.Request
	if err := json.Unmarshal(body, &in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return out, false, contracts.ErrBadRequest(te.Field, contracts.CodeInvalidType, fmt.Sprintf("Invalid type for '%s': expected %s.", te.Field, te.Type))
		}
		return out, false, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not a valid JSON object: "+httpapi.TrimJSONErr(err))
	}
	if isNull(in.Model) {
		return out, false, contracts.ErrBadRequest("model", contracts.CodeMissingParam, "Missing required parameter: 'model'.")
	}
	if json.Unmarshal(in.Model, &out.Model) != nil || out.Model == "" {
		return out, false, contracts.ErrBadRequest("model", contracts.CodeInvalidType, "Invalid 'model': expected a non-empty string.")
	}
	if len(out.Model) > MaxModelName {
		return out, false, errModelTooLong()
	}
	if isNull(in.Query) {
		return out, false, contracts.ErrBadRequest("query", contracts.CodeMissingParam, "Missing required parameter: 'query'.")
	}
	if json.Unmarshal(in.Query, &out.Query) != nil || out.Query == "" {
		return out, false, contracts.ErrBadRequest("query", contracts.CodeInvalidType, "Invalid 'query': expected a non-empty string.")
	}
	if in.Documents == nil {
		return out, false, contracts.ErrBadRequest("documents", contracts.CodeMissingParam, "Missing required parameter: 'documents'.")
	}
	if len(in.Documents) == 0 {
		return out, false, contracts.ErrBadRequest("documents", contracts.CodeInvalidRequest, "Invalid 'documents': empty array. Expected at least one document.")
	}
	if len(in.Documents) > rerank.MaxDocuments {
		return out, false, contracts.ErrBadRequest("documents", contracts.CodeTooManyDocuments,
			fmt.Sprintf("Invalid 'documents': %d documents, at most %d can be reranked at once.", len(in.Documents), rerank.MaxDocuments))
	}
	size := len(out.Query)
	out.Documents = make([]string, len(in.Documents))
	for i, raw := range in.Documents {
		var obj struct {
			Text *string `json:"text"`
		}
		switch {
		case len(raw) > 0 && raw[0] == '"':
			if json.Unmarshal(raw, &out.Documents[i]) != nil {
				return out, false, contracts.ErrBadRequest(fmt.Sprintf("documents[%d]", i), contracts.CodeInvalidType, "Invalid document: expected a string.")
			}
		case len(raw) > 0 && raw[0] == '{' && json.Unmarshal(raw, &obj) == nil && obj.Text != nil:
			out.Documents[i] = *obj.Text
		default:
			return out, false, contracts.ErrBadRequest(fmt.Sprintf("documents[%d]", i), contracts.CodeInvalidType,
				"Invalid document: expected a string or an object with a string 'text'.")
		}
		if size += len(out.Documents[i]); size > rerank.MaxBytes {
			return out, false, contracts.ErrBadRequest("documents", contracts.CodeTooManyDocuments,
				fmt.Sprintf("The query and documents exceed %d bytes; rerank fewer or shorter documents.", rerank.MaxBytes))
		}
	}
	if in.TopN != nil {
		if *in.TopN < 1 {
			return out, false, contracts.ErrBadRequest("top_n", contracts.CodeInvalidValue, "Invalid 'top_n': expected an integer of at least 1.")
		}
		out.TopN = min(*in.TopN, len(out.Documents))
	}
	return out, in.ReturnDocuments != nil && *in.ReturnDocuments, nil
}

func (s *Service) rerankHandler(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	const op = events.EndpointRerank
	if s.d.Draining() {
		s.refuse(w, op, &refusal{Error: contracts.ErrShuttingDown()})
		return
	}
	key := s.Authenticate(r)
	if key == nil {
		s.refuse(w, op, &refusal{Error: contracts.ErrInvalidAPIKey()})
		return
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.d.MaxBody)); err != nil {
		s.count(op, "", httpapi.BodyError(w, r, err))
		return
	}
	req, withDocs, perr := ParseRerank(buf.Bytes())
	if perr != nil {
		s.refuse(w, op, &refusal{Error: perr, model: req.Model})
		return
	}
	body, _ := json.Marshal(req)
	inBytes := int64(len(req.Query))
	for _, d := range req.Documents {
		inBytes += int64(len(d)) + int64(len(req.Query)) // a pair per document
	}
	c := Call{Key: key, Endpoint: events.EndpointRerank, Body: body, Start: start,
		Request: Request{Model: req.Model, InputBytes: inBytes}}
	s.Generate(w, r, c, &rerankRenderer{req: req, withDocs: withDocs})
}

// rerankRenderer answers a rerank in the Jina/Cohere shape.
type rerankRenderer struct {
	req      rerank.Request
	withDocs bool
}

func (*rerankRenderer) Chunk(http.ResponseWriter, []byte, bool) error {
	return errors.New("rerank answers are never streamed")
}

func (*rerankRenderer) Done(http.ResponseWriter) {}

func (rr *rerankRenderer) Complete(w http.ResponseWriter, status int, contentType string, body []byte) {
	if status != http.StatusOK {
		(openAI{}).Complete(w, status, contentType, body)
		return
	}
	resp, err := rerank.Parse(body, len(rr.req.Documents))
	if err != nil {
		contracts.Write(w, contracts.ErrEngine("The rerank model answered badly: "+err.Error()))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, RerankAnswer(w.Header().Get("X-Request-Id"), rr.req, resp, rr.withDocs))
}

func (*rerankRenderer) Fail(w http.ResponseWriter, apiErr *contracts.Error, err error, _ bool) {
	WriteError(w, apiErr, err)
}

// RerankAnswer is the /v1/rerank answer for resp.
func RerankAnswer(id string, req rerank.Request, resp rerank.Response, withDocs bool) map[string]any {
	results := make([]map[string]any, len(resp.Results))
	for i, x := range resp.Results {
		results[i] = map[string]any{"index": x.Index, "relevance_score": x.RelevanceScore}
		if withDocs {
			results[i]["document"] = map[string]string{"text": req.Documents[x.Index]}
		}
	}
	usage := map[string]any{"prompt_tokens": resp.Usage.PromptTokens, "total_tokens": resp.Usage.TotalTokens}
	if resp.Usage.Estimated {
		usage["estimated"] = true
	}
	units := (len(req.Documents) + 99) / 100
	return map[string]any{"id": id, "object": rerank.ObjectRerank, "model": req.Model, "results": results, "usage": usage,
		"meta": map[string]any{"billed_units": map[string]int{"search_units": units}}}
}
