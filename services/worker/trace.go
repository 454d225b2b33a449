package worker

import (
	"context"
	"net/textproto"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// propagator reads and writes W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// natsCarrier adapts nats.Header to propagation.TextMapCarrier. NATS header
// names are case-sensitive; the bridge writes "traceparent" in lower case,
// as W3C names it, so Get tries that exact name first, then the canonical
// HTTP form ("Traceparent").
type natsCarrier nats.Header

var _ propagation.TextMapCarrier = natsCarrier(nil)

func (c natsCarrier) Get(key string) string {
	if v := nats.Header(c)[key]; len(v) > 0 {
		return v[0]
	}
	return nats.Header(c).Get(textproto.CanonicalMIMEHeaderKey(key))
}

func (c natsCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

func (c natsCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// traceParentOf returns the traceparent header value for the span in ctx,
// or "" when there is none.
func traceParentOf(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	var carrier singleCarrier
	propagator.Inject(ctx, &carrier)
	return carrier.traceparent
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
