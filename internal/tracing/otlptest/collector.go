// Package otlptest is an in-process OTLP trace collector for tests: a gRPC
// server implementing the collector's TraceService and an HTTP handler for
// POST /v1/traces (application/x-protobuf), both on loopback, keeping
// every span they receive.
package otlptest

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Service  string // the resource's service.name
	Scope    string // the instrumentation scope
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string
	SpanID   string
	ParentID string
	Attrs    map[string]string // values as text; slices as "a,b"
	Error    bool              // status code error
}

// Collector keeps what it receives.
type Collector struct {
	collectortrace.UnimplementedTraceServiceServer

	// GRPCEndpoint is "http://127.0.0.1:port" (plaintext gRPC) and
	// HTTPEndpoint "http://127.0.0.1:port" (traces at /v1/traces).
	GRPCEndpoint, HTTPEndpoint string

	mu       sync.Mutex
	spans    []Span
	requests int
	headers  []map[string][]string
}

// Start runs a collector until the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, c)
	go func() { _ = gs.Serve(gl) }()
	t.Cleanup(gs.Stop)
	c.GRPCEndpoint = "http://" + gl.Addr().String()

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", c.serveHTTP)
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { _ = hs.Close() })
	c.HTTPEndpoint = "http://" + hl.Addr().String()
	return c
}

// Export implements the gRPC TraceService.
func (c *Collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.add(req, nil)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *Collector) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.add(&req, r.Header)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *Collector) add(req *collectortrace.ExportTraceServiceRequest, h http.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	if h != nil {
		c.headers = append(c.headers, h.Clone())
	}
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: service, Scope: ss.GetScope().GetName(), Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Attrs: map[string]string{}, Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentID = hex.EncodeToString(s.GetParentSpanId())
				}
				for _, kv := range s.GetAttributes() {
					sp.Attrs[kv.GetKey()] = text(kv.GetValue())
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
}

func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, text(e))
		}
		return strings.Join(parts, ",")
	case *commonpb.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue)
	}
	return v.String()
}

// Spans returns every span received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Trace returns the spans of one trace.
func (c *Collector) Trace(traceID string) []Span {
	var out []Span
	for _, s := range c.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Requests is the number of export requests received.
func (c *Collector) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// HTTPHeaders are the headers of the HTTP exports received.
func (c *Collector) HTTPHeaders() []map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]map[string][]string(nil), c.headers...)
}
