package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/events"
	pkgfiles "github.com/aiforge/aiforge/pkg/files"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/natsutil"
	"github.com/aiforge/aiforge/pkg/objstore"
	api "github.com/aiforge/aiforge/pkg/sandbox"
)

const (
	tenantA = "acme"
	tenantB = "globex"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env is a secured bus (pkg/busauth: the service connects as the sandbox
// identity, the test calls as the edge and administers as admin), the
// buckets and streams, an object store and a running sandbox service.
type env struct {
	t       *testing.T
	srv     *server.Server
	admin   *nats.Conn // admin: buckets, streams, usage
	edge    *nats.Conn // the edge: calls the service
	js      jetstream.JetStream
	objects objstore.Store
	records jetstream.KeyValue
	files   jetstream.KeyValue
	cfg     Config
	deps    Deps
	connect func(name, identity string) *nats.Conn

	svc    *Service
	cancel context.CancelFunc
	done   chan error
	clock  *fakeClock
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newBus makes the bus, buckets and object store, without a service.
func newBus(t *testing.T) *env {
	t.Helper()
	ids, err := busauth.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	users, err := busauth.ServerUsers(ids)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsutil.StartEmbedded(natsutil.EmbeddedConfig{StoreDir: t.TempDir(), Port: -1, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	var violations atomic.Int64
	t.Cleanup(func() {
		if n := violations.Load(); n > 0 {
			t.Errorf("%d permission violations on the bus", n)
		}
	})
	e := &env{t: t, srv: srv}
	e.connect = func(name, identity string) *nats.Conn {
		t.Helper()
		c, err := natsutil.Connect(srv.ClientURL(), name, ids[identity].Option(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if strings.Contains(strings.ToLower(err.Error()), "permission") {
					violations.Add(1)
					t.Logf("%s (%s): %v", name, identity, err)
				}
			}))
		if err != nil {
			t.Fatalf("connect %s: %v", name, err)
		}
		t.Cleanup(c.Close)
		return c
	}
	e.admin = e.connect("admin", busauth.Admin)
	e.edge = e.connect("edge", busauth.Edge)
	if e.js, err = jetstream.New(e.admin); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := events.Ensure(ctx, e.js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	if e.records, err = e.js.KeyValue(ctx, events.BucketContainers); err != nil {
		t.Fatal(err)
	}
	if e.files, err = e.js.KeyValue(ctx, events.BucketFiles); err != nil {
		t.Fatal(err)
	}
	if e.objects, err = objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	e.clock = &fakeClock{t: time.Now()}
	return e
}

// start starts a service on the env; p, when set, is a test pool in
// place of the real runtime.
func (e *env) start(cfg Config, p pool) {
	t := e.t
	t.Helper()
	if cfg.Node == "" {
		cfg.Node = "node-1"
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	nc := e.connect("sandbox-"+cfg.Node, busauth.Sandbox)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = cfg
	e.deps = Deps{NC: nc, JS: js, Objects: e.objects, Registerer: prometheus.NewRegistry(), Now: e.clock.Now,
		Logger: testLogger(t)}
	var svc *Service
	if p == nil {
		svc, err = New(cfg, e.deps)
	} else {
		if err = errors.Join(cfg.Validate(), e.deps.validate()); err == nil {
			svc, err = newService(cfg.withDefaults(), e.deps, p)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.svc, e.cancel, e.done = svc, cancel, make(chan error, 1)
	go func() { e.done <- svc.Run(ctx) }()
	t.Cleanup(e.stop)
	select {
	case <-svc.readyc:
	case err := <-e.done:
		e.cancel = nil
		t.Fatalf("service stopped before it was ready: %v", err)
	}
}

// stop stops the service and waits for Run to return.
func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	if err := <-e.done; err != nil {
		e.t.Errorf("Run: %v", err)
	}
	e.cancel = nil
}

// answer is an answer of the service.
type answer struct {
	status int
	body   []byte
	hdr    nats.Header
}

func (r answer) errBody(t *testing.T) api.ErrorBody {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return eb
}

// request calls subject as the edge for tenant with body (JSON unless
// []byte) and extra headers.
func (e *env) request(subject, tenant string, body any, hdr map[string]string) (answer, error) {
	m := nats.NewMsg(subject)
	if tenant != "" {
		m.Header.Set(bridge.HdrTenant, tenant)
		m.Header.Set(bridge.HdrKeyID, "key_"+tenant)
	}
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	switch b := body.(type) {
	case nil:
	case []byte:
		m.Data = b
	default:
		var err error
		if m.Data, err = json.Marshal(b); err != nil {
			return answer{}, err
		}
	}
	resp, err := e.edge.RequestMsg(m, 2*time.Minute)
	if err != nil {
		return answer{}, err
	}
	st, err := strconv.Atoi(resp.Header.Get(api.HdrStatus))
	if err != nil {
		return answer{}, errors.New("reply without status: " + string(resp.Data))
	}
	return answer{status: st, body: resp.Data, hdr: resp.Header}, nil
}

func (e *env) mustRequest(subject, tenant string, body any) answer {
	e.t.Helper()
	r, err := e.request(subject, tenant, body, nil)
	if err != nil {
		e.t.Fatalf("%s: %v", subject, err)
	}
	return r
}

// ok calls and decodes a 200 answer into out.
func (e *env) ok(subject, tenant string, body, out any) {
	e.t.Helper()
	r := e.mustRequest(subject, tenant, body)
	if r.status != 200 {
		e.t.Fatalf("%s: status %d: %s", subject, r.status, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			e.t.Fatalf("%s: %v: %s", subject, err, r.body)
		}
	}
}

// fails calls and checks the error status and code.
func (e *env) fails(subject, tenant string, body any, status int, code string) api.ErrorBody {
	e.t.Helper()
	r := e.mustRequest(subject, tenant, body)
	if r.status != status {
		e.t.Fatalf("%s: status %d, want %d: %s", subject, r.status, status, r.body)
	}
	eb := r.errBody(e.t)
	if eb.Code != code || eb.Status != status {
		e.t.Fatalf("%s: error %+v, want %d %s", subject, eb, status, code)
	}
	return eb
}

func (e *env) create(tenant string, req api.CreateRequest) api.Container {
	e.t.Helper()
	var c api.Container
	e.ok(events.SandboxRequest(api.OpCreate), tenant, req, &c)
	return c
}

func (e *env) exec(tenant, id string, req api.ExecRequest) api.ExecResult {
	e.t.Helper()
	var r api.ExecResult
	e.ok(events.SandboxContainer(id, api.OpExec), tenant, req, &r)
	return r
}

// record reads a container's record.
func (e *env) record(tenant, id string) (api.Record, error) {
	r, _, err := kv.Get[api.Record](testCtx(e.t), e.records, api.RecordKey(tenant, id))
	return r, err
}

// putFile stores a file of the Files API for tenant.
func (e *env) putFile(tenant, id, name string, content []byte) {
	e.t.Helper()
	ctx := testCtx(e.t)
	key := pkgfiles.ObjectKey(tenant, id)
	if _, err := e.objects.Put(ctx, key, bytes.NewReader(content), int64(len(content)), ""); err != nil {
		e.t.Fatal(err)
	}
	rec := pkgfiles.Record{File: pkgfiles.File{ID: id, Object: "file", Bytes: int64(len(content)), CreatedAt: time.Now().Unix(),
		Filename: name, Purpose: pkgfiles.PurposeUserData, Status: pkgfiles.StatusProcessed}, Tenant: tenant, ObjectKey: key}
	if _, err := kv.Put(ctx, e.files, pkgfiles.Key(tenant, id), rec); err != nil {
		e.t.Fatal(err)
	}
}

// content downloads a container file through file_content, as the edge.
func (e *env) content(tenant, cid, fid string) []byte {
	e.t.Helper()
	var cr api.ContentReply
	e.ok(events.SandboxContainer(cid, api.OpFileContent), tenant, api.FileRequest{ID: fid}, &cr)
	if want := api.ContentKey(tenant, cid, ""); !strings.HasPrefix(cr.ObjectKey, want) {
		e.t.Fatalf("content key %q is not under %q", cr.ObjectKey, want)
	}
	rc, _, err := e.objects.Get(testCtx(e.t), cr.ObjectKey)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	_ = e.objects.Delete(testCtx(e.t), cr.ObjectKey)
	return b
}

// usage reads the sandbox usage events published so far (at least n,
// waiting for them).
func (e *env) usage(n int) []events.SandboxUsageV1 {
	e.t.Helper()
	ctx := testCtx(e.t)
	stream, err := e.js.Stream(ctx, events.StreamUsage)
	if err != nil {
		e.t.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.UsageSandboxAll}})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []events.SandboxUsageV1
	for len(out) < n {
		msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			e.t.Fatalf("usage: %d events of %d: %v", len(out), n, err)
		}
		var u events.SandboxUsageV1
		if err := json.Unmarshal(msg.Data(), &u); err != nil {
			e.t.Fatal(err)
		}
		if err := u.Validate(); err != nil {
			e.t.Fatalf("usage event invalid: %v", err)
		}
		if got := msg.Headers().Get(nats.MsgIdHdr); got != u.ID {
			e.t.Fatalf("usage event msg id %q, want its id %q", got, u.ID)
		}
		out = append(out, u)
	}
	return out
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// requireRunsc skips (fails under CI=true) when the real runtime cannot
// run here.
func requireRunsc(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("runsc")
	if err == nil && os.Geteuid() != 0 {
		err = errors.New("runsc needs root here")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("runsc is required in CI: %v", err)
		}
		t.Skipf("SKIPPED: the sandbox service tests against the real gVisor runtime need runsc as root: %v", err)
	}
	return path
}
