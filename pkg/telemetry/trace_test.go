package telemetry

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceContextRoundTrip(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)

	h := nats.Header{}
	Propagator.Inject(ctx, NATSCarrier(h))
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := h.Get("traceparent"); got != want {
		t.Fatalf("injected %q, want %q", got, want)
	}
	if got := TraceParent(ctx); got != want {
		t.Fatalf("TraceParent = %q", got)
	}
	back := trace.SpanContextFromContext(Propagator.Extract(context.Background(), NATSCarrier(h)))
	if back.TraceID() != tid || back.SpanID() != sid {
		t.Fatalf("extracted %v", back)
	}
	// Headers that went through an HTTP hop come back canonicalised.
	h2 := nats.Header{"Traceparent": []string{want}}
	if got := trace.SpanContextFromContext(Propagator.Extract(context.Background(), NATSCarrier(h2))); got.TraceID() != tid {
		t.Fatal("canonical header name not read")
	}
	if TraceParent(context.Background()) != "" {
		t.Fatal("traceparent without a span")
	}
}
