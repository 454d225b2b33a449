// Package moderations serves POST /v1/moderations in OpenAI's shape,
// backed by admission's classifier (pkg/guard): existing moderation
// clients work, and learn whether a text is an injection, a jailbreak, a
// system prompt extraction, a data exfiltration or a destructive command.
// OpenAI's own categories (harassment, hate, self-harm, sexual, violence,
// illicit...) are all present, and never flagged: aiforge does not judge
// those. A moderation is free, as at OpenAI: no usage is recorded, only
// metrics.
package moderations

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/guard"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// DefaultModel is the model name of an answer to a request that names none.
const DefaultModel = "aiforge-guard"

// MaxInputs bounds the texts of one request.
const MaxInputs = 256

// OpenAICategories are OpenAI's moderation categories, answered false with
// score 0.
var OpenAICategories = []string{
	"harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
	"self-harm", "self-harm/intent", "self-harm/instructions", "sexual", "sexual/minors", "violence", "violence/graphic",
}

// Metrics count moderations (they record no usage).
type Metrics struct {
	requests *prometheus.CounterVec
	flagged  *prometheus.CounterVec
}

// NewMetrics registers the moderations API's metrics.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_edge_moderations_total", Help: "Moderation requests answered, by HTTP status.",
		}, []string{"status"}),
		flagged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_edge_moderation_results_total", Help: "Moderation results, by flagged (true, false) and category.",
		}, []string{"flagged", "category"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.flagged} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("moderations: metrics: %w", err)
		}
	}
	return m, nil
}

// Deps are what the moderations API needs.
type Deps struct {
	Classifier guard.Classifier
	// Keys authenticates (the directory); Tenants gives a key's tenant,
	// whose admission threshold applies.
	Keys    httpapi.Keys
	Tenants func(id string) (registry.Tenant, bool)
	MaxBody int64
	Logger  *slog.Logger
	Metrics *Metrics
}

// Service is the moderations API.
type Service struct {
	d Deps
	*Metrics
}

// New builds the moderations API.
func New(d Deps) *Service {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.MaxBody <= 0 {
		d.MaxBody = 16 << 20
	}
	if d.Metrics == nil {
		d.Metrics, _ = NewMetrics(prometheus.NewRegistry())
	}
	return &Service{d: d, Metrics: d.Metrics}
}

// Routes mounts POST /v1/moderations.
func (s *Service) Routes(mux *http.ServeMux) { mux.HandleFunc("POST /v1/moderations", s.moderate) }

// Result is one moderation result in OpenAI's shape.
type Result struct {
	Flagged                   bool                `json:"flagged"`
	Categories                map[string]bool     `json:"categories"`
	CategoryScores            map[string]float64  `json:"category_scores"`
	CategoryAppliedInputTypes map[string][]string `json:"category_applied_input_types"`
}

// Response is the answer of POST /v1/moderations.
type Response struct {
	ID      string   `json:"id"`
	Model   string   `json:"model"`
	Results []Result `json:"results"`
}

func (s *Service) fail(w http.ResponseWriter, e *contracts.Error) {
	s.requests.WithLabelValues(fmt.Sprint(e.Status)).Inc()
	contracts.Write(w, e)
}

func (s *Service) moderate(w http.ResponseWriter, r *http.Request) {
	key := httpapi.KeyOf(s.d.Keys, r)
	if key == nil {
		s.fail(w, contracts.ErrInvalidAPIKey())
		return
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.d.MaxBody)); err != nil {
		s.requests.WithLabelValues("413").Inc()
		httpapi.BodyError(w, r, err)
		return
	}
	var req struct {
		Input json.RawMessage `json:"input"`
		Model *string         `json:"model"`
	}
	if err := json.Unmarshal(buf.Bytes(), &req); err != nil {
		s.fail(w, contracts.ErrBadRequest("", contracts.CodeInvalidJSON, "The request body is not valid JSON: "+httpapi.TrimJSONErr(err)))
		return
	}
	model := DefaultModel
	if req.Model != nil && *req.Model != "" {
		model = httpapi.Bounded(*req.Model, 256)
	}
	inputs, e := Inputs(req.Input)
	if e != nil {
		s.fail(w, e)
		return
	}
	if s.d.Classifier == nil {
		s.fail(w, contracts.ErrServiceUnavailable("moderation", "has no classifier"))
		return
	}
	var threshold float64
	if s.d.Tenants != nil {
		var tp *registry.Tenant
		if t, ok := s.d.Tenants(key.Tenant); ok {
			tp = &t
		}
		threshold = registry.EffectiveAdmission(tp, key).Threshold
	}
	out := Response{ID: "modr-" + events.NewID()[:24], Model: model, Results: make([]Result, 0, len(inputs))}
	for _, segs := range inputs {
		v, err := s.d.Classifier.Classify(r.Context(), segs)
		if err != nil {
			s.d.Logger.Warn("moderation classifier failed", "tenant", key.Tenant, "err", err)
			s.fail(w, contracts.ErrServiceUnavailable("moderation", "could not classify the input"))
			return
		}
		res := resultOf(v, threshold)
		s.flagged.WithLabelValues(fmt.Sprint(res.Flagged), categoryLabel(v, res.Flagged)).Inc()
		out.Results = append(out.Results, res)
	}
	s.requests.WithLabelValues("200").Inc()
	httpapi.WriteJSON(w, http.StatusOK, out)
}

func categoryLabel(v guard.Verdict, flagged bool) string {
	if !flagged {
		return ""
	}
	for _, c := range guard.Categories {
		if c == v.Category {
			return c
		}
	}
	return "other"
}

// resultOf is a verdict in OpenAI's shape: a category is flagged when its
// score is at the threshold (the policy's, else the classifier's own
// judgement for the top category).
func resultOf(v guard.Verdict, threshold float64) Result {
	res := Result{Categories: map[string]bool{}, CategoryScores: map[string]float64{}, CategoryAppliedInputTypes: map[string][]string{}}
	for _, c := range OpenAICategories {
		res.Categories[c] = false
		res.CategoryScores[c] = 0
		res.CategoryAppliedInputTypes[c] = []string{"text"}
	}
	for _, c := range guard.Categories {
		score := min(max(v.Scores[c], 0), 1)
		if c == v.Category {
			score = max(score, min(max(v.Score, 0), 1))
		}
		var on bool
		if threshold > 0 {
			on = score >= threshold
		} else {
			on = v.Malicious && c == v.Category
		}
		res.Categories[c] = on
		res.CategoryScores[c] = score
		res.CategoryAppliedInputTypes[c] = []string{"text"}
		res.Flagged = res.Flagged || on
	}
	return res
}

// Inputs reads a moderation input: a string (one result), a list of
// strings (one result each), or a list of multi-modal parts (one result
// over the text parts; image parts are not judged).
func Inputs(raw json.RawMessage) ([][]guard.Segment, *contracts.Error) {
	raw = bytes.TrimSpace(raw)
	bad := contracts.ErrBadRequest("input", contracts.CodeInvalidType, "Invalid 'input': expected a string, an array of strings, or an array of text and image_url parts.")
	if len(raw) == 0 || string(raw) == "null" {
		return nil, contracts.ErrBadRequest("input", contracts.CodeMissingParam, "Missing required parameter: 'input'.")
	}
	one := func(t string) []guard.Segment {
		return []guard.Segment{{Role: "user", Source: guard.SourceMessage, Text: t}}
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, bad
		}
		return [][]guard.Segment{one(s)}, nil
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil, bad
		}
		if len(items) == 0 {
			return nil, contracts.ErrBadRequest("input", contracts.CodeInvalidRequest, "Invalid 'input': empty array.")
		}
		if len(items) > MaxInputs {
			return nil, contracts.ErrBadRequest("input", contracts.CodeInvalidRequest, fmt.Sprintf("Invalid 'input': at most %d items.", MaxInputs))
		}
		if t := bytes.TrimSpace(items[0]); len(t) > 0 && t[0] == '{' {
			var segs []guard.Segment
			for _, it := range items {
				var p struct {
					Type string `json:"type"`
					Text string `json:"text"`
				}
				if json.Unmarshal(it, &p) != nil {
					return nil, bad
				}
				switch p.Type {
				case "text":
					segs = append(segs, one(p.Text)...)
				case "image_url":
				default:
					return nil, bad
				}
			}
			return [][]guard.Segment{segs}, nil
		}
		out := make([][]guard.Segment, 0, len(items))
		for _, it := range items {
			var s string
			if json.Unmarshal(it, &s) != nil {
				return nil, bad
			}
			out = append(out, one(s))
		}
		return out, nil
	}
	return nil, bad
}
