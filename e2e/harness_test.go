// Package e2e runs aiforge the way users do — the all-in-one process on a
// real embedded JetStream, real HTTP on loopback, the engine simulator as
// the engine — and drives it with the official OpenAI SDK and plain HTTP.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/enginesim"
)

const adminKey = "test-admin-key-0123456789"

// stack is one running aiforge process.
type stack struct {
	t      testing.TB
	app    *app.App
	url    string
	admin  *cli.Client
	cancel context.CancelFunc
	done   chan error
}

type stackOpts struct {
	natsURL   string
	targets   []string
	dataDir   string
	mutate    func(*app.Options)
	noCleanup bool
}

func startStack(t testing.TB, o stackOpts) *stack {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.dataDir == "" {
		o.dataDir = t.TempDir()
	}
	opts := app.Options{
		Targets: o.targets, DataDir: o.dataDir, NATSURL: o.natsURL, EdgeListener: ln, AdminKey: adminKey,
	}
	opts.Edge.NoWorkerWait = 500 * time.Millisecond
	opts.Edge.HeartbeatTimeout = 2 * time.Second
	opts.Edge.ShutdownGrace = 5 * time.Second
	opts.WorkerDefaults.HeartbeatInterval = 200 * time.Millisecond
	opts.WorkerDefaults.HealthInterval = 200 * time.Millisecond
	opts.WorkerDefaults.DrainTimeout = 5 * time.Second
	// No warm sandboxes in stacks that run no code (sandboxStack keeps
	// the default pool).
	opts.Sandbox.Pool = "none"
	if o.mutate != nil {
		o.mutate(&opts)
	}
	a, err := app.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &stack{t: t, app: a, url: "http://" + ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	s.admin = &cli.Client{BaseURL: s.url, Token: adminKey}
	go func() { s.done <- a.Run(ctx) }()
	if !o.noCleanup {
		t.Cleanup(func() { s.stop() })
	}
	s.waitReady()
	return s
}

func (s *stack) waitReady() {
	s.t.Helper()
	eventually(s.t, 20*time.Second, func() bool {
		if s.app.Edge() == nil {
			return s.app.Ready()
		}
		resp, err := http.Get(s.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "stack ready")
}

func (s *stack) stop() error {
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(30 * time.Second):
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		s.t.Errorf("stack did not stop within 30s; goroutines:\n%s", b.String())
		return nil
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// storePDF uploads a PDF through the OpenAI SDK, creates a vector store
// holding it with the default chunking, and waits (up to within) until the
// file is processed, failing the test unless it completed. It returns the
// store and how long after its creation the file was searchable.
func storePDF(t *testing.T, client openai.Client, name string, pdf []byte, within time.Duration) (*openai.VectorStore, time.Duration) {
	t.Helper()
	vs, _, took := storeFile(t, client, name, "application/pdf", pdf, openai.VectorStoreNewParams{}, within)
	return vs, took
}

// storeFile uploads data as name (of type mime) through the OpenAI SDK,
// creates a vector store with params and the file (opts go with that
// request: an embedding_model, say), and waits (up to within) until the file
// is processed, failing the test unless it completed. It returns the store,
// the file's id and how long after the store's creation it was searchable.
func storeFile(t *testing.T, client openai.Client, name, mime string, data []byte, params openai.VectorStoreNewParams, within time.Duration, opts ...option.RequestOption) (*openai.VectorStore, string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	file, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(data), name, mime), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	params.FileIDs = []string{file.ID}
	vs, err := client.VectorStores.New(ctx, params, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var f *openai.VectorStoreFile
	eventually(t, within, func() bool {
		f, err = client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
		return err == nil && f.Status != openai.VectorStoreFileStatusInProgress
	}, name+" processed")
	if f.Status != openai.VectorStoreFileStatusCompleted {
		t.Fatalf("%s: %s: %+v", name, f.Status, f.LastError)
	}
	return vs, file.ID, time.Since(start)
}

// sim starts an engine simulator and returns it with its base URL.
func sim(t testing.TB, cfg enginesim.Config) (*enginesim.Sim, string) {
	t.Helper()
	s, base, closeFn, err := enginesim.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return s, base
}

// tenantKey creates a tenant (if needed) and a key, returning the secret
// and the key id.
func (s *stack) tenantKey(tenant string, models ...string) (secret, id string) {
	s.t.Helper()
	ctx := context.Background()
	err := s.admin.Do(ctx, "POST", "/admin/v1/tenants", map[string]string{"id": tenant}, nil)
	if ae, ok := err.(*cli.APIError); err != nil && !(ok && ae.Status == http.StatusConflict) {
		s.t.Fatal(err)
	}
	if len(models) == 0 {
		models = []string{"*"}
	}
	var k struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	if err := s.admin.Do(ctx, "POST", "/admin/v1/keys", map[string]any{"tenant": tenant, "models": models}, &k); err != nil {
		s.t.Fatal(err)
	}
	return k.Key, k.ID
}

// register binds a model to an engine and waits until a request is served.
func (s *stack) register(name, baseURL, upstream string) {
	s.t.Helper()
	body := map[string]any{"name": name, "engine": map[string]any{"base_url": baseURL, "model": upstream}}
	if err := s.admin.Do(context.Background(), "POST", "/admin/v1/models", body, nil); err != nil {
		s.t.Fatal(err)
	}
}

// waitServed polls until the model answers a chat request with 200.
func (s *stack) waitServed(key, model string) {
	s.t.Helper()
	eventually(s.t, 10*time.Second, func() bool {
		st, _ := s.post(key, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"ping"}],"max_tokens":1}`, model))
		return st == http.StatusOK
	}, "model "+model+" served")
}

func (s *stack) post(key, path, body string) (int, []byte) {
	req, _ := http.NewRequest("POST", s.url+path, stringsReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := readAll(resp.Body)
	return resp.StatusCode, b
}
