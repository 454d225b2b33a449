package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/tracing"
	"github.com/aiforge/aiforge/internal/tracing/otlptest"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/natstest"
)

// TestTracesExportedOverOTLP runs the edge, the workers, ingest, embedder
// and retriever as separate processes on one bus, each exporting over OTLP
// (gRPC) to an in-process collector, as `aiforge run` does from the OTEL_*
// environment. Each inference request is one trace spanning the edge, the
// worker and its engine call, with GenAI attributes; a document's trace
// spans ingest, embedder and retriever. No span carries the API key, the
// prompt or the document's text.
func TestTracesExportedOverOTLP(t *testing.T) {
	col := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.GRPCEndpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_SERVICE_NAME", "")

	ns := natstest.Server(t)
	_, base := sim(t, enginesim.Config{Models: []string{"up"}})
	dataDir := t.TempDir() // one object store for the edge and the document services
	var providers []*tracing.Provider
	start := func(target string) *stack {
		p, err := tracing.Setup(context.Background(), tracing.Config{ServiceName: "aiforge-" + target, Getenv: os.Getenv})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Exporting || p.Protocol != tracing.ProtocolGRPC {
			t.Fatalf("%s: provider %+v", target, p)
		}
		providers = append(providers, p)
		s := startStack(t, stackOpts{natsURL: ns.ClientURL(), targets: []string{target}, dataDir: dataDir, mutate: func(o *app.Options) { o.Tracer = p }})
		t.Cleanup(func() { _ = p.Shutdown(context.Background()) }) // after the stack stops (cleanups run last-in first-out)
		return s
	}
	edge := start("edge")
	for _, target := range []string{"workers", "ingest", "embedder", "retriever"} {
		start(target)
	}
	flush := func() {
		for _, p := range providers {
			if err := p.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}

	key, keyID := edge.tenantKey("acme")
	edge.register("chat", base, "up")
	edge.waitServed(key, "chat")

	// Two requests, streamed and not: one trace each.
	prompts := []string{"the orange heron counts quietly", "the violet badger counts loudly"}
	var reqIDs []string
	for i, prompt := range prompts {
		body := fmt.Sprintf(`{"model":"chat","messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":%t}`, prompt, 4+i, i == 0)
		reqIDs = append(reqIDs, streamRawAny(t, edge.url, key, body))
	}
	traces := map[string]string{} // request id -> trace id
	eventually(t, 20*time.Second, func() bool {
		flush()
		for _, s := range col.Spans() {
			if s.Name == "edge chat.completions" {
				traces[s.Attrs["aiforge.request_id"]] = s.TraceID
			}
		}
		for _, id := range reqIDs {
			tr := col.Trace(traces[id])
			if find(tr, "chat up") == nil || find(tr, "worker chat.completions") == nil {
				return false
			}
		}
		return true
	}, "the requests' traces")
	if traces[reqIDs[0]] == traces[reqIDs[1]] {
		t.Fatal("two requests share one trace")
	}
	for i, id := range reqIDs {
		tr := col.Trace(traces[id])
		e, w, g := find(tr, "edge chat.completions"), find(tr, "worker chat.completions"), find(tr, "chat up")
		if e.ParentID != "" || e.Service != "aiforge-edge" || e.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("request %d: edge span %+v", i, e)
		}
		if w.ParentID != e.SpanID || w.Service != "aiforge-workers" || w.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("request %d: worker span %+v, want a child of the edge's %s", i, w, e.SpanID)
		}
		if g.ParentID != w.SpanID || g.Service != "aiforge-workers" || g.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("request %d: engine span %+v, want a child of the worker's %s", i, g, w.SpanID)
		}
		want := map[*otlptest.Span]map[string]string{
			e: {"gen_ai.operation.name": "chat", "gen_ai.request.model": "chat", "gen_ai.response.model": "chat", "gen_ai.provider.name": "aiforge",
				"gen_ai.request.max_tokens": fmt.Sprint(4 + i), "aiforge.tenant.id": "acme", "aiforge.key.id": keyID},
			w: {"gen_ai.operation.name": "chat", "gen_ai.request.model": "chat", "gen_ai.usage.output_tokens": fmt.Sprint(4 + i),
				"gen_ai.response.finish_reasons": "length", "aiforge.tenant.id": "acme", "aiforge.key.id": keyID},
			g: {"gen_ai.operation.name": "chat", "gen_ai.request.model": "up", "gen_ai.response.model": "up",
				"gen_ai.usage.output_tokens": fmt.Sprint(4 + i), "gen_ai.response.finish_reasons": "length", "server.address": "127.0.0.1"},
		}
		for s, attrs := range want {
			for k, v := range attrs {
				if s.Attrs[k] != v {
					t.Errorf("request %d: span %q: %s = %q, want %q", i, s.Name, k, s.Attrs[k], v)
				}
			}
		}
		if g.Attrs["gen_ai.usage.input_tokens"] == "" || g.Attrs["gen_ai.usage.input_tokens"] == "0" {
			t.Errorf("request %d: engine span without input tokens: %v", i, g.Attrs)
		}
	}

	// A document: upload, add to a store, wait until it is searchable.
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(edge.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	const docText = "The lighthouse keeper logs every passing trawler."
	file, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("# Log\n\n"+docText), "log.md", "text/markdown"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := client.VectorStores.New(ctx, openai.VectorStoreNewParams{Name: openai.String("traced")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.VectorStores.Files.New(ctx, vs.ID, openai.VectorStoreFileNewParams{FileID: file.ID}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() bool {
		f, err := client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
		return err == nil && f.Status == openai.VectorStoreFileStatusCompleted
	}, "file indexed")
	var doc []otlptest.Span
	eventually(t, 20*time.Second, func() bool {
		flush()
		for _, s := range col.Spans() {
			if s.Name == "ingest process" && s.Attrs["aiforge.tenant.id"] == "acme" {
				doc = col.Trace(s.TraceID)
				return find(doc, "embedder process") != nil && find(doc, "retriever process") != nil
			}
		}
		return false
	}, "the document's trace")
	in, em, re := find(doc, "ingest process"), find(doc, "embedder process"), find(doc, "retriever process")
	if in.Service != "aiforge-ingest" || in.Kind != tracepb.Span_SPAN_KIND_CONSUMER || in.Attrs["messaging.system"] != "nats" {
		t.Errorf("ingest span %+v", in)
	}
	if em.ParentID != in.SpanID || em.Service != "aiforge-embedder" {
		t.Errorf("embedder span %+v, want a child of ingest's %s", em, in.SpanID)
	}
	if re.ParentID != em.SpanID || re.Service != "aiforge-retriever" {
		t.Errorf("retriever span %+v, want a child of the embedder's %s", re, em.SpanID)
	}

	// Nothing secret or private in any attribute of any span.
	all := col.Spans()
	for _, s := range all {
		for k, v := range s.Attrs {
			for _, private := range append([]string{key, docText, "lighthouse"}, prompts...) {
				if strings.Contains(v, private) {
					t.Errorf("span %q (%s) attribute %s holds %q", s.Name, s.Service, k, private)
				}
			}
		}
	}
	t.Logf("%d spans in %d export requests", len(all), col.Requests())
}

// find is the first span named name in spans, or nil.
func find(spans []otlptest.Span, name string) *otlptest.Span {
	for i := range spans {
		if spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}
