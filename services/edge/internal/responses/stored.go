package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// turn is what a request adds to a plain generation: the stored
// conversation it chains onto, the prompt template it names, and whether
// it is stored.
type turn struct {
	store    bool
	previous string
	// prior is the conversation of previous_response_id, oldest first.
	prior []storedItem
	// prompt is the request's prompt template, filled in.
	prompt *resolved
	// instructions are the prompt's and the request's.
	instructions string
	// msgs are the request's input: the prompt's messages, then its own.
	msgs []chatMessage
}

// prepare reads the request's previous response and prompt.
func (s *Service) prepare(ctx context.Context, tenant string, req *responsesRequest, id string, msgs []chatMessage) (*turn, *contracts.Error) {
	t := &turn{store: req.Store == nil || *req.Store, instructions: req.Instructions, msgs: msgs}
	if req.PreviousResponseID != nil && *req.PreviousResponseID != "" {
		t.previous = *req.PreviousResponseID
	}
	if (t.store || t.previous != "") && s.store == nil {
		return nil, contracts.ErrServiceUnavailable("response store", "is not configured (send store false)")
	}
	if t.previous != "" {
		rec, ok, err := s.store.get(ctx, tenant, t.previous)
		if err != nil {
			return nil, contracts.ErrServiceUnavailable("response store", "did not answer ("+httpapi.Bounded(err.Error(), 200)+")")
		}
		if !ok {
			return nil, contracts.ErrPreviousResponseNotFound(httpapi.Bounded(t.previous, 80))
		}
		// Whatever the previous response's status: OpenAI's reference puts
		// no condition on it. An incomplete one adds its partial answer, a
		// failed one its input and the output items it finished.
		t.prior = rec.conversation()
	}
	if req.Prompt != nil {
		p, e := s.prompts.resolve(ctx, tenant, req.Prompt, id, s.d.Inference.MaxBody())
		if e != nil {
			return nil, e
		}
		t.prompt = p
		if p.Instructions != "" {
			t.instructions = p.Instructions
			if req.Instructions != "" {
				t.instructions += "\n\n" + req.Instructions
			}
		}
		t.msgs = append(slices.Clip(p.Input), msgs...)
	}
	return t, nil
}

// fits refuses a model request over the body limit that a stored
// conversation or a prompt template made so: nothing of a conversation is
// ever cut.
func (t *turn) fits(n int, limit int64) *contracts.Error {
	if int64(n) <= limit || (len(t.prior) == 0 && t.prompt == nil) {
		return nil
	}
	if len(t.prior) > 0 {
		return contracts.ErrBadRequest("previous_response_id", contracts.CodeConversationTooLarge,
			fmt.Sprintf("The conversation of previous_response_id '%s' with this input is %d bytes, over the limit of %d; start a new conversation.", t.previous, n, limit))
	}
	return contracts.ErrBadRequest("prompt", contracts.CodeConversationTooLarge,
		fmt.Sprintf("The prompt with its variables and this input is %d bytes, over the limit of %d.", n, limit))
}

// fields are the response object's previous_response_id, prompt and store.
func (t *turn) fields() map[string]any {
	f := map[string]any{"previous_response_id": nil, "prompt": nil, "store": t.store}
	if t.previous != "" {
		f["previous_response_id"] = t.previous
	}
	if t.prompt != nil {
		f["prompt"] = t.prompt.echo
	}
	return f
}

// bridge names the prompt and version for the worker's usage event
// (events.UsageRecordedV5).
func (t *turn) bridge() map[string]string {
	if t.prompt == nil {
		return nil
	}
	return map[string]string{bridge.HdrPromptID: t.prompt.ID, bridge.HdrPromptVersion: t.prompt.Version}
}

// attributes name the prompt, version and previous response on the span.
func (t *turn) attributes() []attribute.KeyValue {
	var a []attribute.KeyValue
	if t.prompt != nil {
		a = append(a, attribute.String("aiforge.prompt.id", t.prompt.ID), attribute.String("aiforge.prompt.version", t.prompt.Version))
	}
	if t.previous != "" {
		a = append(a, attribute.String("aiforge.previous_response_id", t.previous))
	}
	return a
}

// keeper stores the response of t at its end (nil when it is not stored):
// completed, incomplete (cut at max_output_tokens or by a content filter,
// with its partial output, which a chain onto it sends the model) or, for
// a stream, failed, as OpenAI stores them all.
func (s *Service) keeper(tenant, id string, start time.Time, t *turn) func(map[string]any) error {
	if !t.store {
		return nil
	}
	items := make([]storedItem, len(t.msgs))
	for i, m := range t.msgs {
		items[i] = storedItem{ID: fmt.Sprintf("msg_%s%04d", id[len("resp_"):], i), Role: m.Role, Content: m.Content}
	}
	return func(resp map[string]any) error {
		raw, err := json.Marshal(resp)
		if err != nil {
			return err
		}
		rec := &record{ID: id, CreatedAt: start.Unix(), Response: raw, Input: items, Context: t.prior, Output: outputMessages(resp)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.store.put(ctx, tenant, rec)
	}
}

// outputMessages are the assistant messages of a response object: what a
// later turn sends the model (tool calls and search results are not).
func outputMessages(resp map[string]any) []storedItem {
	var out []storedItem
	output, _ := resp["output"].([]map[string]any)
	for _, item := range output {
		if item["type"] != "message" {
			continue
		}
		parts, _ := item["content"].([]map[string]any)
		text := ""
		for _, p := range parts {
			if s, ok := p["text"].(string); ok {
				text += s
			}
		}
		id, _ := item["id"].(string)
		out = append(out, storedItem{ID: id, Role: "assistant", Content: text})
	}
	return out
}

// notStored is the answer to a response that was generated (and billed)
// but could not be stored.
func notStored(err error) *contracts.Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errRecordTooLarge):
		return contracts.ErrBadRequest("store", contracts.CodeConversationTooLarge,
			"The response was generated but is too large to store: "+httpapi.Bounded(err.Error(), 200)+"; send store false or start a new conversation.")
	default:
		return contracts.ErrServiceUnavailable("response store", "could not keep the generated response ("+httpapi.Bounded(err.Error(), 200)+"); retry, or send store false")
	}
}

// stored authenticates and reads the response of the path, or answers.
func (s *Service) storedOr404(w http.ResponseWriter, r *http.Request) (*record, string, bool) {
	key := s.d.Inference.Authenticate(r)
	if key == nil {
		contracts.Write(w, contracts.ErrInvalidAPIKey())
		return nil, "", false
	}
	id := r.PathValue("id")
	if s.store == nil {
		contracts.Write(w, contracts.ErrResponseNotFound(httpapi.Bounded(id, 80)))
		return nil, "", false
	}
	rec, ok, err := s.store.get(r.Context(), key.Tenant, id)
	switch {
	case err != nil:
		contracts.Write(w, contracts.ErrServiceUnavailable("response store", "did not answer"))
		return nil, "", false
	case !ok:
		contracts.Write(w, contracts.ErrResponseNotFound(httpapi.Bounded(id, 80)))
		return nil, "", false
	}
	return rec, key.Tenant, true
}

// getResponse is GET /v1/responses/{id}: the response as it was answered
// (include[] adds nothing: what was included then is in it).
func (s *Service) getResponse(w http.ResponseWriter, r *http.Request) {
	if v := r.URL.Query().Get("stream"); v == "true" {
		contracts.Write(w, contracts.ErrBadRequest("stream", contracts.CodeInvalidValue, "A stored response is read whole: send stream false or none."))
		return
	}
	rec, _, ok := s.storedOr404(w, r)
	if !ok {
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, rec.Response)
}

// deleteResponse is DELETE /v1/responses/{id}.
func (s *Service) deleteResponse(w http.ResponseWriter, r *http.Request) {
	rec, tenant, ok := s.storedOr404(w, r)
	if !ok {
		return
	}
	if _, err := s.store.delete(r.Context(), tenant, rec.ID); err != nil {
		contracts.Write(w, contracts.ErrServiceUnavailable("response store", "did not answer"))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": rec.ID, "object": "response", "deleted": true})
}

// inputItems is GET /v1/responses/{id}/input_items: the request's own
// input items (the prompt template's messages first), newest first unless
// order=asc, limit 1 to 100 (default 20), after an item id.
func (s *Service) inputItems(w http.ResponseWriter, r *http.Request) {
	limit, order, ok := httpapi.ListParams(w, r, 20, 100)
	if !ok {
		return
	}
	rec, _, ok := s.storedOr404(w, r)
	if !ok {
		return
	}
	items := slices.Clone(rec.Input)
	if order == "desc" {
		slices.Reverse(items)
	}
	page, more := httpapi.PageAfter(items, r.URL.Query().Get("after"), func(it storedItem) string { return it.ID }, limit)
	views := make([]map[string]any, 0, len(page))
	for _, it := range page {
		views = append(views, itemView(it))
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ListPage(views, more, func(v map[string]any) string { return v["id"].(string) }))
}

// itemView is an input item in OpenAI's shape: an input message, or an
// output message for an assistant turn given as input.
func itemView(it storedItem) map[string]any {
	if it.Role == "assistant" {
		return map[string]any{"type": "message", "id": it.ID, "status": "completed", "role": "assistant",
			"content": []map[string]any{{"type": "output_text", "text": it.Content, "annotations": []any{}, "logprobs": []any{}}}}
	}
	return map[string]any{"type": "message", "id": it.ID, "status": "completed", "role": it.Role,
		"content": []map[string]any{{"type": "input_text", "text": it.Content}}}
}
