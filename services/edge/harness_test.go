package edge_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/services/edge"
)

const adminKey = "0123456789abcdef-admin"

// syncBuffer is a log sink safe to read while the edge writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is one running edge on a real embedded JetStream server.
type harness struct {
	t    *testing.T
	ns   *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	svc  *edge.Service
	url  string
	logs *syncBuffer
	// secrets is the workers' private key; the edge has its public half.
	secrets *sealed.PrivateKey
}

func startEdge(t *testing.T, mutate func(*edge.Config)) *harness {
	t.Helper()
	return startEdgeDeps(t, mutate, nil)
}

// startEdgeDeps is startEdge with a change to the edge's Deps too.
func startEdgeDeps(t *testing.T, mutate func(*edge.Config), mutateDeps func(*edge.Deps)) *harness {
	t.Helper()
	ns, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	cfg := edge.Config{
		AdminKey:         adminKey,
		NoWorkerWait:     300 * time.Millisecond,
		HeartbeatTimeout: 2 * time.Second,
		FailoverWait:     50 * time.Millisecond,
		ShutdownGrace:    2 * time.Second,
	}
	secrets, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pub := secrets.Public()
	cfg.SecretsKey = &pub
	if mutate != nil {
		mutate(&cfg)
	}
	deps := edge.Deps{
		NC: nc, JS: js, Registerer: reg, Gatherer: reg, Listener: ln,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutateDeps != nil {
		mutateDeps(&deps)
	}
	svc, err := edge.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	h := &harness{t: t, ns: ns, nc: nc, js: js, svc: svc, url: "http://" + ln.Addr().String(), logs: logs, secrets: secrets}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("edge Run = %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("edge did not stop")
		}
	})
	eventually(t, 10*time.Second, func() bool {
		resp, err := http.Get(h.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "edge ready")
	if !svc.Ready() || svc.Addr() != ln.Addr().String() {
		t.Fatalf("Ready %v, Addr %q", svc.Ready(), svc.Addr())
	}
	return h
}

func eventually(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// worker starts a fake worker for model: a bridge server with handler h.
func (h *harness) worker(model, id string, handler bridge.Handler) *bridge.Server {
	h.t.Helper()
	wnc := natstest.Conn(h.t, h.ns, "worker-"+id)
	s, err := bridge.NewServer(wnc, bridge.ServerConfig{Model: model, WorkerID: id, HeartbeatInterval: 100 * time.Millisecond}, handler)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

func (h *harness) do(method, path, bearer string, body any, hdr map[string]string) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (h *harness) admin(method, path string, body any) response {
	h.t.Helper()
	return h.do(method, path, adminKey, body, nil)
}

// tenantKey creates tenant (once) and a key for models, returning the
// secret and the key id.
func (h *harness) tenantKey(tenant string, models ...string) (string, string) {
	h.t.Helper()
	if r := h.admin("POST", "/admin/v1/tenants", map[string]string{"id": tenant}); r.status != http.StatusCreated && r.status != http.StatusConflict {
		h.t.Fatalf("create tenant: %d %s", r.status, r.body)
	}
	body := map[string]any{"tenant": tenant}
	if len(models) > 0 {
		body["models"] = models
	}
	r := h.admin("POST", "/admin/v1/keys", body)
	if r.status != http.StatusCreated {
		h.t.Fatalf("create key: %d %s", r.status, r.body)
	}
	m := r.json(h.t)
	return m["key"].(string), m["id"].(string)
}

func (h *harness) registerModel(name string) {
	h.t.Helper()
	r := h.admin("POST", "/admin/v1/models", map[string]any{
		"name": name, "engine": map[string]any{"base_url": "http://127.0.0.1:1/v1", "model": "upstream"},
	})
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		h.t.Fatalf("register model %q: %d %s", name, r.status, r.body)
	}
}

// apiError checks that r is an OpenAI-shaped error with status and code.
func apiError(t *testing.T, r response, status int, code string) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error Content-Type %q", ct)
	}
	var w struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(r.body, &w); err != nil || w.Error == nil {
		t.Fatalf("not an OpenAI error body: %s", r.body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := w.Error[k]; !ok {
			t.Fatalf("error body lacks %q: %s", k, r.body)
		}
	}
	if msg, _ := w.Error["message"].(string); msg == "" {
		t.Fatalf("error without a message: %s", r.body)
	}
	if got, _ := w.Error["code"].(string); got != code {
		t.Fatalf("error code %q, want %q; body %s", got, code, r.body)
	}
	return w.Error
}

// sseStream is an open streaming response read event by event.
type sseStream struct {
	resp *http.Response
	br   *bufio.Reader
}

func (h *harness) openStream(ctx context.Context, key, body string, hdr map[string]string) *sseStream {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", h.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { resp.Body.Close() })
	return &sseStream{resp: resp, br: bufio.NewReader(resp.Body)}
}

// next returns the next data payload; ok is false at the end of the body.
// It fails the test on a line that is neither a data line nor blank.
func (s *sseStream) next(t *testing.T) (string, bool) {
	t.Helper()
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if err != io.EOF || line != "" {
				t.Fatalf("stream read: %q, %v", line, err)
			}
			return "", false
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected SSE line %q", line)
		}
		// Each event is exactly one data line followed by a blank line.
		if blank, err := s.br.ReadString('\n'); err != nil || blank != "\n" {
			t.Fatalf("event %q not followed by a blank line: %q, %v", data, blank, err)
		}
		return data, true
	}
}

func chatBody(model string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": model, "stream": stream, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
	return string(b)
}

func (r response) String() string { return string(r.body) }
