package registry

import (
	"errors"
	"fmt"
)

// Admission modes (AdmissionPolicy.Mode).
const (
	// AdmissionOff admits every prompt unjudged.
	AdmissionOff = "off"
	// AdmissionFlag serves a malicious-looking prompt and says so (a
	// response header, the usage event, a verdict event).
	AdmissionFlag = "flag"
	// AdmissionBlock refuses a malicious-looking prompt with 403
	// malicious_prompt before any worker sees it; the default of new
	// tenants.
	AdmissionBlock = "block"
)

// PII policies (AdmissionPolicy.PII).
const (
	PIIOff   = "off"
	PIIMask  = "mask"
	PIIBlock = "block"
)

// AdmissionPolicy is what the edge does with a tenant's (or a key's)
// prompts before they reach an engine or a log. Empty fields of a key's
// policy inherit the tenant's; a tenant without a policy (one created
// before admission existed) is AdmissionOff.
type AdmissionPolicy struct {
	Mode string `json:"mode,omitempty"`
	// PII is PIIOff (default), PIIMask (emails, phone numbers, IBANs, card
	// numbers and API keys replaced before the engine sees them) or
	// PIIBlock (such a prompt is refused).
	PII string `json:"pii,omitempty"`
	// Threshold is the score from which a prompt counts as malicious (0:
	// the classifier's own).
	Threshold float64 `json:"threshold,omitempty"`
}

// Validate checks a policy.
func (p AdmissionPolicy) Validate() error {
	var errs []error
	switch p.Mode {
	case "", AdmissionOff, AdmissionFlag, AdmissionBlock:
	default:
		errs = append(errs, fmt.Errorf("admission mode %q is not one of off, flag, block", p.Mode))
	}
	switch p.PII {
	case "", PIIOff, PIIMask, PIIBlock:
	default:
		errs = append(errs, fmt.Errorf("pii %q is not one of off, mask, block", p.PII))
	}
	if !(p.Threshold >= 0 && p.Threshold <= 1) {
		errs = append(errs, errors.New("threshold must be between 0 and 1"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// EffectiveAdmission is the policy for a request of key k of tenant t:
// the key's fields where set, else the tenant's, else off.
func EffectiveAdmission(t *Tenant, k *Key) AdmissionPolicy {
	var p AdmissionPolicy
	if t != nil && t.Admission != nil {
		p = *t.Admission
	}
	if k != nil && k.Admission != nil {
		if k.Admission.Mode != "" {
			p.Mode = k.Admission.Mode
		}
		if k.Admission.PII != "" {
			p.PII = k.Admission.PII
		}
		if k.Admission.Threshold != 0 {
			p.Threshold = k.Admission.Threshold
		}
	}
	if p.Mode == "" {
		p.Mode = AdmissionOff
	}
	if p.PII == "" {
		p.PII = PIIOff
	}
	return p
}

// CachePolicy opts a model into the semantic cache.
type CachePolicy struct {
	Enabled bool `json:"enabled"`
	// TTL is how long an answer is kept (0: one hour).
	TTL Duration `json:"ttl,omitempty"`
	// Similarity, when above 0, also answers a prompt whose similarity to
	// a cached one is at least this (cosine of embeddings through
	// EmbeddingModel when set, else lexical); 0 answers exact repeats only.
	Similarity     float64 `json:"similarity,omitempty"`
	EmbeddingModel string  `json:"embedding_model,omitempty"`
	// MaxTemperature is the highest temperature a request may ask for and
	// still be cached or answered from the cache (default 0: only
	// temperature 0; a request without temperature counts as the
	// engine's default, 1, and is not cached).
	MaxTemperature float64 `json:"max_temperature,omitempty"`
}

// Router is a model name whose requests go to the model (or tool) of the
// route class their prompt falls in (semantic-router style): each class
// has example utterances; the X-AI-Route header picks a class by name.
type Router struct {
	Name    string       `json:"name"`
	Classes []RouteClass `json:"classes"`
	// Default is the class of a prompt no class matches (Threshold).
	Default string `json:"default"`
	// Threshold is the similarity a prompt needs to its best class's
	// examples to go there rather than to Default (0: always the best).
	Threshold float64 `json:"threshold,omitempty"`
	// EmbeddingModel, when set, compares by embeddings through the
	// workers; else lexically.
	EmbeddingModel string `json:"embedding_model,omitempty"`
}

// RouteClass is one class of a Router: a model or a tool.
type RouteClass struct {
	Name     string   `json:"name"`
	Model    string   `json:"model,omitempty"`
	Tool     *Tool    `json:"tool,omitempty"`
	Examples []string `json:"examples"`
}

// Tool is an HTTP endpoint that answers a route class deterministically
// instead of a model: it receives the chat request and answers JSON
// {"content": "..."} (or a whole chat completion), which the edge returns
// in the chat completion shape.
type Tool struct {
	URL string `json:"url"`
}
