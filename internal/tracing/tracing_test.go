package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/aiforge/aiforge/internal/tracing/otlptest"
)

// clearEnv unsets every OTEL_ variable for the test (the exporters read the
// process environment themselves).
func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
			_ = os.Unsetenv(k)
		}
	}
}

func setup(t *testing.T, name string) (*Provider, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	p, err := Setup(context.Background(), Config{ServiceName: name, Getenv: os.Getenv, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p, &logs
}

func TestNoEndpointExportsNothing(t *testing.T) {
	clearEnv(t)
	p, logs := setup(t, "aiforge")
	if p.Exporting {
		t.Fatal("exporting without an endpoint")
	}
	_, span := p.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	// aiforge's own span ids still go downstream (and sampled, by default).
	if !span.SpanContext().IsValid() || !span.SpanContext().IsSampled() {
		t.Fatalf("span context %v", span.SpanContext())
	}
	if logs.Len() != 0 {
		t.Fatalf("logged %q", logs)
	}
}

func waitSpans(t *testing.T, c *otlptest.Collector, n int) []otlptest.Span {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s := c.Spans(); len(s) >= n {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("collector got %d spans, want %d", len(c.Spans()), n)
	return nil
}

func TestExportGRPC(t *testing.T) {
	clearEnv(t)
	c := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.GRPCEndpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	p, logs := setup(t, "aiforge-edge")
	if !p.Exporting || p.Protocol != ProtocolGRPC {
		t.Fatalf("provider %+v", p)
	}
	_, span := p.Tracer("scope-a").Start(context.Background(), "op", trace.WithSpanKind(trace.SpanKindServer))
	span.End()
	if err := p.Shutdown(context.Background()); err != nil { // flushes
		t.Fatal(err)
	}
	got := waitSpans(t, c, 1)
	if got[0].Service != "aiforge-edge" || got[0].Scope != "scope-a" || got[0].Name != "op" || got[0].Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("span %+v", got[0])
	}
	if !strings.Contains(logs.String(), "protocol=grpc") {
		t.Fatalf("logs %q", logs)
	}
}

func TestExportHTTPWithHeadersNeverLogged(t *testing.T) {
	clearEnv(t)
	c := otlptest.Start(t)
	const secret = "s3cret-collector-token"
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.HTTPEndpoint+"/v1/traces")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20"+secret+",x-tenant=ops")
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	p, logs := setup(t, "aiforge")
	_, span := p.Tracer("t").Start(context.Background(), "http-op")
	span.End()
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := waitSpans(t, c, 1)
	if got[0].Service != "from-env" || got[0].Name != "http-op" {
		t.Fatalf("span %+v", got[0])
	}
	h := c.HTTPHeaders()
	if len(h) == 0 || h[0]["Authorization"][0] != "Bearer "+secret {
		t.Fatalf("collector headers %v", h)
	}
	if strings.Contains(logs.String(), secret) || !strings.Contains(logs.String(), "authorization") {
		t.Fatalf("logs %q: want header names, never values", logs)
	}
}

func TestSamplerFromEnv(t *testing.T) {
	clearEnv(t)
	c := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.HTTPEndpoint)
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0")
	p, _ := setup(t, "aiforge")
	_, root := p.Tracer("t").Start(context.Background(), "dropped")
	root.End()
	if root.SpanContext().IsSampled() || root.IsRecording() {
		t.Fatal("a root span was sampled at ratio 0")
	}
	// A sampled remote parent is followed (parentbased).
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	parent := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	_, child := p.Tracer("t").Start(parent, "kept")
	child.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := waitSpans(t, c, 1)
	if len(got) != 1 || got[0].Name != "kept" || got[0].ParentID != "00f067aa0ba902b7" {
		t.Fatalf("exported %+v", got)
	}
}

func TestDisabledAndBadConfig(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	p, _ := setup(t, "aiforge")
	if p.Exporting {
		t.Fatal("exporting while disabled")
	}
	if _, ok := p.TracerProvider.(*sdktrace.TracerProvider); ok {
		t.Fatal("an SDK provider while disabled")
	}
	t.Setenv("OTEL_SDK_DISABLED", "")
	for k, v := range map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_TRACES_EXPORTER": "zipkin", "OTEL_SDK_DISABLED": "maybe"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, v)
			if _, err := Setup(context.Background(), Config{Getenv: os.Getenv}); err == nil || !strings.Contains(err.Error(), v) {
				t.Fatalf("%s=%s: err %v", k, v, err)
			}
		})
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	p, _ = setup(t, "aiforge")
	if p.Exporting {
		t.Fatal("exporting with OTEL_TRACES_EXPORTER=none")
	}
}
