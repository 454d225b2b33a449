package batch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	pkgfiles "github.com/aiforge/aiforge/pkg/files"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/natsutil"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
)

const (
	testModel  = "sim-model"
	testTenant = "acme"
)

// env is a bus, an object store, a model served by a bridge worker in
// front of the engine simulator, and the batch service.
type env struct {
	t       *testing.T
	srv     *server.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	objects objstore.Store // a *recordingStore
	sim     *enginesim.Sim
	batches jetstream.KeyValue
	files   jetstream.KeyValue
	store   *registry.Store
	cfg     Config
	worker  *testWorker
	connect func(name, identity string) *nats.Conn

	svc    *Service
	onStop func(batchID string)
	cancel context.CancelFunc
	svcNC  *nats.Conn
	done   chan error
}

// testWorker is a worker replica: a bridge server whose handler calls the
// engine simulator over HTTP and, like the real worker, publishes each
// request's usage with the request id as its id (stored once).
type testWorker struct {
	baseURL string
	js      jetstream.JetStream
	// gate, when set, is taken before each request reaches the engine.
	gate   chan struct{}
	served atomic.Int64
	mu     sync.Mutex
	ids    map[string]int
	fail   map[string]int // request id → retryable failures still to inject
}

func (w *testWorker) handle(ctx context.Context, req *bridge.Request, rw *bridge.ResponseWriter) {
	w.mu.Lock()
	if w.fail[req.ID] > 0 {
		w.fail[req.ID]--
		w.mu.Unlock()
		_ = rw.Fail(&bridge.Error{Status: http.StatusServiceUnavailable, Code: "engine_error", Retryable: true, Message: "injected"})
		return
	}
	w.mu.Unlock()
	if w.gate != nil {
		select {
		case <-w.gate:
		case <-ctx.Done():
			_ = rw.Fail(&bridge.Error{Status: http.StatusServiceUnavailable, Code: "canceled", Message: "canceled"})
			return
		}
	}
	path := map[string]string{events.EndpointChatCompletions: "/chat/completions", events.EndpointCompletions: "/completions",
		events.EndpointEmbeddings: "/embeddings"}[req.Endpoint]
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.baseURL+path, bytes.NewReader(req.Body))
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		_ = rw.Fail(&bridge.Error{Status: http.StatusBadGateway, Code: "engine_error", Retryable: true, Message: err.Error()})
		return
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	w.served.Add(1)
	w.mu.Lock()
	w.ids[req.ID]++
	w.mu.Unlock()
	if resp.StatusCode >= 400 {
		_ = rw.Fail(&bridge.Error{Status: resp.StatusCode, Code: "engine_error", Body: body})
		return
	}
	now := time.Now()
	u := events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: events.UsageRecordedV1{
		RequestID: req.ID, Tenant: req.Tenant, KeyID: req.KeyID, Model: testModel, Endpoint: req.Endpoint, Status: events.UsageStatusOK,
		Reporter: "test-worker", StartedAt: now, FinishedAt: now}}, Batch: true, BatchID: req.Header.Get(bridge.HdrBatchID)}
	if _, err := events.Publish(ctx, w.js, u, events.Envelope{ID: req.ID, Tenant: req.Tenant}); err != nil {
		_ = rw.Fail(&bridge.Error{Status: http.StatusBadGateway, Code: "engine_error", Message: err.Error()})
		return
	}
	_ = rw.Body(ctx, resp.StatusCode, "application/json", body)
}

func (w *testWorker) timesServed(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ids[id]
}

func newEnv(t *testing.T, cfg Config) *env { return newEnvOn(t, cfg, false) }

// newEnvOn makes an env; with secure, the bus enforces pkg/busauth: the
// batch service and the worker connect as their identities (the test
// itself as admin).
func newEnvOn(t *testing.T, cfg Config, secure bool) *env {
	t.Helper()
	var srv *server.Server
	var nc *nats.Conn
	var ids map[string]busauth.Identity
	if secure {
		var err error
		if ids, err = busauth.LoadOrCreate(t.TempDir()); err != nil {
			t.Fatal(err)
		}
		users, err := busauth.ServerUsers(ids)
		if err != nil {
			t.Fatal(err)
		}
		if srv, err = natsutil.StartEmbedded(natsutil.EmbeddedConfig{StoreDir: t.TempDir(), Port: -1, Users: users}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		})
	} else {
		srv = natstest.Server(t)
	}
	var violations atomic.Int64
	t.Cleanup(func() {
		if n := violations.Load(); n > 0 {
			t.Errorf("%d permission violations on the bus", n)
		}
	})
	connect := func(name, identity string) *nats.Conn {
		t.Helper()
		var opts []nats.Option
		if ids != nil {
			opts = append(opts, ids[identity].Option(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if strings.Contains(strings.ToLower(err.Error()), "permission") {
					violations.Add(1)
					t.Logf("%s (%s): %v", name, identity, err)
				}
			}))
		}
		c, err := natsutil.Connect(srv.ClientURL(), name, opts...)
		if err != nil {
			t.Fatalf("connect %s: %v", name, err)
		}
		t.Cleanup(c.Close)
		return c
	}
	nc = connect(t.Name(), busauth.Admin)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sim, baseURL, closeSim, err := enginesim.Start(enginesim.Config{Models: []string{testModel}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeSim)
	e := &env{t: t, srv: srv, nc: nc, connect: connect, js: js, objects: &recordingStore{Store: objects}, sim: sim, cfg: cfg}
	e.batches, _ = js.KeyValue(ctx, events.BucketBatches)
	e.files, _ = js.KeyValue(ctx, events.BucketFiles)
	if e.store, err = registry.Open(ctx, js); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.CreateTenant(ctx, testTenant); err != nil {
		t.Fatal(err)
	}
	if err := e.store.PutModel(ctx, registry.Model{Name: testModel, Engine: registry.Engine{BaseURL: baseURL, Model: testModel}}); err != nil {
		t.Fatal(err)
	}
	e.worker = &testWorker{baseURL: baseURL, ids: map[string]int{}, fail: map[string]int{}}
	return e
}

// startWorker runs the worker replica; with state, it reports itself in
// events.BucketWorkers (so lines go to its direct subject).
func (e *env) startWorker(id string, slots int, state bool) {
	e.t.Helper()
	wnc := e.connect("worker-"+id, busauth.Worker)
	wjs, err := jetstream.New(wnc)
	if err != nil {
		e.t.Fatal(err)
	}
	e.worker.js = wjs
	s, err := bridge.NewServer(wnc, bridge.ServerConfig{Model: testModel, WorkerID: id, MaxConcurrency: slots}, e.worker.handle)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	if state {
		w, err := registry.OpenWorkers(testCtx(e.t), wjs)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := w.Put(testCtx(e.t), registry.WorkerState{WorkerID: id, Model: testModel, State: registry.WorkerServing,
			MaxConcurrency: slots, StartedAt: time.Now(), UpdatedAt: time.Now()}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// start runs a batch service on a connection of its own.
func (e *env) start() {
	e.t.Helper()
	e.svcNC = e.connect("batch", busauth.Batch)
	js, err := jetstream.New(e.svcNC)
	if err != nil {
		e.t.Fatal(err)
	}
	svc, err := New(e.cfg, Deps{NC: e.svcNC, JS: js, Objects: e.objects, Registerer: prometheus.NewRegistry(),
		SecretsKey: testSecretsKey, Logger: testLogger()})
	if err != nil {
		e.t.Fatal(err)
	}
	svc.onStop = e.onStop
	ctx, cancel := context.WithCancel(context.Background())
	e.svc, e.cancel, e.done = svc, cancel, make(chan error, 1)
	go func() { e.done <- svc.Run(ctx) }()
	e.t.Cleanup(e.stop)
	e.eventually(20*time.Second, svc.Ready, "the batch service ready")
}

// stop stops the batch service and waits for it.
func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("batch service: %v", err)
		}
	case <-time.After(30 * time.Second):
		e.t.Error("the batch service did not stop")
	}
	e.cancel = nil
}

// kill stops the batch service like kill -9: its connection closes under
// it, nothing is handed back.
func (e *env) kill() {
	e.svcNC.Close()
	e.cancel()
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		e.t.Error("the killed batch service did not return")
	}
	e.cancel = nil
}

var idSeq atomic.Int64

// submit stores an input file and creates a batch record as the edge
// does: status validating.
func (e *env) submit(endpoint string, lines []string) api.Record {
	e.t.Helper()
	ctx := testCtx(e.t)
	n := idSeq.Add(1)
	fileID := fmt.Sprintf("file-in%d", n)
	data := strings.Join(lines, "\n") + "\n"
	key := pkgfiles.ObjectKey(testTenant, fileID)
	if _, err := e.objects.Put(ctx, key, strings.NewReader(data), int64(len(data)), "application/jsonl"); err != nil {
		e.t.Fatal(err)
	}
	now := time.Now()
	rec := api.Record{Batch: api.Batch{ID: fmt.Sprintf("batch_t%d%d", now.UnixNano()%1e6, n), Object: "batch", Endpoint: endpoint,
		InputFileID: fileID, CompletionWindow: api.CompletionWindow, Status: api.StatusValidating, CreatedAt: now.Unix()},
		Tenant: testTenant, KeyID: "key_1", InputObjectKey: key, Expiry: now.Add(24 * time.Hour)}
	if _, err := kv.Create(ctx, e.batches, api.Key(testTenant, rec.ID), rec); err != nil {
		e.t.Fatal(err)
	}
	return rec
}

func (e *env) get(id string) api.Record {
	e.t.Helper()
	rec, _, err := kv.Get[api.Record](testCtx(e.t), e.batches, api.Key(testTenant, id))
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

// waitStatus waits for the batch to reach one of statuses.
func (e *env) waitStatus(id string, within time.Duration, statuses ...string) api.Record {
	e.t.Helper()
	var rec api.Record
	ok := e.poll(within, func() bool {
		rec = e.get(id)
		return slices.Contains(statuses, rec.Status)
	})
	if !ok {
		e.t.Fatalf("timed out waiting for batch %s to be %s: it is %s (counts %+v)", id, strings.Join(statuses, " or "), rec.Status, rec.RequestCounts)
	}
	return rec
}

// cancelBatch moves a batch to cancelling, as the edge does.
func (e *env) cancelBatch(id string) {
	e.t.Helper()
	_, _, err := kv.Update(testCtx(e.t), e.batches, api.Key(testTenant, id), func(v *api.Record, exists bool) error {
		if v.Status != api.StatusValidating && v.Status != api.StatusInProgress {
			return fmt.Errorf("cannot cancel a batch that is %s", v.Status)
		}
		v.Status = api.StatusCancelling
		v.CancellingAt = unixNow()
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// file reads a batch output or error file, checking its record.
func (e *env) file(id *string) []api.OutputLine {
	e.t.Helper()
	if id == nil {
		return nil
	}
	ctx := testCtx(e.t)
	f, _, err := kv.Get[pkgfiles.Record](ctx, e.files, pkgfiles.Key(testTenant, *id))
	if err != nil {
		e.t.Fatal(err)
	}
	if f.Purpose != pkgfiles.PurposeBatchOutput || f.ObjectKey != pkgfiles.ObjectKey(testTenant, *id) || f.Status != pkgfiles.StatusProcessed {
		e.t.Fatalf("file record %+v", f)
	}
	rc, info, err := e.objects.Get(ctx, f.ObjectKey)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	if info.Size != f.Bytes {
		e.t.Fatalf("file %s: record says %d bytes, object has %d", *id, f.Bytes, info.Size)
	}
	var out []api.OutputLine
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l api.OutputLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			e.t.Fatalf("file %s: line %q: %v", *id, sc.Text(), err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// usageEvents counts the usage events stored for a batch.
func (e *env) usageEvents() uint64 {
	e.t.Helper()
	st, err := e.js.Stream(testCtx(e.t), events.StreamUsage)
	if err != nil {
		e.t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

func (e *env) eventually(within time.Duration, cond func() bool, what string) {
	e.t.Helper()
	if !e.poll(within, cond) {
		e.t.Fatalf("timed out waiting for %s", what)
	}
}

// poll reports whether cond held within the time given, checking it every
// 10ms.
func (e *env) poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// chatLines are n chat completion lines, custom ids c0..c<n-1>.
func chatLines(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"custom_id":"c%d","method":"POST","url":"/v1/chat/completions","body":{"model":"%s","messages":[{"role":"user","content":"question %d"}],"max_tokens":4}}`, i, testModel, i)
	}
	return out
}

func testLogger() *slog.Logger {
	if os.Getenv("BATCH_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// recordingStore remembers the keys put.
type recordingStore struct {
	objstore.Store
	mu   sync.Mutex
	puts []string
}

func (r *recordingStore) Put(ctx context.Context, key string, rd io.Reader, size int64, ct string) (objstore.Info, error) {
	r.mu.Lock()
	r.puts = append(r.puts, key)
	r.mu.Unlock()
	return r.Store.Put(ctx, key, rd, size, ct)
}

func (r *recordingStore) put(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.puts {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
