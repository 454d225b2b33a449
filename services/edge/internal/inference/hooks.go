package inference

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/tokens"
	"github.com/aiforge/aiforge/services/edge/internal/routing"
	"github.com/aiforge/aiforge/services/edge/internal/semcache"
)

// The hooks of routers (Deps.Routes) and of the semantic cache
// (Deps.Cache) in the generation path: routeClass before the model is
// resolved, lookupCache after rate limits and before budgets, and the
// answer kept by keepAnswer/cacheSink.

// routeClass resolves a request for a router: the key must be allowed the
// router; the class's model then serves it (headers, bridge headers and
// usage name router and class), or the class's tool answers here (handled).
func (s *Service) routeClass(w http.ResponseWriter, r *http.Request, c *Call, out Renderer) (handled bool, ref *refusal) {
	rt, ok := s.d.Routes.Router(c.Request.Model)
	if !ok {
		return false, nil
	}
	if !c.Key.Allows(rt.Name) {
		return false, &refusal{Error: contracts.ErrModelNotAllowed(rt.Name)}
	}
	dec, apiErr := s.d.Routes.Pick(r.Context(), rt, r.Header, c.Body, routing.Caller{Tenant: c.Key.Tenant, KeyID: c.Key.ID})
	if apiErr != nil {
		return false, &refusal{Error: apiErr}
	}
	w.Header().Set(routing.HeaderRouter, dec.Router)
	w.Header().Set(routing.HeaderRouteClass, dec.Class)
	if dec.Tool != nil {
		if _, isOpenAI := out.(openAI); !isOpenAI || c.Endpoint != events.EndpointChatCompletions {
			return false, &refusal{Error: contracts.ErrBadRequest("model", contracts.CodeInvalidRequest,
				"The route class '"+dec.Class+"' is answered by a tool, which serves chat completions only.")}
		}
		id := newRequestID()
		w.Header().Set("X-Request-Id", id)
		e := s.d.Routes.ServeTool(w, r, routing.ToolCall{Decision: dec, Tenant: c.Key.Tenant, KeyID: c.Key.ID, RequestID: id,
			Body: c.Body, Stream: c.Request.Stream, IncludeUsage: c.Request.IncludeUsage, Start: c.Start})
		status := http.StatusOK
		if e != nil {
			status = e.Status
			s.d.Metrics.errors.WithLabelValues(s.label(rt.Name), e.Code).Inc()
		}
		s.d.Metrics.requests.WithLabelValues(s.label(rt.Name), c.Operation, strconv.Itoa(status)).Inc()
		return true, nil
	}
	c.Router, c.RouteClass, c.Request.Model = dec.Router, dec.Class, dec.Model
	return false, nil
}

// lookupCache answers c from the semantic cache when its model opted in
// and the cache has its answer (handled); on a miss it leaves c.probe set
// so that the answer is kept.
func (s *Service) lookupCache(w http.ResponseWriter, r *http.Request, c *Call, out Renderer) bool {
	if s.d.Cache == nil || c.Endpoint != events.EndpointChatCompletions {
		return false
	}
	if _, isOpenAI := out.(openAI); !isOpenAI {
		return false
	}
	m, ok := s.d.Directory.Served(c.Request.Model)
	if !ok || m.Cache == nil || !m.Cache.Enabled {
		return false
	}
	p := s.d.Cache.Lookup(r.Context(), semcache.Query{Tenant: c.Key.Tenant, KeyID: c.Key.ID, Model: c.Request.Model, Body: c.Body, Policy: *m.Cache})
	if p == nil {
		return false
	}
	if p.Hit == nil {
		c.probe = p
		return false
	}
	w.Header().Set(HeaderModelServed, c.Request.Model)
	p.ServeHit(w, semcache.Answer{RequestID: newRequestID(), Stream: c.Request.Stream, IncludeUsage: c.Request.IncludeUsage, Start: c.Start,
		Router: c.Router, RouteClass: c.RouteClass})
	s.d.Metrics.requests.WithLabelValues(c.Request.Model, c.Operation, "200").Inc()
	s.d.Metrics.duration.WithLabelValues(c.Request.Model, c.Operation).Observe(time.Since(c.Start).Seconds())
	return true
}

// routeHeaders adds the router and class to the bridge headers, for the
// worker's usage event.
func routeHeaders(c Call, hdr nats.Header) {
	if c.Router != "" {
		hdr.Set(bridge.HdrRouter, c.Router)
		hdr.Set(bridge.HdrRouteClass, c.RouteClass)
	}
}

// cacheSink wraps a stream's sink to rebuild the answer for the cache.
func cacheSink(c Call, sink func([]byte) error) (func([]byte) error, *routing.StreamAssembler) {
	if c.probe == nil || !c.Request.Stream {
		return sink, nil
	}
	a := &routing.StreamAssembler{MaxBytes: semcache.MaxEntryBytes}
	return func(p []byte) error {
		a.Add(p)
		return sink(p)
	}, a
}

// keepAnswer stores a successful, complete answer of a cacheable request:
// the body (status 200), or the stream rebuilt by a (nil when not one), and
// only when it was answered by the requested model (not a fallback).
func (s *Service) keepAnswer(c Call, served string, status int, body []byte, a *routing.StreamAssembler) {
	if c.probe == nil || served != c.Request.Model {
		return
	}
	var comp routing.Completion
	var ok bool
	if a != nil {
		comp, ok = a.Completion()
	} else if status == http.StatusOK {
		comp, ok = routing.ParseCompletion(body)
	}
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.probe.Store(ctx, comp, tokens.EstimatePrompt(c.Endpoint, c.Body))
}
