package inference

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/guard"
	"github.com/aiforge/aiforge/pkg/registry"
)

// HeaderAdmission is the response header of a flagged request:
// "flagged; category=injection; score=0.93".
const HeaderAdmission = "X-Aiforge-Admission"

// Bounds of the admission step.
const (
	// MaxSegments bounds the segments one request is cut into; the rest of
	// a longer request is judged as one last segment.
	MaxSegments = 1024
	// verdictQueue bounds the verdict events waiting to be published; when
	// the bus is slower than the traffic, the newest are dropped and
	// counted rather than adding latency.
	verdictQueue = 4096
)

// PIIMasker rewrites the personal data of text (emails, phone numbers,
// IBANs, card numbers, API keys) and names the kinds it found
// (guard.MaskPII).
type PIIMasker func(text string) (masked string, kinds []string)

// guardMetrics are the admission step's metrics.
type guardMetrics struct {
	verdicts *prometheus.CounterVec
	latency  prometheus.Histogram
	dropped  prometheus.Counter
}

func newGuardMetrics() *guardMetrics {
	return &guardMetrics{
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_edge_admission_verdicts_total", Help: "Admission verdicts, by action (allow, flag, block, pii_mask, pii_block) and category.",
		}, []string{"action", "category"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "aiforge_edge_admission_duration_seconds", Help: "Time the admission step (classifier, PII, policy) took per judged request.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aiforge_edge_admission_verdicts_dropped_total", Help: "Admission verdict events not published because the queue to the bus was full.",
		}),
	}
}

func (g *guardMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.verdicts, g.latency, g.dropped}
}

// categoryLabel bounds the category label to the known categories.
func categoryLabel(c string) string {
	if c == "" || slices.Contains(guard.Categories, c) {
		return c
	}
	return "other"
}

// Decision is what the admission step decided for a request.
type Decision struct {
	// Policy is the effective policy of the request's tenant and key.
	Policy registry.AdmissionPolicy
	// Judged is true when the classifier ran (the policy is not off).
	Judged  bool
	Verdict guard.Verdict
	// Malicious is the verdict against the policy's threshold (or the
	// classifier's own when the policy sets none).
	Malicious bool
	// Action is events.AdmissionBlocked, AdmissionFlagged or
	// AdmissionAllowed ("" when not judged).
	Action string
	// PII lists the kinds of personal data found, PIIAction what was done
	// (registry.PIIMask, PIIBlock, or "").
	PII       []string
	PIIAction string
	// Refusal, when set, is the answer: the request goes no further.
	Refusal *contracts.Error
	// Body is the request body to send on: the original, or the one with
	// its personal data masked.
	Body []byte
}

// Segments cuts an inference request body into what the classifier
// judges: every message of every role (tool outputs as guard.SourceTool),
// the text parts of multi-part contents, the completion prompt. Bodies it
// cannot read give no segments (parsing already refused them).
func Segments(endpoint string, body []byte) []guard.Segment {
	var f struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			Name    string          `json:"name"`
		} `json:"messages"`
		Prompt json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(body, &f) != nil {
		return nil
	}
	var segs []guard.Segment
	add := func(role, source, text string) {
		if text == "" {
			return
		}
		if len(segs) == MaxSegments {
			last := &segs[len(segs)-1]
			last.Text += "\n" + text
			return
		}
		segs = append(segs, guard.Segment{Role: role, Source: source, Text: text})
	}
	switch endpoint {
	case events.EndpointChatCompletions:
		for _, m := range f.Messages {
			src := guard.SourceMessage
			if m.Role == "tool" || m.Role == "function" {
				src = guard.SourceTool
			}
			for _, t := range contentTexts(m.Content) {
				add(m.Role, src, t)
			}
		}
	case events.EndpointCompletions:
		for _, t := range contentTexts(f.Prompt) {
			add("", guard.SourceMessage, t)
		}
	}
	return segs
}

// contentTexts is the text of a message content or a prompt: a string, a
// list of strings, or a list of parts whose text is in "text".
func contentTexts(raw json.RawMessage) []string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return []string{s}
		}
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		var out []string
		for _, it := range items {
			it = bytes.TrimSpace(it)
			if len(it) == 0 {
				continue
			}
			switch it[0] {
			case '"':
				var s string
				if json.Unmarshal(it, &s) == nil {
					out = append(out, s)
				}
			case '{':
				var p struct {
					Text string `json:"text"`
				}
				if json.Unmarshal(it, &p) == nil && p.Text != "" {
					out = append(out, p.Text)
				}
			}
		}
		return out
	}
	return nil
}

// Judge runs the admission step for a request of key to endpoint: the
// classifier over segs (the request body's own segments when nil) and the
// PII policy, against the effective policy of the key and its tenant. It
// writes nothing and publishes nothing.
func (s *Service) Judge(ctx context.Context, key *registry.Key, endpoint string, body []byte, segs []guard.Segment) Decision {
	var tenant *registry.Tenant
	if t, ok := s.d.Directory.Tenant(key.Tenant); ok {
		tenant = &t
	}
	d := Decision{Policy: registry.EffectiveAdmission(tenant, key), Body: body}
	if endpoint == events.EndpointEmbeddings || endpoint == events.EndpointRerank {
		return d // no generation: nothing to inject into
	}
	if d.Policy.Mode == registry.AdmissionOff && d.Policy.PII == registry.PIIOff {
		return d
	}
	if segs == nil {
		segs = Segments(endpoint, body)
	}
	if d.Policy.PII != registry.PIIOff && s.d.PII != nil {
		d.PII = piiKinds(s.d.PII, segs)
		if len(d.PII) > 0 {
			d.PIIAction = d.Policy.PII
			if d.Policy.PII == registry.PIIBlock {
				d.Refusal = &contracts.Error{Status: http.StatusBadRequest, Type: contracts.TypeInvalidRequest, Code: contracts.CodePIIDetected,
					Message: fmt.Sprintf("The prompt contains personal data (%s), which this API key may not send.", strings.Join(d.PII, ", "))}
			} else if masked, err := MaskBody(endpoint, body, s.d.PII); err == nil {
				d.Body = masked
				// The classifier judges what the engine will see.
				for i := range segs {
					segs[i].Text, _ = s.d.PII(segs[i].Text)
				}
			}
		}
	}
	if d.Policy.Mode == registry.AdmissionOff || s.d.Classifier == nil || d.Refusal != nil {
		return d
	}
	v, err := s.d.Classifier.Classify(ctx, segs)
	if err != nil {
		// A classifier that fails admits: availability over judgement; the
		// failure is logged (never the prompt) and counted as unjudged.
		s.log.Warn("admission classifier failed; request admitted unjudged", "tenant", key.Tenant, "err", err)
		return d
	}
	d.Judged, d.Verdict = true, v
	d.Malicious = v.Malicious
	if d.Policy.Threshold > 0 {
		d.Malicious = v.Score >= d.Policy.Threshold && v.Category != ""
	}
	switch {
	case !d.Malicious:
		d.Action = events.AdmissionAllowed
	case d.Policy.Mode == registry.AdmissionBlock:
		d.Action = events.AdmissionBlocked
		d.Refusal = &contracts.Error{Status: http.StatusForbidden, Type: contracts.TypeInvalidRequest, Code: contracts.CodeMaliciousPrompt,
			Message: fmt.Sprintf("The request was refused by admission: its prompt was judged malicious (category %s, score %.2f).", v.Category, v.Score)}
	default:
		d.Action = events.AdmissionFlagged
	}
	return d
}

// piiKinds is the kinds of personal data in segs, sorted and unique.
func piiKinds(mask PIIMasker, segs []guard.Segment) []string {
	var kinds []string
	for _, sg := range segs {
		_, ks := mask(sg.Text)
		for _, k := range ks {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	slices.Sort(kinds)
	return kinds
}

// MaskBody is body with the text of every message (every string content
// and text part) or of the prompt rewritten by mask; every other field is
// kept as it was.
func MaskBody(endpoint string, body []byte, mask PIIMasker) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	field := "messages"
	if endpoint == events.EndpointCompletions {
		field = "prompt"
	}
	raw, ok := m[field]
	if !ok {
		return body, nil
	}
	var out json.RawMessage
	var err error
	if field == "prompt" {
		out, err = maskContent(raw, mask)
	} else {
		var msgs []map[string]json.RawMessage
		if err := json.Unmarshal(raw, &msgs); err != nil {
			return nil, err
		}
		for _, msg := range msgs {
			if c, ok := msg["content"]; ok {
				if msg["content"], err = maskContent(c, mask); err != nil {
					return nil, err
				}
			}
		}
		out, err = marshalNoEscape(msgs)
	}
	if err != nil {
		return nil, err
	}
	m[field] = out
	return marshalNoEscape(m)
}

// maskContent masks a content or prompt value: a string, a list of
// strings, or a list of parts with "text".
func maskContent(raw json.RawMessage, mask PIIMasker) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return raw, nil
	}
	switch t[0] {
	case '"':
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return nil, err
		}
		ms, _ := mask(s)
		return marshalNoEscape(ms)
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(t, &items); err != nil {
			return nil, err
		}
		for i, it := range items {
			it = bytes.TrimSpace(it)
			if len(it) == 0 {
				continue
			}
			switch it[0] {
			case '"':
				c, err := maskContent(it, mask)
				if err != nil {
					return nil, err
				}
				items[i] = c
			case '{':
				var part map[string]json.RawMessage
				if err := json.Unmarshal(it, &part); err != nil {
					return nil, err
				}
				if txt, ok := part["text"]; ok {
					c, err := maskContent(txt, mask)
					if err != nil {
						return nil, err
					}
					part["text"] = c
					if items[i], err = marshalNoEscape(part); err != nil {
						return nil, err
					}
				}
			}
		}
		return marshalNoEscape(items)
	}
	return raw, nil
}

func marshalNoEscape(v any) ([]byte, error) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// admit is the admission step of the generation path, before any budget
// hold or worker call: it judges c, answers a block, and otherwise
// returns c to serve (its body masked, the verdict of a flagged prompt in
// the response header and in the headers to the worker). Every verdict is
// published as an events.AdmissionVerdictV1, off the request's path.
func (s *Service) admit(w http.ResponseWriter, r *http.Request, c Call) (Call, *refusal) {
	start := time.Now()
	d := s.Judge(r.Context(), c.Key, c.Endpoint, c.Body, c.Segments)
	if !d.Judged && d.PIIAction == "" {
		return c, nil
	}
	c.requestID = newRequestID()
	g := s.d.Metrics.guard
	g.latency.Observe(time.Since(start).Seconds())
	if d.Action != "" {
		g.verdicts.WithLabelValues(d.Action, categoryLabel(d.Verdict.Category)).Inc()
	}
	if d.PIIAction != "" {
		g.verdicts.WithLabelValues("pii_"+d.PIIAction, "").Inc()
	}
	s.queueVerdict(c, d)
	if d.Refusal != nil {
		w.Header().Set("X-Request-Id", c.requestID)
		return c, &refusal{Error: d.Refusal, model: c.Request.Model}
	}
	c.Body = d.Body
	if d.Action == events.AdmissionFlagged {
		score := strconv.FormatFloat(d.Verdict.Score, 'f', 2, 64)
		w.Header().Set(HeaderAdmission, "flagged; category="+d.Verdict.Category+"; score="+score)
		if c.Bridge == nil {
			c.Bridge = map[string]string{}
		}
		c.Bridge[bridge.HdrAdmissionAction] = events.AdmissionFlagged
		c.Bridge[bridge.HdrAdmissionCategory] = d.Verdict.Category
		c.Bridge[bridge.HdrAdmissionScore] = strconv.FormatFloat(d.Verdict.Score, 'g', -1, 64)
	}
	return c, nil
}

// queueVerdict hands the verdict event of a judged request to the
// publisher; a full queue drops it (counted).
func (s *Service) queueVerdict(c Call, d Decision) {
	action := d.Action
	if action == "" { // PII only
		action = events.AdmissionAllowed
		if d.Refusal != nil {
			action = events.AdmissionBlocked
		}
	}
	v := events.AdmissionVerdictV1{
		RequestID: c.requestID, Tenant: c.Key.Tenant, KeyID: c.Key.ID, Model: c.Request.Model, Endpoint: orDefault(c.Operation, c.Endpoint),
		Action: action, Category: d.Verdict.Category, Score: min(max(d.Verdict.Score, 0), 1), Classifier: d.Verdict.Classifier,
		PII: d.PII, PIIAction: d.PIIAction, At: time.Now().UTC(),
	}
	select {
	case s.verdicts <- v:
	default:
		s.d.Metrics.guard.dropped.Inc()
	}
}

// publishVerdicts publishes queued verdict events until done ends.
func (s *Service) publishVerdicts(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case v := <-s.verdicts:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := events.Publish(ctx, s.d.JS, v, events.Envelope{ID: v.RequestID, Source: s.d.InstanceID, Tenant: v.Tenant})
			cancel()
			if err != nil {
				s.log.Warn("admission verdict not published", "request_id", v.RequestID, "tenant", v.Tenant, "err", err)
			}
		}
	}
}
