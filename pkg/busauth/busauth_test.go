package busauth_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natsutil"
)

// bus is a real NATS server with the identities of busauth, reachable
// over TCP.
type bus struct {
	url string
	ids map[string]busauth.Identity
	dir string
}

// embeddedBus is the embedded server, listening on loopback.
func embeddedBus(t *testing.T) bus {
	t.Helper()
	dir := t.TempDir()
	ids, err := busauth.LoadOrCreate(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	users, err := busauth.ServerUsers(ids)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsutil.StartEmbedded(natsutil.EmbeddedConfig{StoreDir: filepath.Join(dir, "js"), Port: -1, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	b := bus{url: srv.ClientURL(), ids: ids, dir: filepath.Join(dir, "creds")}
	b.provision(t)
	return b
}

// externalBus is a nats-server process configured by ServerConf. CI
// installs the binary (.ci/run); elsewhere the test skips loudly without
// it.
func externalBus(t *testing.T) bus {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			home, _ := os.UserHomeDir()
			gopath = filepath.Join(home, "go")
		}
		if _, serr := os.Stat(filepath.Join(gopath, "bin", "nats-server")); serr == nil {
			bin, err = filepath.Join(gopath, "bin", "nats-server"), nil
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("nats-server is not installed (go install github.com/nats-io/nats-server/v2@v2.15.2)")
		}
		t.Skip("SKIPPED: nats-server not installed; the external-server permission tests did not run (go install github.com/nats-io/nats-server/v2@v2.15.2)")
	}
	dir := t.TempDir()
	ids, err := busauth.LoadOrCreate(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	conf, err := busauth.ServerConf(ids, busauth.ServerConfig{Listen: "127.0.0.1:" + strconv.Itoa(port), StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		t.Fatal(err)
	}
	cpath := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(cpath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", cpath, "-t").CombinedOutput(); err != nil {
		t.Fatalf("nats-server rejects the generated configuration: %v\n%s\n%s", err, out, conf)
	}
	cmd := exec.Command(bin, "-c", cpath)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	b := bus{url: "nats://127.0.0.1:" + strconv.Itoa(port), ids: ids, dir: filepath.Join(dir, "creds")}
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := b.connect(busauth.Admin)
		if err == nil {
			nc.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not accept the admin identity: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.provision(t)
	return b
}

func (b bus) connect(identity string) (*nats.Conn, error) {
	co := natsutil.ConnectOptions{NKeyFile: busauth.SeedFile(b.dir, identity)}
	return natsutil.Dial(b.url, "test-"+identity, co, nats.MaxReconnects(0), nats.CustomInboxPrefix(busauth.InboxPrefix(identity)),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
}

func (b bus) mustConnect(t *testing.T, identity string) *nats.Conn {
	t.Helper()
	nc, err := b.connect(identity)
	if err != nil {
		t.Fatalf("%s: %v", identity, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (b bus) provision(t *testing.T) {
	t.Helper()
	nc := b.mustConnect(t, busauth.Admin)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
}

// allowed reports whether identity may publish (or subscribe to) subject:
// the server answers a refused operation with a permissions violation
// before the PONG of the flush that follows it.
func (b bus) allowed(t *testing.T, identity, op, subject string) bool {
	t.Helper()
	nc, err := b.connect(identity)
	if err != nil {
		t.Fatalf("%s: %v", identity, err)
	}
	defer nc.Close()
	switch op {
	case "pub":
		err = nc.Publish(subject, []byte("x"))
	case "sub":
		_, err = nc.SubscribeSync(subject)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	last := nc.LastError()
	if last != nil && !errors.Is(last, nats.ErrPermissionViolation) {
		t.Fatalf("%s %s %s: %v", identity, op, subject, last)
	}
	return last == nil
}

type permCase struct {
	identity, op, subject string
	allowed               bool
}

// permCases are (service x subject x pub/sub): what each needs, and the
// neighbours it must not reach.
var permCases = []permCase{
	// Inference requests: the edge only.
	{busauth.Edge, "pub", "aiforge.infer.v1.chat", true},
	{busauth.Edge, "pub", "aiforge.infer.ctl.v1.w-1", true},
	{busauth.Embedder, "pub", "aiforge.infer.v1.embed", false},
	{busauth.Embedder, "pub", "aiforge.infer.v1.chat", false},
	{busauth.Embedder, "pub", "aiforge.infer.v1.chat.w.w-2", false},
	{busauth.Embedder, "pub", "aiforge.infer.v1.chat.ping", false},
	{busauth.Retriever, "pub", "aiforge.infer.v1.embed", false},
	{busauth.Retriever, "pub", "aiforge.infer.v1.chat", false},
	{busauth.Retriever, "pub", "aiforge.infer.v1.chat.w.w-2", false},
	{busauth.Worker, "pub", "aiforge.infer.v1.chat", false},
	{busauth.Worker, "pub", "aiforge.infer.v1.chat.w.w-2", false},
	{busauth.Usage, "pub", "aiforge.infer.v1.chat", false},
	{busauth.Ingest, "pub", "aiforge.infer.v1.chat", false},
	{busauth.Guardian, "pub", "aiforge.infer.v1.chat", false},
	// Internal embedding calls: the embedder and the retriever, on their
	// own family, with the control subject for credits and cancels.
	{busauth.Embedder, "pub", "aiforge.embed.v1.embed", true},
	{busauth.Embedder, "pub", "aiforge.embed.v1.embed.w.w-2", true},
	{busauth.Embedder, "pub", "aiforge.embed.v1.embed.ping", true},
	{busauth.Embedder, "pub", "aiforge.infer.ctl.v1.w-1", true},
	{busauth.Retriever, "pub", "aiforge.embed.v1.embed", true},
	{busauth.Retriever, "pub", "aiforge.infer.ctl.v1.w-1", true},
	{busauth.Edge, "pub", "aiforge.embed.v1.embed", false},
	{busauth.Worker, "pub", "aiforge.embed.v1.embed", false},
	{busauth.Usage, "pub", "aiforge.embed.v1.embed", false},
	{busauth.Ingest, "pub", "aiforge.embed.v1.embed", false},
	{busauth.Guardian, "pub", "aiforge.embed.v1.embed", false},
	// Internal rerank calls: the edge (the rerank stage of searches).
	{busauth.Edge, "pub", "aiforge.rerank.v1.rr", true},
	{busauth.Edge, "pub", "aiforge.rerank.v1.rr.w.w-2", true},
	{busauth.Edge, "pub", "aiforge.rerank.v1.rr.ping", true},
	{busauth.Embedder, "pub", "aiforge.rerank.v1.rr", false},
	{busauth.Retriever, "pub", "aiforge.rerank.v1.rr", false},
	{busauth.Worker, "pub", "aiforge.rerank.v1.rr", false},
	{busauth.Batch, "pub", "aiforge.rerank.v1.rr", false},
	{busauth.Worker, "sub", "aiforge.rerank.v1.rr", true},
	{busauth.Worker, "sub", "aiforge.rerank.v1.rr.ping", true},
	{busauth.Edge, "sub", "aiforge.rerank.v1.>", false},
	// Workers serve them; nobody else listens.
	{busauth.Worker, "sub", "aiforge.infer.v1.chat", true},
	{busauth.Worker, "sub", "aiforge.infer.ctl.v1.w-1", true},
	{busauth.Worker, "sub", "aiforge.embed.v1.embed", true},
	{busauth.Worker, "sub", "aiforge.embed.v1.embed.ping", true},
	{busauth.Edge, "sub", "aiforge.infer.v1.chat", false},
	{busauth.Usage, "sub", "aiforge.infer.v1.>", false},
	{busauth.Embedder, "sub", "aiforge.embed.v1.>", false},
	{busauth.Retriever, "sub", "aiforge.infer.v1.>", false},
	// Inboxes: each identity its own.
	{busauth.Edge, "sub", "_INBOX_edge.abc.*", true},
	{busauth.Worker, "sub", "_INBOX_edge.>", false},
	{busauth.Usage, "sub", "_INBOX.>", false},
	{busauth.Worker, "pub", "_INBOX_edge.abc.1", false}, // only as the answer to a request it received
	// Bridge frames: workers publish to their callers' bridge replies, which
	// only the caller may read; nobody else publishes there.
	{busauth.Worker, "pub", "_INBOX_edge.bridge.p.t", true},
	{busauth.Worker, "pub", "_INBOX_embedder.bridge.p.t", true},
	{busauth.Worker, "pub", "_INBOX_retriever.bridge.p.t", true},
	{busauth.Worker, "pub", "_INBOX_usage.bridge.p.t", false},
	{busauth.Worker, "sub", "_INBOX_edge.bridge.>", false},
	{busauth.Edge, "sub", "_INBOX_edge.bridge.p.*", true},
	{busauth.Embedder, "sub", "_INBOX_edge.bridge.>", false},
	{busauth.Embedder, "pub", "_INBOX_edge.bridge.p.t", false},
	{busauth.Edge, "pub", "_INBOX_embedder.bridge.p.t", false},
	// The usage fold may ack its ordered consumer on USAGE (ignored), so
	// the server need not track each delivery as a response; nothing else.
	{busauth.Usage, "pub", "$JS.ACK.USAGE.c.1.2.3.4.5", true},
	{busauth.Usage, "pub", "$JS.ACK.DOCS.ingest.1.2.3.4.5", false},
	{busauth.Worker, "pub", "$JS.ACK.USAGE.c.1.2.3.4.5", false},
	{busauth.Worker, "sub", ">", false},
	// Usage events: workers and the edge record, the usage service reads.
	{busauth.Worker, "pub", "aiforge.usage.recorded.v2.acme", true},
	{busauth.Edge, "pub", "aiforge.usage.corrected.v1.acme", true},
	{busauth.Worker, "pub", "aiforge.usage.corrected.v1.acme", false},
	{busauth.Usage, "pub", "aiforge.usage.recorded.v2.acme", false},
	{busauth.Usage, "pub", "aiforge.budget.alert.v1.acme", true},
	{busauth.Worker, "pub", "aiforge.budget.alert.v1.acme", false},
	// Queries.
	{busauth.Usage, "sub", events.UsageQuery, true},
	{busauth.Worker, "sub", events.UsageQuery, false},
	{busauth.Edge, "pub", events.UsageQuery, true},
	{busauth.Worker, "pub", events.UsageQuery, false},
	{busauth.Retriever, "sub", events.RetrieverQuery, true},
	{busauth.Ingest, "sub", events.RetrieverQuery, false},
	// Document flow.
	{busauth.Ingest, "pub", "aiforge.docs.chunked.v1.acme", true},
	{busauth.Ingest, "pub", "aiforge.docs.indexed.v1.acme", false},
	{busauth.Embedder, "pub", "aiforge.docs.embedded.v1.acme", true},
	{busauth.Retriever, "pub", "aiforge.docs.indexed.v1.acme", true},
	{busauth.Worker, "pub", "aiforge.docs.ingest.requested.v1.acme", false},
	// Model flow.
	{busauth.Guardian, "pub", "aiforge.models.verdict.v2.m", true},
	{busauth.Edge, "pub", "aiforge.models.verdict.v2.m", false},
	{busauth.Edge, "pub", "aiforge.models.pull.requested.v1.m", true},
	// KV writes: keys, models, budgets.
	{busauth.Edge, "pub", "$KV.aiforge_keys.key_0123456789abcdef", true},
	{busauth.Worker, "pub", "$KV.aiforge_keys.key_0123456789abcdef", false},
	{busauth.Worker, "pub", "$KV.aiforge_models.m.x", false},
	{busauth.Worker, "pub", "$KV.aiforge_budgets.k.x", false},
	{busauth.Usage, "pub", "$KV.aiforge_budgets.k.x", true},
	{busauth.Usage, "pub", "$KV.aiforge_keys.key_0123456789abcdef", false},
	{busauth.Retriever, "pub", "$KV.aiforge_vector_store_files.acme.vs.f", true},
	{busauth.Retriever, "pub", "$KV.aiforge_models.m.x", false},
	{busauth.Guardian, "pub", "$KV.aiforge_catalog.c.x", true},
	{busauth.Guardian, "pub", "$KV.aiforge_keys.key_0123456789abcdef", false},
	// Tenant model buckets: the edge writes the configurations, the
	// guardian reads them and writes its folder records.
	{busauth.Edge, "pub", "$KV.aiforge_tenant_buckets.b.acme", true},
	{busauth.Guardian, "pub", "$KV.aiforge_tenant_buckets.b.acme", false},
	{busauth.Guardian, "pub", "$JS.API.DIRECT.GET.KV_aiforge_tenant_buckets.$KV.aiforge_tenant_buckets.b.acme", true},
	{busauth.Guardian, "pub", "$KV.aiforge_tenant_bucket_folders.f.acme.x", true},
	{busauth.Edge, "pub", "$KV.aiforge_tenant_bucket_folders.f.acme.x", false},
	{busauth.Worker, "pub", "$JS.API.DIRECT.GET.KV_aiforge_tenant_buckets.$KV.aiforge_tenant_buckets.b.acme", false},
	{busauth.Edge, "pub", "aiforge.notify.modelbucket.v1.acme", true},
	{busauth.Worker, "pub", "aiforge.notify.modelbucket.v1.acme", false},
	{busauth.Guardian, "sub", "aiforge.notify.modelbucket.v1.*", true},
	{busauth.Guardian, "pub", "aiforge.notify.modelbucket.v1.acme", false},
	// KV reads: a worker reads bindings, not keys.
	{busauth.Worker, "pub", "$JS.API.DIRECT.GET.KV_aiforge_models.$KV.aiforge_models.m.x", true},
	{busauth.Worker, "pub", "$JS.API.DIRECT.GET.KV_aiforge_keys.$KV.aiforge_keys.key_0123456789abcdef", false},
	// Streams: nobody but admin creates, changes, purges or deletes them.
	{busauth.Edge, "pub", "$JS.API.STREAM.CREATE.USAGE", false},
	{busauth.Usage, "pub", "$JS.API.STREAM.PURGE.USAGE", false},
	{busauth.Worker, "pub", "$JS.API.STREAM.DELETE.USAGE", false},
	{busauth.Edge, "pub", "$JS.API.STREAM.INFO.USAGE", true},
	{busauth.Usage, "pub", "$JS.API.STREAM.CREATE.OBJ_aiforge_ledgers", true},
	{busauth.Worker, "pub", "$JS.API.CONSUMER.CREATE.DOCS.ingest", false},
	{busauth.Ingest, "pub", "$JS.API.CONSUMER.CREATE.DOCS.ingest", true},
	{busauth.Ingest, "pub", "$JS.API.CONSUMER.CREATE.DOCS.embedder", false},
	{busauth.Admin, "pub", "$JS.API.STREAM.CREATE.USAGE", true},
	{busauth.Admin, "sub", ">", true},
}

func testPermissionTable(t *testing.T, b bus) {
	for _, c := range permCases {
		if got := b.allowed(t, c.identity, c.op, c.subject); got != c.allowed {
			t.Errorf("%s %s %s: allowed %v, want %v", c.identity, c.op, c.subject, got, c.allowed)
		}
	}
}

// No credentials, or a wrong key: refused, and the error says why.
func testNoCredentials(t *testing.T, b bus) {
	_, err := natsutil.Connect(b.url, "anonymous", nats.MaxReconnects(0))
	if err == nil || !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "authorization violation") {
		t.Fatalf("anonymous connection: %v, want an authorization violation", err)
	}
	other, err := busauth.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = natsutil.Connect(b.url, "stranger", nats.MaxReconnects(0), other[busauth.Admin].Option())
	if err == nil || !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("unknown nkey: %v, want an authorization violation", err)
	}
	if strings.Contains(err.Error(), string(other[busauth.Admin].Seed())) {
		t.Fatal("the error quotes the seed")
	}
}

// A stolen worker, usage, embedder or retriever credential cannot forge an
// inference request: the publish is refused and no worker receives it. A
// worker credential cannot write a key.
func testStolenCredential(t *testing.T, b bus) {
	worker := b.mustConnect(t, busauth.Worker)
	sub, err := worker.SubscribeSync(events.Infer("chat"))
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, thief := range []string{busauth.Worker, busauth.Usage, busauth.Embedder, busauth.Retriever} {
		nc := b.mustConnect(t, thief)
		m := nats.NewMsg(events.Infer("chat"))
		m.Header.Set("Aiforge-Tenant", "acme")
		m.Header.Set("Aiforge-Key-Id", "key_none")
		m.Data = []byte(`{"model":"chat","messages":[{"role":"user","content":"bill acme"}]}`)
		m.Reply = busauth.InboxPrefix(thief) + ".forged"
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(nc.LastError(), nats.ErrPermissionViolation) {
			t.Fatalf("%s published an inference request: last error %v", thief, nc.LastError())
		}
	}
	// The edge's request reaches the worker, which may answer it; the
	// forged ones never arrived.
	edge := b.mustConnect(t, busauth.Edge)
	replies := make(chan *nats.Msg, 1)
	inbox := edge.NewInbox()
	rs, err := edge.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rs.Unsubscribe() }()
	if err := edge.PublishRequest(events.Infer("chat"), inbox, []byte("real")); err != nil {
		t.Fatal(err)
	}
	got, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Data) != "real" {
		t.Fatalf("the worker received %q first: a forged request went through", got.Data)
	}
	if err := got.Respond([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-replies:
		if string(r.Data) != "answer" {
			t.Fatalf("reply %q", r.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the worker's answer did not reach the edge (last error %v)", worker.LastError())
	}
	if n, _, _ := sub.Pending(); n != 0 {
		t.Fatalf("%d more requests reached the worker", n)
	}

	// A stolen worker credential cannot write a key.
	thief := b.mustConnect(t, busauth.Worker)
	js, _ := jetstream.New(thief)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.Publish(ctx, "$KV."+events.BucketKeys+".key_fedcba9876543210", []byte(`{"tenant":"acme"}`))
	if err == nil {
		t.Fatal("a worker credential wrote a key")
	}
	if !errors.Is(thief.LastError(), nats.ErrPermissionViolation) {
		t.Fatalf("key write by a worker: last error %v, want a permissions violation", thief.LastError())
	}
	adminJS, _ := jetstream.New(b.mustConnect(t, busauth.Admin))
	keys, err := adminJS.KeyValue(context.Background(), events.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Get(context.Background(), "key_fedcba9876543210"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the key exists after the refused write: %v", err)
	}
}

// The embedder and retriever credentials embed through a worker on the
// embedding family; a chat or completion request they send there is
// refused by the worker (403 endpoint_not_allowed) before it runs.
func testEmbedFamily(t *testing.T, b bus) {
	const model = "embed"
	served := make(chan string, 16)
	wnc := b.mustConnect(t, busauth.Worker)
	srv, err := bridge.NewServer(wnc, bridge.ServerConfig{Model: model, WorkerID: "w-1"},
		func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
			served <- req.Endpoint
			_ = w.Body(ctx, http.StatusOK, "application/json", []byte(`{"data":[]}`))
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, id := range []string{busauth.Embedder, busauth.Retriever} {
		c, err := bridge.NewClient(b.mustConnect(t, id), bridge.ClientConfig{Family: bridge.FamilyEmbed})
		if err != nil {
			t.Fatal(err)
		}
		req := func(endpoint string) *bridge.OutRequest {
			return &bridge.OutRequest{Model: model, ID: id + "-" + endpoint, Tenant: "acme", KeyID: "key_none",
				Endpoint: endpoint, Body: []byte(`{}`)}
		}
		res, err := c.Do(ctx, req(events.EndpointEmbeddings), func([]byte) error { return nil })
		if err != nil || res.Status != http.StatusOK || res.WorkerID != "w-1" {
			t.Fatalf("%s embeddings on %s: %+v, %v", id, events.Embed(model), res, err)
		}
		if got := <-served; got != events.EndpointEmbeddings {
			t.Fatalf("the worker served %q", got)
		}
		for _, ep := range []string{events.EndpointChatCompletions, events.EndpointCompletions} {
			_, err := c.Do(ctx, req(ep), func([]byte) error { return nil })
			var be *bridge.Error
			if !errors.As(err, &be) || be.Status != http.StatusForbidden || be.Code != contracts.CodeEndpointNotAllowed {
				t.Fatalf("%s %s on %s: %v, want 403 %s", id, ep, events.Embed(model), err, contracts.CodeEndpointNotAllowed)
			}
		}
		_ = c.Close()
	}
	select {
	case ep := <-served:
		t.Fatalf("the worker served a %q request sent on the embedding family", ep)
	default:
	}
}

func TestEmbeddedServer(t *testing.T) {
	b := embeddedBus(t)
	t.Run("no credentials", func(t *testing.T) { testNoCredentials(t, b) })
	t.Run("permission table", func(t *testing.T) { testPermissionTable(t, b) })
	t.Run("stolen credential", func(t *testing.T) { testStolenCredential(t, b) })
	t.Run("embed family", func(t *testing.T) { testEmbedFamily(t, b) })
}

func TestExternalServer(t *testing.T) {
	b := externalBus(t)
	t.Run("no credentials", func(t *testing.T) { testNoCredentials(t, b) })
	t.Run("permission table", func(t *testing.T) { testPermissionTable(t, b) })
	t.Run("stolen credential", func(t *testing.T) { testStolenCredential(t, b) })
	t.Run("embed family", func(t *testing.T) { testEmbedFamily(t, b) })
}

// The embedded server refuses to listen without users.
func TestNoListenerWithoutAuth(t *testing.T) {
	_, err := natsutil.StartEmbedded(natsutil.EmbeddedConfig{StoreDir: t.TempDir(), Port: -1})
	if err == nil || !strings.Contains(err.Error(), "without authentication") {
		t.Fatalf("StartEmbedded with a listener and no users: %v", err)
	}
}

// Seeds are written with mode 0600 and kept across starts.
func TestSeedsArePrivateAndStable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	a, err := busauth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := busauth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range busauth.Identities() {
		fi, err := os.Stat(busauth.SeedFile(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s seed mode %v", name, fi.Mode().Perm())
		}
		if a[name].PublicKey != b[name].PublicKey {
			t.Errorf("%s changed identity on the second start", name)
		}
	}
	conf, err := busauth.ServerConf(a, busauth.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range a {
		if strings.Contains(conf, string(id.Seed())) {
			t.Fatalf("the server configuration holds %s's seed", id.Name)
		}
	}
}
