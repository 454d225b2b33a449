package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// Prompt management: versioned prompt templates per tenant, in
// events.BucketPrompts ("p.<tenant>.<prompt id>" the prompt with its
// labels, "v.<tenant>.<prompt id>.<n>" its version n). A version never
// changes once written; a label (production, staging or any other name)
// points at one version or splits its requests between several by weight
// (an A/B test), and a rollback moves it back. POST /v1/responses names a
// prompt with {"id", "version", "variables"}: without a version the
// production label picks one.
//
//	POST   /v1/prompts                          {name, instructions, input}: the prompt, version 1, labelled production
//	GET    /v1/prompts                          the tenant's prompts (limit, after, order)
//	GET    /v1/prompts/{id}                     the prompt with its labels
//	DELETE /v1/prompts/{id}                     the prompt and every version
//	POST   /v1/prompts/{id}/versions            {instructions, input, labels}: the next version (labels moved to it)
//	GET    /v1/prompts/{id}/versions            its versions (limit, after, order)
//	GET    /v1/prompts/{id}/versions/{version}  one version
//	POST   /v1/prompts/{id}/labels              {label, version} or {label, versions: [{version, weight}]}

// ProductionLabel is the label a request without a version uses.
const ProductionLabel = "production"

// Bounds of prompt templates.
const (
	MaxPrompts           = 1000
	MaxPromptVersions    = 1000
	MaxPromptName        = 256
	MaxTemplateBytes     = 512 << 10
	MaxTemplateMessages  = 64
	MaxLabels            = 16
	MaxLabelTargets      = 10
	maxLabelHistory      = 50
	promptUpdateAttempts = 8
)

var (
	promptIDRe = regexp.MustCompile(`^pmpt_[A-Za-z0-9]{1,64}$`)
	labelRe    = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
)

type promptRecord struct {
	ID            string                   `json:"id"`
	Name          string                   `json:"name"`
	CreatedAt     int64                    `json:"created_at"`
	LatestVersion int                      `json:"latest_version"`
	Labels        map[string][]labelTarget `json:"labels"`
	History       []labelChange            `json:"label_history"`
}

// labelChange is one move of a label (kept for the last maxLabelHistory).
type labelChange struct {
	Label    string        `json:"label"`
	Versions []labelTarget `json:"versions"`
	At       int64         `json:"at"`
}

type promptVersion struct {
	PromptID     string        `json:"prompt_id"`
	Version      string        `json:"version"`
	CreatedAt    int64         `json:"created_at"`
	Instructions string        `json:"instructions"`
	Input        []chatMessage `json:"input"`
}

func (p *promptRecord) view() map[string]any {
	return map[string]any{"id": p.ID, "object": "prompt", "name": p.Name, "created_at": p.CreatedAt,
		"latest_version": strconv.Itoa(p.LatestVersion), "labels": p.Labels, "label_history": p.History}
}

func (v *promptVersion) view() map[string]any {
	texts := []string{v.Instructions}
	for _, m := range v.Input {
		texts = append(texts, m.Content)
	}
	input := v.Input
	if input == nil {
		input = []chatMessage{}
	}
	return map[string]any{"object": "prompt.version", "prompt_id": v.PromptID, "version": v.Version, "created_at": v.CreatedAt,
		"instructions": v.Instructions, "input": input, "variables": templateVariables(texts...)}
}

func promptKey(tenant, id string) string { return "p." + events.Token(tenant) + "." + id }
func versionKey(tenant, id string, n int) string {
	return "v." + events.Token(tenant) + "." + id + "." + strconv.Itoa(n)
}

// prompts is the prompt store and its API.
type prompts struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

func (p *prompts) routes(mux *http.ServeMux, auth func(*http.Request) *registry.Key) {
	h := func(f func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			k := auth(r)
			if k == nil {
				contracts.Write(w, contracts.ErrInvalidAPIKey())
				return
			}
			if p.kv == nil {
				contracts.Write(w, contracts.ErrServiceUnavailable("prompt store", "is not configured"))
				return
			}
			f(w, r, k.Tenant)
		}
	}
	mux.HandleFunc("POST /v1/prompts", h(p.create))
	mux.HandleFunc("GET /v1/prompts", h(p.list))
	mux.HandleFunc("GET /v1/prompts/{id}", h(p.get))
	mux.HandleFunc("DELETE /v1/prompts/{id}", h(p.remove))
	mux.HandleFunc("POST /v1/prompts/{id}/versions", h(p.newVersion))
	mux.HandleFunc("GET /v1/prompts/{id}/versions", h(p.listVersions))
	mux.HandleFunc("GET /v1/prompts/{id}/versions/{version}", h(p.getVersion))
	mux.HandleFunc("POST /v1/prompts/{id}/labels", h(p.setLabel))
}

// templateBody is a version's content in a request.
type templateBody struct {
	Instructions string          `json:"instructions"`
	Input        json.RawMessage `json:"input"`
}

// parse checks a template against the bounds.
func (t *templateBody) parse() ([]chatMessage, *contracts.Error) {
	size := len(t.Instructions)
	var msgs []chatMessage
	if len(t.Input) > 0 && string(t.Input) != "null" {
		var err error
		if msgs, err = inputMessages(t.Input); err != nil {
			return nil, contracts.ErrBadRequest("input", contracts.CodeInvalidRequest, "Invalid 'input': "+err.Error())
		}
	}
	if len(msgs) > MaxTemplateMessages {
		return nil, contracts.ErrBadRequest("input", contracts.CodeInvalidRequest, fmt.Sprintf("Invalid 'input': at most %d messages.", MaxTemplateMessages))
	}
	for i, m := range msgs {
		switch m.Role {
		case "user", "assistant", "system", "developer":
		default:
			return nil, contracts.ErrBadRequest(fmt.Sprintf("input[%d].role", i), contracts.CodeInvalidValue,
				fmt.Sprintf("Invalid 'input[%d].role': expected user, assistant, system or developer.", i))
		}
		size += len(m.Content)
	}
	if size > MaxTemplateBytes {
		return nil, contracts.ErrBadRequest("input", contracts.CodeStringTooLong, fmt.Sprintf("The template is longer than %d bytes.", MaxTemplateBytes))
	}
	if t.Instructions == "" && len(msgs) == 0 {
		return nil, contracts.ErrBadRequest("instructions", contracts.CodeMissingParam, "A prompt version needs 'instructions' or 'input'.")
	}
	return msgs, nil
}

func internal(err error) *contracts.Error {
	return contracts.ErrServiceUnavailable("prompt store", "did not answer ("+httpapi.Bounded(err.Error(), 200)+")")
}

func (p *prompts) create(w http.ResponseWriter, r *http.Request, tenant string) {
	var body struct {
		Name string `json:"name"`
		templateBody
	}
	if !httpapi.Decode(w, r, &body) {
		return
	}
	if body.Name == "" || len(body.Name) > MaxPromptName {
		contracts.Write(w, contracts.ErrBadRequest("name", contracts.CodeInvalidRequest, fmt.Sprintf("A prompt needs a 'name' of 1 to %d bytes.", MaxPromptName)))
		return
	}
	msgs, e := body.parse()
	if e != nil {
		contracts.Write(w, e)
		return
	}
	ctx := r.Context()
	n, err := p.count(ctx, tenant)
	if err != nil {
		contracts.Write(w, internal(err))
		return
	}
	if n >= MaxPrompts {
		contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, fmt.Sprintf("This tenant already has %d prompts, the limit; delete one first.", MaxPrompts)))
		return
	}
	now := p.now().Unix()
	rec := &promptRecord{ID: httpapi.SortableID("pmpt_"), Name: body.Name, CreatedAt: now, LatestVersion: 1,
		Labels: map[string][]labelTarget{ProductionLabel: {{Version: "1", Weight: 100}}}}
	rec.History = []labelChange{{Label: ProductionLabel, Versions: rec.Labels[ProductionLabel], At: now}}
	v := &promptVersion{PromptID: rec.ID, Version: "1", CreatedAt: now, Instructions: body.Instructions, Input: msgs}
	if err := p.putJSON(ctx, versionKey(tenant, rec.ID, 1), v); err != nil {
		contracts.Write(w, internal(err))
		return
	}
	if err := p.putJSON(ctx, promptKey(tenant, rec.ID), rec); err != nil {
		contracts.Write(w, internal(err))
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, rec.view())
}

func (p *prompts) putJSON(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = p.kv.Create(ctx, key, b)
	return err
}

func (p *prompts) keys(ctx context.Context, tenant string) ([]string, error) {
	l, err := p.kv.ListKeysFiltered(ctx, "p."+events.Token(tenant)+".*")
	if err != nil {
		return nil, err
	}
	defer func() { _ = l.Stop() }()
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, nil
}

func (p *prompts) count(ctx context.Context, tenant string) (int, error) {
	ks, err := p.keys(ctx, tenant)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, nil
	}
	return len(ks), err
}

// load reads tenant's prompt id with its revision; nil when there is none.
func (p *prompts) load(ctx context.Context, tenant, id string) (*promptRecord, uint64, error) {
	if !promptIDRe.MatchString(id) {
		return nil, 0, nil
	}
	e, err := p.kv.Get(ctx, promptKey(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var rec promptRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, 0, err
	}
	return &rec, e.Revision(), nil
}

// version reads version n of tenant's prompt id; nil when there is none.
func (p *prompts) version(ctx context.Context, tenant, id string, n int) (*promptVersion, error) {
	e, err := p.kv.Get(ctx, versionKey(tenant, id, n))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var v promptVersion
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func promptNotFound(id string) *contracts.Error {
	return contracts.ErrPromptNotFound("", fmt.Sprintf("No such prompt: %s", httpapi.Bounded(id, 80)))
}

// loadOr404 reads the prompt of the path, or answers.
func (p *prompts) loadOr404(w http.ResponseWriter, r *http.Request, tenant string) (*promptRecord, uint64, bool) {
	id := r.PathValue("id")
	rec, rev, err := p.load(r.Context(), tenant, id)
	switch {
	case err != nil:
		contracts.Write(w, internal(err))
		return nil, 0, false
	case rec == nil:
		contracts.Write(w, promptNotFound(id))
		return nil, 0, false
	}
	return rec, rev, true
}

func (p *prompts) get(w http.ResponseWriter, r *http.Request, tenant string) {
	if rec, _, ok := p.loadOr404(w, r, tenant); ok {
		httpapi.WriteJSON(w, http.StatusOK, rec.view())
	}
}

func (p *prompts) list(w http.ResponseWriter, r *http.Request, tenant string) {
	limit, order, ok := httpapi.ListParams(w, r, 20, 100)
	if !ok {
		return
	}
	ctx := r.Context()
	ks, err := p.keys(ctx, tenant)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		contracts.Write(w, internal(err))
		return
	}
	recs := make([]*promptRecord, 0, len(ks))
	for _, k := range ks {
		rec, _, err := p.load(ctx, tenant, k[strings.LastIndexByte(k, '.')+1:])
		if err != nil {
			contracts.Write(w, internal(err))
			return
		}
		if rec != nil {
			recs = append(recs, rec)
		}
	}
	httpapi.SortByCreated(recs, order, func(p *promptRecord) (int64, string) { return p.CreatedAt, p.ID })
	page, more := httpapi.PageAfter(recs, r.URL.Query().Get("after"), func(p *promptRecord) string { return p.ID }, limit)
	views := make([]map[string]any, 0, len(page))
	for _, rec := range page {
		views = append(views, rec.view())
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ListPage(views, more, func(v map[string]any) string { return v["id"].(string) }))
}

func (p *prompts) remove(w http.ResponseWriter, r *http.Request, tenant string) {
	rec, _, ok := p.loadOr404(w, r, tenant)
	if !ok {
		return
	}
	ctx := r.Context()
	if err := p.kv.Purge(ctx, promptKey(tenant, rec.ID)); err != nil {
		contracts.Write(w, internal(err))
		return
	}
	for n := 1; n <= rec.LatestVersion; n++ {
		_ = p.kv.Purge(ctx, versionKey(tenant, rec.ID, n))
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"id": rec.ID, "object": "prompt", "deleted": true})
}

// update applies change to tenant's prompt id by compare-and-set
// (retried on a concurrent write); change answers an error to refuse.
func (p *prompts) update(ctx context.Context, tenant, id string, change func(*promptRecord) *contracts.Error) (*promptRecord, *contracts.Error) {
	if !promptIDRe.MatchString(id) {
		return nil, promptNotFound(id)
	}
	var refused *contracts.Error
	rec, _, err := kv.Update(ctx, p.kv, promptKey(tenant, id), func(rec *promptRecord, exists bool) error {
		if !exists {
			refused = promptNotFound(id)
			return refused
		}
		if refused = change(rec); refused != nil {
			return refused
		}
		return nil
	})
	switch {
	case refused != nil:
		return nil, refused
	case errors.Is(err, kv.ErrConflict):
		return nil, contracts.ErrConflict("The prompt is being changed by other requests; retry.")
	case err != nil:
		return nil, internal(err)
	}
	return &rec, nil
}

func (p *prompts) newVersion(w http.ResponseWriter, r *http.Request, tenant string) {
	var body struct {
		templateBody
		Labels []string `json:"labels"`
	}
	if !httpapi.Decode(w, r, &body) {
		return
	}
	msgs, e := body.parse()
	if e != nil {
		contracts.Write(w, e)
		return
	}
	for _, l := range body.Labels {
		if !labelRe.MatchString(l) {
			contracts.Write(w, badLabel(l))
			return
		}
	}
	ctx := r.Context()
	id := r.PathValue("id")
	var v *promptVersion
	for range promptUpdateAttempts {
		rec, _, err := p.load(ctx, tenant, id)
		if err != nil {
			contracts.Write(w, internal(err))
			return
		}
		if rec == nil {
			contracts.Write(w, promptNotFound(id))
			return
		}
		n := rec.LatestVersion + 1
		if n > MaxPromptVersions {
			contracts.Write(w, contracts.ErrBadRequest("", contracts.CodeInvalidRequest, fmt.Sprintf("The prompt already has %d versions, the limit.", MaxPromptVersions)))
			return
		}
		v = &promptVersion{PromptID: id, Version: strconv.Itoa(n), CreatedAt: p.now().Unix(), Instructions: body.Instructions, Input: msgs}
		// The version's key is the lock: of two concurrent writers of
		// version n, one creates it and the other tries n+1.
		if err := p.putJSON(ctx, versionKey(tenant, id, n), v); err == nil {
			break
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			contracts.Write(w, internal(err))
			return
		}
		v = nil
		if _, e := p.update(ctx, tenant, id, func(rec *promptRecord) *contracts.Error {
			rec.LatestVersion = max(rec.LatestVersion, n)
			return nil
		}); e != nil {
			contracts.Write(w, e)
			return
		}
	}
	if v == nil {
		contracts.Write(w, contracts.ErrConflict("The prompt is being changed by another request; retry."))
		return
	}
	n, _ := strconv.Atoi(v.Version)
	if _, e := p.update(ctx, tenant, id, func(rec *promptRecord) *contracts.Error {
		rec.LatestVersion = max(rec.LatestVersion, n)
		for _, l := range body.Labels {
			if e := rec.setLabel(l, []labelTarget{{Version: v.Version, Weight: 100}}, p.now().Unix()); e != nil {
				return e
			}
		}
		return nil
	}); e != nil {
		contracts.Write(w, e)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, v.view())
}

func badLabel(l string) *contracts.Error {
	return contracts.ErrBadRequest("label", contracts.CodeInvalidValue,
		fmt.Sprintf("Invalid label '%s': lowercase letters, digits, '_' and '-', at most 32, starting with a letter.", httpapi.Bounded(l, 40)))
}

// setLabel points label at targets, checked.
func (rec *promptRecord) setLabel(label string, targets []labelTarget, at int64) *contracts.Error {
	if !labelRe.MatchString(label) {
		return badLabel(label)
	}
	if len(targets) == 0 || len(targets) > MaxLabelTargets {
		return contracts.ErrBadRequest("versions", contracts.CodeInvalidRequest, fmt.Sprintf("A label points at 1 to %d versions.", MaxLabelTargets))
	}
	total := 0
	seen := map[string]bool{}
	for i, t := range targets {
		n, err := strconv.Atoi(t.Version)
		if err != nil || n < 1 || n > rec.LatestVersion || strconv.Itoa(n) != t.Version {
			return contracts.ErrPromptNotFound(fmt.Sprintf("versions[%d].version", i),
				fmt.Sprintf("The prompt '%s' has no version '%s' (its versions are 1 to %d).", rec.ID, httpapi.Bounded(t.Version, 20), rec.LatestVersion))
		}
		if seen[t.Version] {
			return contracts.ErrBadRequest(fmt.Sprintf("versions[%d].version", i), contracts.CodeInvalidRequest, "A version is named twice.")
		}
		seen[t.Version] = true
		if t.Weight < 1 || t.Weight > 100 {
			return contracts.ErrBadRequest(fmt.Sprintf("versions[%d].weight", i), contracts.CodeInvalidValue, "A weight is an integer from 1 to 100.")
		}
		total += t.Weight
	}
	if total != 100 {
		return contracts.ErrBadRequest("versions", contracts.CodeInvalidValue, fmt.Sprintf("The weights of a label sum to 100, not %d.", total))
	}
	if _, ok := rec.Labels[label]; !ok && len(rec.Labels) >= MaxLabels {
		return contracts.ErrBadRequest("label", contracts.CodeInvalidRequest, fmt.Sprintf("A prompt has at most %d labels.", MaxLabels))
	}
	if rec.Labels == nil {
		rec.Labels = map[string][]labelTarget{}
	}
	rec.Labels[label] = targets
	rec.History = append(rec.History, labelChange{Label: label, Versions: targets, At: at})
	if len(rec.History) > maxLabelHistory {
		rec.History = rec.History[len(rec.History)-maxLabelHistory:]
	}
	return nil
}

func (p *prompts) setLabel(w http.ResponseWriter, r *http.Request, tenant string) {
	var body struct {
		Label    string        `json:"label"`
		Version  string        `json:"version"`
		Versions []labelTarget `json:"versions"`
	}
	if !httpapi.Decode(w, r, &body) {
		return
	}
	targets := body.Versions
	if body.Version != "" {
		if len(targets) > 0 {
			contracts.Write(w, contracts.ErrBadRequest("version", contracts.CodeInvalidRequest, "Give 'version' or 'versions', not both."))
			return
		}
		targets = []labelTarget{{Version: body.Version, Weight: 100}}
	}
	rec, e := p.update(r.Context(), tenant, r.PathValue("id"), func(rec *promptRecord) *contracts.Error {
		return rec.setLabel(body.Label, targets, p.now().Unix())
	})
	if e != nil {
		contracts.Write(w, e)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, rec.view())
}

func (p *prompts) listVersions(w http.ResponseWriter, r *http.Request, tenant string) {
	limit, order, ok := httpapi.ListParams(w, r, 20, 100)
	if !ok {
		return
	}
	rec, _, ok := p.loadOr404(w, r, tenant)
	if !ok {
		return
	}
	// Versions are numbered 1..latest: the page is read without a scan.
	start, step := rec.LatestVersion, -1
	if order == "asc" {
		start, step = 1, 1
	}
	if after := r.URL.Query().Get("after"); after != "" {
		if n, err := strconv.Atoi(after); err == nil {
			start = n + step
		}
	}
	var views []map[string]any
	more := false
	for n := start; n >= 1 && n <= rec.LatestVersion; n += step {
		if len(views) == limit {
			more = true
			break
		}
		v, err := p.version(r.Context(), tenant, rec.ID, n)
		if err != nil {
			contracts.Write(w, internal(err))
			return
		}
		if v != nil {
			views = append(views, v.view())
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ListPage(views, more, func(v map[string]any) string { return v["version"].(string) }))
}

func (p *prompts) getVersion(w http.ResponseWriter, r *http.Request, tenant string) {
	rec, _, ok := p.loadOr404(w, r, tenant)
	if !ok {
		return
	}
	v, e := p.pick(r.Context(), tenant, rec, r.PathValue("version"), "")
	if e != nil {
		contracts.Write(w, e)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, v.view())
}

// pick reads the version of rec that version names: a number, or a label
// (split by its weights on key); "" is the production label.
func (p *prompts) pick(ctx context.Context, tenant string, rec *promptRecord, version, key string) (*promptVersion, *contracts.Error) {
	if version == "" {
		version = ProductionLabel
	}
	if targets, ok := rec.Labels[version]; ok {
		version = choose(targets, key)
	}
	n, err := strconv.Atoi(version)
	if err != nil || n < 1 || n > rec.LatestVersion || strconv.Itoa(n) != version {
		return nil, contracts.ErrPromptNotFound("prompt.version",
			fmt.Sprintf("The prompt '%s' has no version or label '%s' (its versions are 1 to %d).", rec.ID, httpapi.Bounded(version, 40), rec.LatestVersion))
	}
	v, err := p.version(ctx, tenant, rec.ID, n)
	if err != nil {
		return nil, internal(err)
	}
	if v == nil {
		return nil, contracts.ErrPromptNotFound("prompt.version", fmt.Sprintf("The prompt '%s' has no version '%s'.", rec.ID, version))
	}
	return v, nil
}

// promptRef is the request's prompt: OpenAI's {"id", "version",
// "variables"}.
type promptRef struct {
	ID        string                     `json:"id"`
	Version   *string                    `json:"version"`
	Variables map[string]json.RawMessage `json:"variables"`
}

// resolved is a prompt reference made into instructions and messages.
type resolved struct {
	ID, Version  string
	Instructions string
	Input        []chatMessage
	// echo is the response's "prompt": id, version, variables as given.
	echo map[string]any
}

// resolve reads and fills in the request's prompt; key splits a label's
// requests (the response id); budget bounds what the substituted template
// may take in bytes.
func (p *prompts) resolve(ctx context.Context, tenant string, ref *promptRef, key string, budget int64) (*resolved, *contracts.Error) {
	if p.kv == nil {
		return nil, contracts.ErrServiceUnavailable("prompt store", "is not configured")
	}
	if ref.ID == "" {
		return nil, contracts.ErrBadRequest("prompt.id", contracts.CodeMissingParam, "Missing required parameter: 'prompt.id'.")
	}
	vars, e := parseVariables(ref.Variables)
	if e != nil {
		return nil, e
	}
	rec, _, err := p.load(ctx, tenant, ref.ID)
	if err != nil {
		return nil, internal(err)
	}
	if rec == nil {
		return nil, contracts.ErrPromptNotFound("prompt.id", fmt.Sprintf("No such prompt: %s", httpapi.Bounded(ref.ID, 80)))
	}
	version := ""
	if ref.Version != nil {
		version = *ref.Version
	}
	v, e := p.pick(ctx, tenant, rec, version, key)
	if e != nil {
		return nil, e
	}
	out := &resolved{ID: rec.ID, Version: v.Version}
	if out.Instructions, e = substitute(v.Instructions, vars, &budget, rec.ID, v.Version); e != nil {
		return nil, e
	}
	for _, m := range v.Input {
		text, e := substitute(m.Content, vars, &budget, rec.ID, v.Version)
		if e != nil {
			return nil, e
		}
		out.Input = append(out.Input, chatMessage{Role: m.Role, Content: text})
	}
	echoVars := map[string]any{}
	for k, raw := range ref.Variables {
		echoVars[k] = raw
	}
	out.echo = map[string]any{"id": rec.ID, "version": v.Version, "variables": echoVars}
	return out, nil
}
