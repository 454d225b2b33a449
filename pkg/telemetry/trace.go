// Package telemetry carries OpenTelemetry trace context across the bus, so a
// trace runs from the client through the edge and the worker to the engine.
package telemetry

import (
	"context"
	"net/textproto"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Propagator reads and writes W3C trace context (traceparent, tracestate).
var Propagator = propagation.TraceContext{}

// NATSCarrier adapts nats.Header to propagation.TextMapCarrier. NATS header
// names are case-sensitive; aiforge writes "traceparent" in lower case, as
// W3C names it, so Get tries that exact name first, then the canonical HTTP
// form ("Traceparent").
type NATSCarrier nats.Header

var _ propagation.TextMapCarrier = NATSCarrier(nil)

// Get implements propagation.TextMapCarrier.
func (c NATSCarrier) Get(key string) string {
	if v := nats.Header(c)[key]; len(v) > 0 {
		return v[0]
	}
	return nats.Header(c).Get(textproto.CanonicalMIMEHeaderKey(key))
}

// Set implements propagation.TextMapCarrier.
func (c NATSCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys implements propagation.TextMapCarrier.
func (c NATSCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// TraceParent returns the traceparent header value for the span in ctx, or
// "" when there is none.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c singleCarrier
	Propagator.Inject(ctx, &c)
	return c.traceparent
}

// singleCarrier captures traceparent without allocating a map.
type singleCarrier struct{ traceparent string }

func (c *singleCarrier) Get(string) string { return "" }
func (c *singleCarrier) Set(key, value string) {
	if key == "traceparent" {
		c.traceparent = value
	}
}
func (c *singleCarrier) Keys() []string { return nil }
