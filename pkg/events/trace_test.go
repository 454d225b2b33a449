package events

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/telemetry"
)

// TestConsumerSpanContinuesPublisherTrace: a handler's consumer span is a
// child of the publisher's span, and what the handler publishes carries
// that span on, so a chain of services is one trace.
func TestConsumerSpanContinuesPublisherTrace(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	forwarded := make(chan string, 1)
	c := newConsumer(t, js, ConsumerConfig{Durable: "usage-ledger", Tracer: tp.Tracer("test")},
		func(hctx context.Context, env Envelope, ev Event) error {
			forwarded <- telemetry.TraceParent(hctx)
			return nil
		})
	start(t, c)

	pctx, parent := tp.Tracer("test").Start(ctx, "publisher")
	if _, err := Publish(pctx, js, usage(1), Envelope{ID: "traced-1", Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var inHandler string
	select {
	case inHandler = <-forwarded:
	case <-ctx.Done():
		t.Fatal("not handled")
	}
	eventually(t, "consumer span ended", func() bool { return len(rec.Ended()) == 2 })
	var consumer sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "usage-ledger process" {
			consumer = s
		}
	}
	if consumer == nil {
		t.Fatalf("no consumer span among %d", len(rec.Ended()))
	}
	if consumer.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kind %v", consumer.SpanKind())
	}
	if consumer.Parent().SpanID() != parent.SpanContext().SpanID() || consumer.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("consumer span parent %v, want the publisher's span %v", consumer.Parent(), parent.SpanContext())
	}
	want := "00-" + consumer.SpanContext().TraceID().String() + "-" + consumer.SpanContext().SpanID().String() + "-01"
	if inHandler != want {
		t.Errorf("handler context traceparent %q, want the consumer span %q", inHandler, want)
	}
	attrs := map[string]string{}
	for _, kv := range consumer.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["messaging.system"] != "nats" || attrs["aiforge.tenant.id"] != "acme" || attrs["messaging.message.id"] != "traced-1" {
		t.Errorf("attributes %v", attrs)
	}
}

// TestHandlerWithoutTracerKeepsRemoteParent: without a Tracer the handler's
// context still carries the publisher's span context.
func TestHandlerWithoutTracerKeepsRemoteParent(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	got := make(chan string, 1)
	c := newConsumer(t, js, ConsumerConfig{Durable: "usage-ledger"}, func(hctx context.Context, env Envelope, ev Event) error {
		got <- telemetry.TraceParent(hctx)
		return nil
	})
	start(t, c)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if _, err := Publish(ctx, js, usage(1), Envelope{ID: "traced-2", TraceParent: tp}); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v != tp {
			t.Fatalf("handler traceparent %q, want %q", v, tp)
		}
	case <-ctx.Done():
		t.Fatal("not handled")
	}
}
