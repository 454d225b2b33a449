package guardian

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/objstore/objstoretest"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/pkg/tenantbucket"
	"github.com/aiforge/aiforge/services/guardian/bucket"
)

// bucketEnv is a guardian watching tenant buckets on a real S3 server
// (versitygw), restartable on the same bus and object store.
type bucketEnv struct {
	t         *testing.T
	transport http.RoundTripper
	poll      time.Duration
	stall     time.Duration
	srv       *objstoretest.S3Server
	s3        *minio.Client
	js        jetstream.JetStream
	objects   objstore.Store
	cat       *catalog.Store
	configs   *tenantbucket.Store
	priv      *sealed.PrivateKey
	logs      *logBuf
	// notifyEvery is the watcher's NotifyInterval (0: its default).
	notifyEvery time.Duration
	svc         *Service
	stop        func()
}

func startBuckets(t *testing.T) *bucketEnv {
	t.Helper()
	return startBucketsWith(t, nil)
}

func startBucketsWith(t *testing.T, transport http.RoundTripper) *bucketEnv {
	return startBucketsPolling(t, transport, 0)
}

func startBucketsPolling(t *testing.T, transport http.RoundTripper, poll time.Duration, opts ...func(*bucketEnv)) *bucketEnv {
	t.Helper()
	srv := objstoretest.StartVersityGW(t)
	ctx := context.Background()
	cfg := srv.Config("tenant-models")
	admin, err := objstore.NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = objects.Close() })
	cat, err := catalog.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	configs, err := tenantbucket.OpenStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	e := &bucketEnv{t: t, transport: transport, poll: poll, srv: srv, s3: admin.Client(), js: js, objects: objects, cat: cat, configs: configs, priv: priv, logs: &logBuf{}}
	for _, o := range opts {
		o(e)
	}
	e.restart()
	t.Cleanup(func() { e.stop() })
	return e
}

// restart stops the running guardian (if any) and starts a new one.
func (e *bucketEnv) restart() {
	t := e.t
	t.Helper()
	if e.stop != nil {
		e.stop()
	}
	poll := e.poll
	if poll == 0 {
		poll = 100 * time.Millisecond
	}
	svc, err := New(Config{ScratchDir: t.TempDir(), Buckets: bucket.Config{PollInterval: poll, StallTimeout: e.stall, NotifyInterval: e.notifyEvery}},
		Deps{JS: e.js, Objects: e.objects, SecretsKey: e.priv, BucketTransport: e.transport,
			Logger: slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stopped := false
	e.svc = svc
	e.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// configure gives tenant a model bucket on the test server under prefix.
func (e *bucketEnv) configure(tenant, prefix, secret string) {
	e.t.Helper()
	pub := e.priv.Public()
	c, err := tenantbucket.Seal(&pub, tenantbucket.Config{Tenant: tenant, Endpoint: "http://" + e.srv.Endpoint,
		Bucket: "tenant-models", Prefix: prefix, Region: e.srv.Region, PathStyle: true},
		tenantbucket.Credentials{AccessKeyID: e.srv.AccessKeyID, SecretAccessKey: secret})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.configs.Put(context.Background(), c); err != nil {
		e.t.Fatal(err)
	}
}

func (e *bucketEnv) put(key string, body []byte) {
	e.t.Helper()
	if _, err := e.s3.PutObject(context.Background(), "tenant-models", key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// manifestOf is the manifest of files (overrides replace listed hashes).
func manifestOf(t *testing.T, kind string, files map[string][]byte, override map[string]string) []byte {
	t.Helper()
	m := bucket.Manifest{Kind: kind}
	for p, b := range files {
		h := sha(b)
		if o, ok := override[p]; ok {
			h = o
		}
		m.Files = append(m.Files, events.ModelFile{Path: p, Size: int64(len(b)), SHA256: h})
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// drop puts files under folder, then the manifest (last, as documented).
func (e *bucketEnv) drop(folder string, files map[string][]byte, manifest []byte) {
	e.t.Helper()
	for p, b := range files {
		e.put(folder+p, b)
	}
	if manifest != nil {
		e.put(folder+bucket.ManifestName, manifest)
	}
}

// passes waits for n more complete polls of every tenant bucket.
func (e *bucketEnv) passes(n uint64) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var w *bucket.Watcher
	for w == nil {
		e.svc.mu.Lock()
		w = e.svc.buckets
		e.svc.mu.Unlock()
		if time.Now().After(deadline) {
			e.t.Fatal("the guardian never started its bucket watcher")
		}
		time.Sleep(10 * time.Millisecond)
	}
	target := w.Passes() + n
	for w.Passes() < target {
		if time.Now().After(deadline) {
			e.t.Fatalf("the bucket watcher did not poll %d more times", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// polled waits until the running watcher completed n polls in all.
func (e *bucketEnv) polled(n uint64) {
	e.t.Helper()
	eventually := time.Now().Add(30 * time.Second)
	for {
		e.svc.mu.Lock()
		w := e.svc.buckets
		e.svc.mu.Unlock()
		if w != nil && w.Passes() >= n {
			return
		}
		if time.Now().After(eventually) {
			e.t.Fatalf("the bucket watcher did not poll %d times", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *bucketEnv) settled(name string, n int) catalog.Version {
	e.t.Helper()
	return (&env{cat: e.cat, logs: e.logs}).settled(e.t, name, n)
}

// TestTenantBucketDrops: folders dropped in a tenant's bucket become
// versions of that tenant's models: a good one published, one with a bad
// hash, an unsafe path or an unlisted file rejected with typed reasons; a
// folder without its manifest waits for it; a changed manifest makes a new
// version; a restart imports nothing again; a name of the platform's is
// refused; the credentials never show in logs or KV values.
func TestTenantBucketDrops(t *testing.T) {
	e := startBuckets(t)
	ctx := context.Background()
	e.configure("acme", "drops/acme/", e.srv.SecretAccessKey)
	// Another tenant with a wrong secret: its listing fails, and says so
	// without the secret.
	const wrongSecret = "wrong-secret-must-not-show-0c9a"
	e.configure("globex", "drops/globex/", wrongSecret)

	good := shardedModel()
	e.drop("drops/acme/tiny/", good, manifestOf(t, "model", good, nil))
	v := e.settled("acme/tiny", 1)
	if v.Status != catalog.StatusPublished || v.Parameters != 26 {
		t.Fatalf("good drop: %+v\nlogs:\n%s", v, e.logs.String())
	}
	if v.Source.Type != events.ModelSourceBucket || v.Source.Repo != "s3://tenant-models/drops/acme/tiny/" || v.Source.Commit == "" {
		t.Fatalf("source = %+v", v.Source)
	}
	if entry, _ := e.cat.Get(ctx, "acme/tiny"); entry.Tenant != "acme" || len(entry.Versions) != 1 {
		t.Fatalf("entry = %+v", entry)
	}
	for p, b := range good {
		if info, err := e.objects.Stat(ctx, v.Prefix+p); err != nil || info.SHA256 != sha(b) {
			t.Errorf("%s in the store: %+v, %v", p, info, err)
		}
	}

	// A bad hash.
	bad := map[string][]byte{"model.safetensors": safetensors(map[string][]int64{"w": {2, 2}}), "config.json": []byte(`{"model_type":"llama"}`)}
	e.drop("drops/acme/badhash/", bad, manifestOf(t, "model", bad, map[string]string{"model.safetensors": strings.Repeat("ab", 32)}))
	if v := e.settled("acme/badhash", 1); v.Status != catalog.StatusRejected || !hasReason(v, bucket.CodeHashMismatch, "model.safetensors") {
		t.Fatalf("bad hash: %+v", v)
	}
	// An unsafe path in the manifest.
	m := bucket.Manifest{Kind: "model", Files: []events.ModelFile{{Path: "../escape.safetensors", Size: 4, SHA256: strings.Repeat("00", 32)}}}
	raw, _ := json.Marshal(m)
	e.drop("drops/acme/unsafe/", nil, raw)
	if v := e.settled("acme/unsafe", 1); v.Status != catalog.StatusRejected || !hasReason(v, bucket.CodeUnsafePath, "") {
		t.Fatalf("unsafe path: %+v", v)
	}
	// A file the manifest does not list.
	extra := map[string][]byte{"model.safetensors": bad["model.safetensors"], "config.json": bad["config.json"]}
	e.drop("drops/acme/extra/", map[string][]byte{"run.py": []byte("import os\n")}, nil)
	e.drop("drops/acme/extra/", extra, manifestOf(t, "model", extra, nil))
	if v := e.settled("acme/extra", 1); v.Status != catalog.StatusRejected || !hasReason(v, bucket.CodeUnexpectedFile, "run.py") {
		t.Fatalf("unlisted file: %+v", v)
	}

	// No manifest yet: ignored, however many polls go by.
	later := shardedModel()
	e.drop("drops/acme/later/", later, nil)
	e.passes(3)
	if _, err := e.cat.Get(ctx, "acme/later"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("a folder without its manifest was imported: %v", err)
	}
	e.put("drops/acme/later/"+bucket.ManifestName, manifestOf(t, "model", later, nil))
	if v := e.settled("acme/later", 1); v.Status != catalog.StatusPublished {
		t.Fatalf("completed folder: %+v", v)
	}

	// A name the platform holds: refused, nothing added to its model.
	if _, err := e.cat.AddVersion(ctx, "acme/platform", "", "", catalog.Version{Source: catalog.Source{Type: events.ModelSourceUpload}}); err != nil {
		t.Fatal(err)
	}
	e.drop("drops/acme/platform/", good, manifestOf(t, "model", good, nil))
	key := bucket.FolderKey("acme", "tenant-models", "drops/acme/platform/")
	folders, err := e.js.KeyValue(ctx, events.BucketTenantBucketFolders)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ent, err := folders.Get(ctx, key)
		if err == nil && bytes.Contains(ent.Value(), []byte(bucket.CodeCatalogRefused)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the platform's name was not refused: %v\n%s", err, e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if entry, _ := e.cat.Get(ctx, "acme/platform"); len(entry.Versions) != 1 || entry.Tenant != "" {
		t.Fatalf("the platform's model changed: %+v", entry)
	}

	// Restart: nothing is imported again.
	e.restart()
	e.passes(3)
	for _, name := range []string{"acme/tiny", "acme/badhash", "acme/unsafe", "acme/extra", "acme/later"} {
		if entry, err := e.cat.Get(ctx, name); err != nil || len(entry.Versions) != 1 {
			t.Fatalf("%s after a restart: %d versions, %v", name, len(entry.Versions), err)
		}
	}

	// A changed manifest (a new ETag): a new version.
	good["README.md"] = []byte("---\nlicense: apache-2.0\n---\n# Tiny, retrained\n")
	e.drop("drops/acme/tiny/", good, manifestOf(t, "model", good, nil))
	if v := e.settled("acme/tiny", 2); v.Status != catalog.StatusPublished {
		t.Fatalf("changed manifest: %+v", v)
	}

	// The credentials: not in the logs, not in any KV value.
	logs := e.logs.String()
	if !strings.Contains(logs, "globex") || !strings.Contains(logs, "listing failed") {
		t.Errorf("the failing tenant's listing was not reported:\n%s", logs)
	}
	for _, secret := range []string{e.srv.SecretAccessKey, wrongSecret} {
		if strings.Contains(logs, secret) {
			t.Errorf("a secret is in the logs")
		}
	}
	for _, b := range []string{events.BucketTenantBuckets, events.BucketTenantBucketFolders, events.BucketCatalog} {
		kvb, err := e.js.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kvb.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k := range keys.Keys() {
			ent, err := kvb.Get(ctx, k)
			if err != nil {
				continue
			}
			for _, secret := range []string{e.srv.SecretAccessKey, wrongSecret, e.srv.AccessKeyID} {
				if bytes.Contains(ent.Value(), []byte(secret)) {
					t.Errorf("%s/%s holds a credential", b, k)
				}
			}
		}
	}
}

// flakyTransport fails the requests whose path contains broken while it
// is set: the tenant's S3 going away mid-import.
type flakyTransport struct {
	mu     sync.Mutex
	broken string
	failed int
	// hang: the broken requests answer their headers, then never a byte
	// of the body.
	hang bool
}

// hangingBody blocks until its request's context ends.
type hangingBody struct{ ctx context.Context }

func (h hangingBody) Read([]byte) (int, error) { <-h.ctx.Done(); return 0, h.ctx.Err() }
func (h hangingBody) Close() error             { return nil }

func (f *flakyTransport) set(s string) { f.mu.Lock(); f.broken = s; f.mu.Unlock() }

func (f *flakyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	broken := f.broken != "" && strings.Contains(r.URL.Path, f.broken)
	if broken {
		f.failed++
	}
	f.mu.Unlock()
	if broken && !f.hang {
		return nil, errors.New("connection refused (test)")
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if broken && err == nil && r.Method == http.MethodGet {
		_ = resp.Body.Close()
		resp.Body = hangingBody{r.Context()}
	}
	return resp, err
}

// TestTenantBucketTransientFailure: a folder whose file cannot be read
// (S3 failing) is not rejected: it is recorded as failed, tried again at
// each poll, and imported into the same catalog version once S3 answers.
func TestTenantBucketTransientFailure(t *testing.T) {
	ft := &flakyTransport{}
	e := startBucketsWith(t, ft)
	ctx := context.Background()
	e.configure("acme", "drops/acme/", e.srv.SecretAccessKey)
	ft.set("drops/acme/flaky/model-00002")
	files := shardedModel()
	e.drop("drops/acme/flaky/", files, manifestOf(t, "model", files, nil))

	folders, err := e.js.KeyValue(ctx, events.BucketTenantBucketFolders)
	if err != nil {
		t.Fatal(err)
	}
	key := bucket.FolderKey("acme", "tenant-models", "drops/acme/flaky/")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var f bucket.Folder
		if ent, err := folders.Get(ctx, key); err == nil && json.Unmarshal(ent.Value(), &f) == nil && f.Attempts >= 2 && f.Version == 1 {
			break
		}
		if time.Now().After(deadline) {
			ent, err := folders.Get(ctx, key)
			t.Fatalf("the failing folder was not retried: %v %v", ent, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if entry, err := e.cat.Get(ctx, "acme/flaky"); err != nil || len(entry.Versions) != 1 || entry.Versions[0].Status != catalog.StatusUploading {
		t.Fatalf("while S3 fails: %+v, %v", entry, err)
	}
	ft.set("")
	if v := e.settled("acme/flaky", 1); v.Status != catalog.StatusPublished {
		t.Fatalf("after S3 came back: %+v", v)
	}
	if entry, _ := e.cat.Get(ctx, "acme/flaky"); len(entry.Versions) != 1 {
		t.Fatalf("the retry made another version: %+v", entry.Versions)
	}
}

// TestTenantBucketNotification: with a poll far away, the notification an
// S3 event makes at the edge (events.ModelBucketNotify) has the guardian
// list the bucket now.
func TestTenantBucketNotification(t *testing.T) {
	e := startBucketsPolling(t, nil, time.Hour)
	e.polled(1) // running
	e.configure("acme", "drops/acme/", e.srv.SecretAccessKey)
	e.restart() // polls once at start, then only when told
	e.polled(1)
	files := shardedModel()
	e.drop("drops/acme/notified/", files, manifestOf(t, "model", files, nil))
	if err := e.js.Conn().Publish(events.ModelBucketNotify("acme"), nil); err != nil {
		t.Fatal(err)
	}
	if v := e.settled("acme/notified", 1); v.Status != catalog.StatusPublished {
		t.Fatalf("after the notification: %+v", v)
	}
}

// TestTenantBucketStalledCopy: a bucket that stops sending a file's bytes
// does not hold the guardian forever: the copy is abandoned after the
// stall timeout, recorded as a failure and tried again.
func TestTenantBucketStalledCopy(t *testing.T) {
	ft := &flakyTransport{hang: true}
	e := startBucketsPolling(t, ft, 0, func(e *bucketEnv) { e.stall = 200 * time.Millisecond })
	ctx := context.Background()
	e.configure("acme", "drops/acme/", e.srv.SecretAccessKey)
	ft.set("drops/acme/stalled/model-00001")
	files := shardedModel()
	e.drop("drops/acme/stalled/", files, manifestOf(t, "model", files, nil))
	folders, err := e.js.KeyValue(ctx, events.BucketTenantBucketFolders)
	if err != nil {
		t.Fatal(err)
	}
	key := bucket.FolderKey("acme", "tenant-models", "drops/acme/stalled/")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var f bucket.Folder
		if ent, err := folders.Get(ctx, key); err == nil && json.Unmarshal(ent.Value(), &f) == nil && f.Attempts >= 1 && strings.Contains(f.Error, "stopped sending") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled copy was not abandoned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ft.set("")
	if v := e.settled("acme/stalled", 1); v.Status != catalog.StatusPublished {
		t.Fatalf("after the bucket recovered: %+v", v)
	}
}

// TestTenantBucketSupersededImport: a manifest replaced while its import
// keeps failing leaves no version waiting forever: the unfinished one is
// rejected as superseded, and the new manifest makes the next version.
// Polls happen only when asked (a poll an hour away, notifications).
func TestTenantBucketSupersededImport(t *testing.T) {
	ft := &flakyTransport{}
	e := startBucketsPolling(t, ft, time.Hour)
	e.polled(1)
	ctx := context.Background()
	ft.set("drops/acme/redo/model-00002")
	files := shardedModel()
	e.drop("drops/acme/redo/", files, manifestOf(t, "model", files, nil))
	e.configure("acme", "drops/acme/", e.srv.SecretAccessKey)
	e.restart() // its one poll at start: the import fails; then none until told
	e.polled(1)
	folders, err := e.js.KeyValue(ctx, events.BucketTenantBucketFolders)
	if err != nil {
		t.Fatal(err)
	}
	key := bucket.FolderKey("acme", "tenant-models", "drops/acme/redo/")
	eventuallyT(t, func() bool {
		var f bucket.Folder
		ent, err := folders.Get(ctx, key)
		return err == nil && json.Unmarshal(ent.Value(), &f) == nil && f.Status == bucket.FolderFailed && f.Version == 1
	}, "the first import's failure")
	// The tenant replaces the model card and the manifest; its S3 answers again.
	files["README.md"] = []byte("---\nlicense: apache-2.0\n---\n# Tiny, take two\n")
	e.drop("drops/acme/redo/", files, manifestOf(t, "model", files, nil))
	ft.set("")
	if err := e.js.Conn().Publish(events.ModelBucketNotify("acme"), nil); err != nil {
		t.Fatal(err)
	}
	if v := e.settled("acme/redo", 2); v.Status != catalog.StatusPublished {
		t.Fatalf("the new manifest: %+v", v)
	}
	if v := e.settled("acme/redo", 1); v.Status != catalog.StatusRejected || !hasReason(v, bucket.CodeSuperseded, "") {
		t.Fatalf("the superseded version: %+v", v)
	}
}

func eventuallyT(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTenantBucketMetadataEndpointNeverDialled: a tenant's endpoint that
// names (or comes to resolve to) the cloud metadata address is refused at
// the dial (the edge refuses it when it is set; this is the record written
// past it, or a DNS name that changed), and the watcher says so.
func TestTenantBucketMetadataEndpointNeverDialled(t *testing.T) {
	e := startBuckets(t)
	pub := e.priv.Public()
	c, err := tenantbucket.Seal(&pub, tenantbucket.Config{Tenant: "acme", Endpoint: "http://169.254.169.254",
		Bucket: "tenant-models", Prefix: "drops/acme/", Region: e.srv.Region, PathStyle: true},
		tenantbucket.Credentials{AccessKeyID: e.srv.AccessKeyID, SecretAccessKey: e.srv.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.configs.Put(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(e.logs.String(), "address refused") {
		if time.Now().After(deadline) {
			t.Fatalf("no refused dial in the logs:\n%s", e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(e.logs.String(), e.srv.SecretAccessKey) {
		t.Fatal("the secret access key is in the logs")
	}
}

// listCounter counts the listings of each prefix of the tenants' bucket.
type listCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *listCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if q := r.URL.Query(); r.Method == http.MethodGet && q.Has("list-type") {
		c.mu.Lock()
		c.n[q.Get("prefix")]++
		c.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (c *listCounter) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[prefix]
}

// TestTenantBucketNotificationsListOnlyTheirTenantOncePerInterval: a
// tenant's flood of S3 event notifications has its own bucket listed once
// per NotifyInterval, and no other tenant's: shared listing capacity is not
// one tenant's to take.
func TestTenantBucketNotificationsListOnlyTheirTenantOncePerInterval(t *testing.T) {
	lc := &listCounter{n: map[string]int{}}
	e := startBucketsPolling(t, lc, time.Hour, func(e *bucketEnv) { e.notifyEvery = time.Hour })
	e.configure("acme", "drops/acme/", e.srv.SecretAccessKey)
	e.configure("globex", "drops/globex/", e.srv.SecretAccessKey)
	e.restart() // polls every tenant once at start, then only when told
	e.polled(1)
	e.svc.mu.Lock()
	w := e.svc.buckets
	e.svc.mu.Unlock()
	acme, globex := lc.count("drops/acme/"), lc.count("drops/globex/")
	if acme == 0 || globex == 0 {
		t.Fatalf("the first poll listed acme %d and globex %d times", acme, globex)
	}
	const flood = 50
	for range flood {
		if err := e.js.Conn().Publish(events.ModelBucketNotify("acme"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.Notifications() < flood || w.NotifiedPolls() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("notifications %d, notified polls %d", w.Notifications(), w.NotifiedPolls())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := lc.count("drops/acme/") - acme; got != 1 {
		t.Errorf("%d notifications listed acme's bucket %d times, want once in the interval", flood, got)
	}
	if got := lc.count("drops/globex/") - globex; got != 0 {
		t.Errorf("acme's notifications listed globex's bucket %d times", got)
	}
	if err := e.js.Conn().Publish(events.ModelBucketNotify("globex"), nil); err != nil {
		t.Fatal(err)
	}
	for w.NotifiedPolls() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("globex's notification led to no listing (notified polls %d)", w.NotifiedPolls())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := lc.count("drops/globex/") - globex; got != 1 {
		t.Errorf("globex's notification listed its bucket %d times", got)
	}
}
