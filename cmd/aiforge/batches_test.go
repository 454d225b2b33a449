package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/files"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/services/edge"
)

const cliAdminKey = "cmd-batches-admin-key-0123"

type cliEdge struct {
	url  string
	nc   *nats.Conn
	js   jetstream.JetStream
	objs objstore.Store
}

func startCLIEdge(t *testing.T) *cliEdge {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	priv, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.Public()
	reg := prometheus.NewRegistry()
	svc, err := edge.New(edge.Config{AdminKey: cliAdminKey, ShutdownGrace: time.Second, SecretsKey: &pub},
		edge.Deps{NC: nc, JS: js, Registerer: reg, Gatherer: reg, Listener: ln, Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = objs.Close() })
	for !svc.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	return &cliEdge{url: "http://" + ln.Addr().String(), nc: nc, js: js, objs: objs}
}

// aiforge runs the command line against the edge: stdout, stderr, error.
func (e *cliEdge) aiforge(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(append(args, "--url", e.url))
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func (e *cliEdge) must(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := e.aiforge(t, args...)
	if err != nil {
		t.Fatalf("aiforge %v: %v\n%s%s", args, err, out, errOut)
	}
	return out
}

// fakeBatchService plays the batch service on the edge's buckets: every
// batch created goes to in_progress, then completes with an output and an
// error file. It reacts to the bucket's changes, as the real one does.
func (e *cliEdge) fakeBatchService(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b, err := e.js.KeyValue(ctx, events.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := e.js.KeyValue(ctx, events.BucketFiles)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Watch(ctx, batch.AllBatches, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for u := range w.Updates() {
			if u == nil || u.Operation() != jetstream.KeyValuePut {
				continue
			}
			var r batch.Record
			if json.Unmarshal(u.Value(), &r) != nil {
				continue
			}
			switch r.Status {
			case batch.StatusValidating:
				now := time.Now().Unix()
				r.Status, r.InProgressAt, r.RequestCounts = batch.StatusInProgress, &now, batch.RequestCounts{Total: 2}
			case batch.StatusInProgress:
				out, errs := "file-o"+r.ID[6:], "file-e"+r.ID[6:]
				for id, line := range map[string]string{out: `{"custom_id":"a"}`, errs: `{"custom_id":"b"}`} {
					key := files.ObjectKey(r.Tenant, id)
					info, err := e.objs.Put(ctx, key, strings.NewReader(line+"\n"), -1, "application/jsonl")
					if err != nil {
						return
					}
					_, _ = kv.Create(ctx, fb, files.Key(r.Tenant, id), files.Record{File: files.File{ID: id, Object: "file", Bytes: info.Size,
						Purpose: files.PurposeBatchOutput, Status: files.StatusProcessed, Filename: id}, Tenant: r.Tenant, ObjectKey: key})
				}
				now := time.Now().Unix()
				r.Status, r.CompletedAt, r.OutputFileID, r.ErrorFileID = batch.StatusCompleted, &now, &out, &errs
				r.RequestCounts.Completed, r.RequestCounts.Failed = 1, 1
			default:
				continue
			}
			data, _ := json.Marshal(r)
			_, _ = b.Update(ctx, u.Key(), data, u.Revision())
		}
	}()
}

// `aiforge batches ...` run a batch end to end against a real edge, and
// the admin commands configure its queues and webhooks.
func TestBatchesCommands(t *testing.T) {
	e := startCLIEdge(t)
	t.Setenv("AIFORGE_ADMIN_KEY", cliAdminKey)
	e.must(t, "tenants", "create", "acme")
	out := e.must(t, "keys", "create", "--tenant", "acme")
	i := strings.Index(out, "AIFORGE_API_KEY=")
	t.Setenv("AIFORGE_API_KEY", strings.Fields(out[i+len("AIFORGE_API_KEY="):])[0])
	e.fakeBatchService(t)

	dir := t.TempDir()
	in := filepath.Join(dir, "requests.jsonl")
	if err := os.WriteFile(in, []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`+"\n"+
		`{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := e.aiforge(t, "batches", "create", in, "--endpoint", "/v1/chat/completions", "--metadata", "job=nightly", "--wait", "--poll", "10ms")
	if err != nil {
		t.Fatalf("create --wait: %v\n%s%s", err, stdout, stderr)
	}
	if !strings.Contains(stdout, ": completed") || !strings.Contains(stdout, "2 total, 1 completed, 1 failed") || !strings.Contains(stdout, "output file    file-o") ||
		!strings.Contains(stdout, "job=nightly") {
		t.Fatalf("stdout:\n%s", stdout)
	}
	if !strings.Contains(stderr, "created batch batch_") || !strings.Contains(stderr, "2/2 lines (1 failed)") {
		t.Fatalf("stderr:\n%s", stderr)
	}
	id := strings.Fields(stdout)[1]
	id = strings.TrimSuffix(id, ":")

	out = e.must(t, "batches", "results", id, "--out", dir)
	got, err := os.ReadFile(filepath.Join(dir, id+"_output.jsonl"))
	if err != nil || !strings.Contains(string(got), `"custom_id":"a"`) || !strings.Contains(out, "errors") {
		t.Fatalf("results: %s %q %v", out, got, err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, id+"_errors.jsonl")); err != nil || !strings.Contains(string(got), `"custom_id":"b"`) {
		t.Fatalf("errors file %q %v", got, err)
	}
	if out := e.must(t, "batches", "list"); !strings.Contains(out, id) || !strings.Contains(out, "completed") || !strings.Contains(out, "2/2") {
		t.Fatalf("list:\n%s", out)
	}
	if out := e.must(t, "batches", "get", id, "--json"); !strings.Contains(out, `"status": "completed"`) {
		t.Fatalf("get --json:\n%s", out)
	}
	if _, _, err := e.aiforge(t, "batches", "cancel", id); err == nil || !strings.Contains(err.Error(), "batch_not_cancellable") {
		t.Fatalf("cancel a completed batch: %v", err)
	}
	if out := e.must(t, "batches", "create", in, "--idempotency-key", "k1"); !strings.Contains(out, "created batch") {
		t.Fatalf("create:\n%s", out)
	}

	// Admin: flavors, cohorts, pools, queues, the scheduler's state.
	e.must(t, "batches", "flavors", "set", "cpu-moe", "--description", "CPU, experts from NVMe")
	e.must(t, "batches", "cohorts", "set", "frontier")
	e.must(t, "batches", "pools", "set", "moe", "--models", "deepseek-v3,kimi-k2", "--quota", "cpu-moe=64:500,borrow=16", "--cohort", "frontier")
	e.must(t, "batches", "queues", "set", "moe", "acme", "--weight", "2", "--max-enqueued-lines", "1000")
	qb, err := e.js.KeyValue(context.Background(), events.BucketBatchQueues)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := kv.Get[batch.Pool](context.Background(), qb, batch.PoolKey("moe"))
	if err != nil || len(p.Models) != 2 || p.Cohort != "frontier" || p.Quotas[0].Lines != 64 || p.Quotas[0].TokensPerSecond != 500 || *p.Quotas[0].BorrowingLimit != 16 {
		t.Fatalf("pool %+v %v", p, err)
	}
	q, _, err := kv.Get[batch.Queue](context.Background(), qb, batch.QueueKey("moe", "acme"))
	if err != nil || q.Weight != 2 || q.MaxEnqueuedLines != 1000 {
		t.Fatalf("queue %+v %v", q, err)
	}
	for _, c := range [][]string{{"batches", "pools", "list"}, {"batches", "queues", "list"}, {"batches", "flavors", "list"}, {"batches", "cohorts", "list"}} {
		if out := e.must(t, c...); !strings.Contains(out, "moe") && !strings.Contains(out, "cpu-moe") && !strings.Contains(out, "frontier") {
			t.Fatalf("%v:\n%s", c, out)
		}
	}
	if _, _, err := e.aiforge(t, "batches", "queues"); err == nil || !strings.Contains(err.Error(), "batch service is not running") {
		t.Fatalf("queues without a batch service: %v", err)
	}
	sub, err := e.nc.Subscribe(events.BatchQuery, func(m *nats.Msg) {
		b, _ := json.Marshal(batch.QueuesReply{Pools: []batch.PoolStatus{{Name: "moe", Flavors: []batch.FlavorStatus{{Flavor: "cpu-moe", Nominal: 64, InUse: 70, Borrowed: 6}}}},
			Queues: []batch.QueueStatus{{Pool: "moe", Tenant: "acme", Weight: 2, Share: 0.5, Admitted: 70, Borrowed: 6, Waiting: 900}}})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = e.nc.Flush()
	if out := e.must(t, "batches", "queues"); !strings.Contains(out, "acme") || !strings.Contains(out, "0.500") || !strings.Contains(out, "900") || !strings.Contains(out, "NOMINAL") {
		t.Fatalf("queues:\n%s", out)
	}
	e.must(t, "batches", "queues", "delete", "moe", "acme")

	// Webhooks: the secret is printed once.
	out = e.must(t, "tenants", "webhook", "set", "acme", "https://hooks.example.com/x", "--events", "batch.completed,batch.failed")
	if !strings.Contains(out, "signing secret: whsec_") {
		t.Fatalf("webhook set:\n%s", out)
	}
	if out := e.must(t, "tenants", "webhook", "get", "acme"); strings.Contains(out, "whsec_") || !strings.Contains(out, "batch.completed, batch.failed") {
		t.Fatalf("webhook get:\n%s", out)
	}
	e.must(t, "tenants", "webhook", "delete", "acme")

	// Prices with a batch discount; a supervised engine.
	e.must(t, "models", "price", "m", "--input", "1", "--output", "2", "--batch-discount", "0.4")
	prices := cli.Client{BaseURL: e.url, Token: cliAdminKey}
	var ph struct {
		Data []registry.PriceHistory `json:"data"`
	}
	if err := prices.Do(context.Background(), "GET", "/admin/v1/prices", nil, &ph); err != nil || len(ph.Data) != 1 || *ph.Data[0].Prices[0].BatchDiscount != 0.4 {
		t.Fatalf("prices %+v %v", ph, err)
	}
	e.must(t, "models", "register", "deepseek", "--process-kind", "llama-server", "--process-model", "/models/ds.gguf", "--process-port", "8091",
		"--moe-placement", "auto", "--class", "cpu-moe", "--process-arg", "--mlock", "--process-env", "LLAMA_ARG_THREADS=32", "--idle-stop", "5m")
	var m struct {
		Engine registry.Engine `json:"engine"`
	}
	if err := prices.Do(context.Background(), "GET", "/admin/v1/models/deepseek", nil, &m); err != nil || m.Engine.Class != "cpu-moe" || m.Engine.Process == nil ||
		m.Engine.Process.Kind != "llama-server" || m.Engine.Process.MoEPlacement != "auto" || m.Engine.BaseURL != "http://127.0.0.1:8091/v1" ||
		m.Engine.Model != "deepseek" || m.Engine.Process.Env["LLAMA_ARG_THREADS"] != "32" || m.Engine.Process.Args[0] != "--mlock" ||
		m.Engine.Process.IdleStop.D() != 5*time.Minute {
		t.Fatalf("model %+v %v", m.Engine, err)
	}
	if _, _, err := e.aiforge(t, "models", "register", "x", "--upstream", "u"); err == nil || !strings.Contains(err.Error(), "--base-url is required") {
		t.Fatalf("register without an engine address: %v", err)
	}
	if _, _, err := e.aiforge(t, "models", "register", "x", "--base-url", "http://a/v1", "--upstream", "u", "--moe-placement", "cpu"); err == nil || !strings.Contains(err.Error(), "--process-kind") {
		t.Fatalf("process flags without a kind: %v", err)
	}
	if _, _, err := e.aiforge(t, "models", "register", "x", "--base-url", "http://a/v1", "--upstream", "u", "--idle-stop", "5m"); err == nil || !strings.Contains(err.Error(), "--process-kind") {
		t.Fatalf("--idle-stop without a kind: %v", err)
	}
}

// The batch commands take --url like every client group, and the tenant
// ones say which key they need.
func TestBatchesCommandsTakeURL(t *testing.T) {
	root := newRoot()
	g, _, err := root.Find([]string{"batches"})
	if err != nil || !strings.Contains(g.Long, "AIFORGE_URL") || !strings.Contains(g.Long, "AIFORGE_API_KEY") {
		t.Fatalf("batches group: %v %q", err, g.Long)
	}
	n := 0
	for _, c := range g.Commands() {
		for _, s := range append(c.Commands(), c) {
			n++
			if s.InheritedFlags().Lookup("url") == nil {
				t.Errorf("%s takes no --url", s.CommandPath())
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d batch commands", n)
	}
	t.Setenv("AIFORGE_API_KEY", "")
	root.SetArgs([]string{"batches", "list"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "AIFORGE_API_KEY") {
		t.Fatalf("without a key: %v", err)
	}
}
