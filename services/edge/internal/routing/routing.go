// Package routing serves routers: model names whose requests go to the
// model, or the HTTP tool, of the route class their prompt falls in
// (semantic-router style). A class is picked by the X-AI-Route header, else
// by comparing the prompt (the last user message) with each class's
// examples: lexically (pkg/lexical terms, tf-idf cosine) by default, by
// embeddings through the workers when the router names an embedding model.
// The best class wins unless its similarity is below the router's
// threshold, then the default class does. A model class goes on through
// the normal inference path; a tool class is answered here (ServeTool).
package routing

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/embedding"
	"github.com/aiforge/aiforge/pkg/lexical"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Request and response headers.
const (
	// HeaderRoute picks a route class by name.
	HeaderRoute = "X-AI-Route"
	// HeaderRouteClass names the class that served a routed request.
	HeaderRouteClass = "X-Aiforge-Route-Class"
	// HeaderRouter names the router a request went through.
	HeaderRouter = "X-Aiforge-Router"
)

// Defaults of Deps.
const (
	DefaultToolTimeout = 10 * time.Second
	DefaultToolMaxBody = 1 << 20
)

// Deps are what routing needs.
type Deps struct {
	Directory *directory.View
	// Embed asks embedding models through the workers (the edge's bridge
	// client: its endpoint embeddings); needed for routers with an
	// EmbeddingModel.
	Embed *bridge.Client
	// JS publishes the usage of tool answers.
	JS         jetstream.JetStream
	InstanceID string
	Logger     *slog.Logger
	// HTTP calls tools; default a client with ToolTimeout.
	HTTP *http.Client
	// ToolTimeout bounds a tool's answer; ToolMaxBody its size.
	ToolTimeout time.Duration
	ToolMaxBody int64
}

// Service picks route classes and serves tools.
type Service struct {
	d  Deps
	an *lexical.Analyzer

	mu       sync.Mutex
	compiled map[string]*compiled // by router name
}

// New builds the routing service.
func New(d Deps) *Service {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.ToolTimeout <= 0 {
		d.ToolTimeout = DefaultToolTimeout
	}
	if d.ToolMaxBody <= 0 {
		d.ToolMaxBody = DefaultToolMaxBody
	}
	if d.HTTP == nil {
		d.HTTP = &http.Client{Timeout: d.ToolTimeout}
	}
	return &Service{d: d, an: lexical.NewEnglish(), compiled: map[string]*compiled{}}
}

// Router is the router name, if it is one.
func (s *Service) Router(name string) (registry.Router, bool) {
	if s == nil || s.d.Directory == nil {
		return registry.Router{}, false
	}
	return s.d.Directory.Router(name)
}

// Decision is the route class a request goes to.
type Decision struct {
	Router string
	Class  string
	// Model is the class's model; "" for a tool class.
	Model string
	Tool  *registry.Tool
	// Score is the prompt's similarity to the class (1 when the header
	// chose it; 0 when the default was taken for lack of a match).
	Score float64
}

// Caller names who spends an embedding of the prompt.
type Caller struct{ Tenant, KeyID string }

// Pick chooses rt's class for a request: the X-AI-Route header's, else the
// classifier's.
func (s *Service) Pick(ctx context.Context, rt registry.Router, h http.Header, body []byte, who Caller) (Decision, *contracts.Error) {
	if name := strings.TrimSpace(h.Get(HeaderRoute)); name != "" {
		c, ok := rt.Class(name)
		if !ok {
			return Decision{}, contracts.ErrUnknownRouteClass(rt.Name, name, rt.ClassNames())
		}
		return decision(rt, c, 1), nil
	}
	best, score, err := s.classify(ctx, rt, LastUserText(body), who)
	if err != nil {
		s.d.Logger.Warn("route classification failed; taking the default class", "router", rt.Name, "err", err)
	}
	if best == "" || score < rt.Threshold || err != nil {
		c, _ := rt.Class(rt.Default)
		return decision(rt, c, 0), nil
	}
	c, _ := rt.Class(best)
	return decision(rt, c, score), nil
}

func decision(rt registry.Router, c registry.RouteClass, score float64) Decision {
	return Decision{Router: rt.Name, Class: c.Name, Model: c.Model, Tool: c.Tool, Score: score}
}

// compiled is a router's examples made ready for comparison.
type compiled struct {
	fingerprint [32]byte
	// idf of the examples' terms, for lexical comparison.
	idf      map[string]float64
	docs     float64
	lexical  [][]Terms     // per class, per example
	dense    [][][]float32 // per class, per example (embedding routers)
	embedded bool
}

func fingerprint(rt registry.Router) [32]byte {
	b, _ := json.Marshal(rt)
	return sha256.Sum256(b)
}

func (c *compiled) idfOf(t string) float64 {
	if v, ok := c.idf[t]; ok {
		return v
	}
	return math.Log(1 + c.docs) // a term no example has
}

// compile builds (or reuses) rt's lexical vectors.
func (s *Service) compile(rt registry.Router) *compiled {
	fp := fingerprint(rt)
	s.mu.Lock()
	c := s.compiled[rt.Name]
	s.mu.Unlock()
	if c != nil && c.fingerprint == fp {
		return c
	}
	c = &compiled{fingerprint: fp, idf: map[string]float64{}}
	df := map[string]int{}
	for _, cl := range rt.Classes {
		for _, e := range cl.Examples {
			c.docs++
			tf, _ := s.an.TermFreqs(e)
			for t := range tf {
				df[t]++
			}
		}
	}
	for t, n := range df {
		c.idf[t] = math.Log(1 + c.docs/float64(n))
	}
	c.lexical = make([][]Terms, len(rt.Classes))
	for i, cl := range rt.Classes {
		for _, e := range cl.Examples {
			c.lexical[i] = append(c.lexical[i], LexicalVector(s.an, e, c.idfOf))
		}
	}
	s.mu.Lock()
	s.compiled[rt.Name] = c
	s.mu.Unlock()
	return c
}

// classify returns the class most similar to prompt and its similarity:
// the best cosine between the prompt and one of the class's examples.
func (s *Service) classify(ctx context.Context, rt registry.Router, prompt string, who Caller) (string, float64, error) {
	if strings.TrimSpace(prompt) == "" {
		return "", 0, nil
	}
	c := s.compile(rt)
	if rt.EmbeddingModel != "" {
		return s.classifyDense(ctx, rt, c, prompt, who)
	}
	v := LexicalVector(s.an, prompt, c.idfOf)
	best, score := "", 0.0
	for i, cl := range rt.Classes {
		for _, e := range c.lexical[i] {
			if sim := CosineTerms(v, e); sim > score {
				best, score = cl.Name, sim
			}
		}
	}
	return best, score, nil
}

func (s *Service) classifyDense(ctx context.Context, rt registry.Router, c *compiled, prompt string, who Caller) (string, float64, error) {
	if s.d.Embed == nil {
		return "", 0, fmt.Errorf("router %q: no embedding client", rt.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s.mu.Lock()
	embedded := c.embedded
	s.mu.Unlock()
	if !embedded {
		// The examples are embedded once per router version, spent by the
		// caller that first needed them.
		var inputs []string
		for _, cl := range rt.Classes {
			inputs = append(inputs, cl.Examples...)
		}
		vecs, err := embedding.Embed(ctx, s.d.Embed, embedding.Request{Model: rt.EmbeddingModel, Tenant: who.Tenant, KeyID: who.KeyID, Inputs: inputs})
		if err != nil {
			return "", 0, fmt.Errorf("embedding the examples: %w", err)
		}
		dense := make([][][]float32, len(rt.Classes))
		k := 0
		for i, cl := range rt.Classes {
			for range cl.Examples {
				dense[i] = append(dense[i], vecs[k])
				k++
			}
		}
		s.mu.Lock()
		c.dense, c.embedded = dense, true
		s.mu.Unlock()
	}
	vecs, err := embedding.Embed(ctx, s.d.Embed, embedding.Request{Model: rt.EmbeddingModel, Tenant: who.Tenant, KeyID: who.KeyID, Inputs: []string{prompt}})
	if err != nil {
		return "", 0, fmt.Errorf("embedding the prompt: %w", err)
	}
	best, score := "", 0.0
	for i, cl := range rt.Classes {
		for _, e := range c.dense[i] {
			if sim := CosineDense(vecs[0], e); sim > score {
				best, score = cl.Name, sim
			}
		}
	}
	return best, score, nil
}
