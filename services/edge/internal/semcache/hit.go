package semcache

import (
	"net/http"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/services/edge/internal/routing"
)

// Answer describes the request a hit answers.
type Answer struct {
	RequestID    string
	Stream       bool
	IncludeUsage bool
	Start        time.Time
	// Router and RouteClass, when the request was routed.
	Router, RouteClass string
}

// ServeHit answers the probe's hit: the stored body, or, for a stream,
// the answer re-streamed as chunks in OpenAI's shape (with the usage chunk
// when asked), with HeaderCache; and publishes its usage: every prompt
// token cached, no completion tokens, reported by this edge.
func (p *Probe) ServeHit(w http.ResponseWriter, a Answer) {
	e := p.Hit
	w.Header().Set(HeaderCache, p.Kind)
	w.Header().Set("X-Request-Id", a.RequestID)
	if a.Stream {
		comp, ok := routing.ParseCompletion(e.Body)
		if !ok { // stored only when it parses; a foreign entry is answered as is
			routing.WriteBody(w, e.Body)
		} else {
			routing.Write(w, comp, true, a.IncludeUsage)
		}
	} else {
		routing.WriteBody(w, e.Body)
	}
	v1 := events.UsageRecordedV1{
		RequestID: a.RequestID, Tenant: p.q.Tenant, KeyID: p.q.KeyID, Model: p.q.Model, Endpoint: events.EndpointChatCompletions,
		Stream: a.Stream, PromptTokens: e.PromptTokens, CachedPromptTokens: e.PromptTokens, Status: events.UsageStatusOK,
		LatencyMS: float64(time.Since(a.Start).Microseconds()) / 1000, Reporter: p.c.d.InstanceID,
		StartedAt: a.Start.UTC(), FinishedAt: time.Now().UTC(),
	}
	ev := events.UsageRecordedV4{UsageRecordedV3: events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: v1}},
		Router: a.Router, RouteClass: a.RouteClass, Cache: p.Kind}
	routing.PublishUsage(p.c.d.JS, p.c.d.Logger, ev, p.c.d.InstanceID)
}
