package cli_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/files"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/edge"
)

// batchEdge is a real edge with an object store, an admin client and a
// tenant key's client; the test plays the batch service on its buckets.
type batchEdge struct {
	admin, tenant *cli.Client
	js            jetstream.JetStream
	objs          objstore.Store
}

func startBatchEdge(t *testing.T) *batchEdge {
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
	reg := prometheus.NewRegistry()
	svc, err := edge.New(edge.Config{AdminKey: adminKey, ShutdownGrace: time.Second}, edge.Deps{NC: nc, JS: js, Registerer: reg, Gatherer: reg, Listener: ln, Objects: objs})
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
	base := "http://" + ln.Addr().String()
	admin := &cli.Client{BaseURL: base, Token: adminKey}
	if err := admin.Do(ctx, "POST", "/admin/v1/tenants", map[string]string{"id": "acme"}, nil); err != nil {
		t.Fatal(err)
	}
	var k struct {
		Key string `json:"key"`
	}
	if err := admin.Do(ctx, "POST", "/admin/v1/keys", map[string]any{"tenant": "acme"}, &k); err != nil {
		t.Fatal(err)
	}
	return &batchEdge{admin: admin, tenant: &cli.Client{BaseURL: base, Token: k.Key}, js: js, objs: objs}
}

// advance plays the batch service: it moves a batch one step further.
func (e *batchEdge) advance(t *testing.T, id string, fn func(*batch.Record)) {
	t.Helper()
	b, err := e.js.KeyValue(context.Background(), events.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := kv.Update(context.Background(), b, batch.Key("acme", id), func(r *batch.Record, exists bool) error {
		fn(r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// writeOutput stores a batch_output file as the batch service does.
func (e *batchEdge) writeOutput(t *testing.T, id, content string) {
	t.Helper()
	ctx := context.Background()
	key := files.ObjectKey("acme", id)
	info, err := e.objs.Put(ctx, key, strings.NewReader(content), int64(len(content)), "application/jsonl")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.js.KeyValue(ctx, events.BucketFiles)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, b, files.Key("acme", id), files.Record{File: files.File{ID: id, Object: "file", Bytes: info.Size, CreatedAt: time.Now().Unix(),
		Filename: id + ".jsonl", Purpose: files.PurposeBatchOutput, Status: files.StatusProcessed}, Tenant: "acme", ObjectKey: key}); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// The client uploads a batch file, creates a batch (idempotently), waits
// for it while the batch service moves it along, and downloads its
// output and error files.
func TestBatchClientLifecycle(t *testing.T) {
	e := startBatchEdge(t)
	ctx := context.Background()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	lines := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}` + "\n" +
		`{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}` + "\n"
	if err := os.WriteFile(in, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	var pbuf bytes.Buffer
	f, err := e.tenant.UploadFile(ctx, in, files.PurposeBatch, cli.NewProgress(&pbuf, false, "upload", int64(len(lines))))
	if err != nil || f.Purpose != files.PurposeBatch || f.Bytes != int64(len(lines)) || f.Filename != "in.jsonl" {
		t.Fatalf("upload: %v %+v", err, f)
	}
	if !strings.Contains(pbuf.String(), "100%") {
		t.Fatalf("upload progress %q", pbuf.String())
	}
	b, err := e.tenant.CreateBatch(ctx, cli.BatchCreate{InputFileID: f.ID, Endpoint: batch.EndpointChatCompletions, Metadata: map[string]string{"k": "v"}}, "key-1")
	if err != nil || b.Status != batch.StatusValidating || b.Metadata["k"] != "v" {
		t.Fatalf("create: %v %+v", err, b)
	}
	if again, err := e.tenant.CreateBatch(ctx, cli.BatchCreate{InputFileID: f.ID, Endpoint: batch.EndpointChatCompletions, Metadata: map[string]string{"k": "v"}}, "key-1"); err != nil || again.ID != b.ID {
		t.Fatalf("idempotent create: %v %v", err, again.ID)
	}
	_, err = e.tenant.CreateBatch(ctx, cli.BatchCreate{InputFileID: f.ID, Endpoint: batch.EndpointEmbeddings}, "key-1")
	var ae *cli.APIError
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Code != "idempotency_key_reused" {
		t.Fatalf("reused key: %v", err)
	}

	// Each poll moves the batch one step: in progress, half done,
	// finalizing, completed with its files.
	steps := []func(*batch.Record){
		func(r *batch.Record) {
			r.Status, r.InProgressAt, r.RequestCounts = batch.StatusInProgress, ptr(time.Now().Unix()), batch.RequestCounts{Total: 2}
		},
		func(r *batch.Record) { r.RequestCounts.Completed = 1 },
		func(r *batch.Record) { r.Status, r.RequestCounts.Failed = batch.StatusFinalizing, 1 },
		func(r *batch.Record) {
			e.writeOutput(t, "file-out1", `{"id":"r1","custom_id":"a"}`+"\n")
			e.writeOutput(t, "file-err1", `{"id":"r2","custom_id":"b"}`+"\n")
			r.Status, r.OutputFileID, r.ErrorFileID, r.CompletedAt = batch.StatusCompleted, ptr("file-out1"), ptr("file-err1"), ptr(time.Now().Unix())
		},
	}
	var seen []string
	var prog bytes.Buffer
	bar := cli.NewBatchProgress(&prog, false, nil)
	final, err := e.tenant.WaitBatch(ctx, b.ID, 5*time.Millisecond, func(cur batch.Batch) {
		bar.Update(cur)
		seen = append(seen, cur.Status)
		if len(steps) > 0 {
			e.advance(t, b.ID, steps[0])
			steps = steps[1:]
		}
	})
	bar.Finish()
	if err != nil || final.Status != batch.StatusCompleted || final.RequestCounts != (batch.RequestCounts{Total: 2, Completed: 1, Failed: 1}) {
		t.Fatalf("wait: %v %+v", err, final)
	}
	if strings.Join(seen, ",") != "validating,in_progress,in_progress,finalizing,completed" {
		t.Fatalf("states seen %v", seen)
	}
	if !strings.Contains(prog.String(), "2/2 lines (1 failed)") || !strings.Contains(prog.String(), "completed") {
		t.Fatalf("progress:\n%s", prog.String())
	}

	out := filepath.Join(dir, "results")
	res, err := e.tenant.DownloadBatchResults(ctx, final, out)
	if err != nil || len(res) != 2 {
		t.Fatalf("results: %v %+v", err, res)
	}
	for _, r := range res {
		got, err := os.ReadFile(r.Path)
		want := map[string]string{"output": `"custom_id":"a"`, "errors": `"custom_id":"b"`}[r.Kind]
		if err != nil || !strings.Contains(string(got), want) || r.Bytes != int64(len(got)) || filepath.Base(r.Path) != b.ID+"_"+r.Kind+".jsonl" {
			t.Fatalf("%s file %s: %q %v", r.Kind, r.Path, got, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(out, ".download-*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	// List pages and cancel.
	second, err := e.tenant.CreateBatch(ctx, cli.BatchCreate{InputFileID: f.ID, Endpoint: batch.EndpointCompletions}, "")
	if err != nil {
		t.Fatal(err)
	}
	page, err := e.tenant.ListBatches(ctx, "", 1)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != second.ID || !page.HasMore {
		t.Fatalf("page 1: %v %+v", err, page)
	}
	page, err = e.tenant.ListBatches(ctx, *page.LastID, 1)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != b.ID || page.HasMore {
		t.Fatalf("page 2: %v %+v", err, page)
	}
	c, err := e.tenant.CancelBatch(ctx, second.ID)
	if err != nil || c.Status != batch.StatusCancelling {
		t.Fatalf("cancel: %v %+v", err, c)
	}
	if _, err := e.tenant.CancelBatch(ctx, b.ID); !errors.As(err, &ae) || ae.Code != "batch_not_cancellable" {
		t.Fatalf("cancel a completed batch: %v", err)
	}
	if _, err := e.tenant.WaitBatch(ctx, "batch_nope", time.Millisecond, nil); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("wait for no batch: %v", err)
	}
}

// The progress line shows lines done of the total, the mean rate since
// lines started moving, and the ETA from it.
func TestBatchProgressLine(t *testing.T) {
	now := time.Unix(1000, 0)
	var out bytes.Buffer
	p := cli.NewBatchProgress(&out, false, func() time.Time { return now })
	st := func(status string, total, completed, failed int64) batch.Batch {
		return batch.Batch{ID: "batch_1", Status: status, RequestCounts: batch.RequestCounts{Total: total, Completed: completed, Failed: failed}}
	}
	p.Update(st(batch.StatusValidating, 0, 0, 0))
	if l := p.Line(); l != "0/0 lines  -- lines/s  ETA --:--  validating" {
		t.Fatalf("validating: %q", l)
	}
	p.Update(st(batch.StatusInProgress, 1000, 0, 0))
	now = now.Add(10 * time.Second)
	p.Update(st(batch.StatusInProgress, 1000, 95, 5))
	if l := p.Line(); l != "100/1000 lines (5 failed)  10.0 lines/s  ETA 1:30  in_progress" {
		t.Fatalf("in progress: %q", l)
	}
	now = now.Add(time.Second)
	p.Update(st(batch.StatusInProgress, 1000, 105, 5)) // within PlainEvery: not printed
	now = now.Add(89 * time.Second)
	p.Update(st(batch.StatusCompleted, 1000, 990, 10))
	if l := p.Line(); l != "1000/1000 lines (10 failed)  10.0 lines/s  ETA 0:00  completed" {
		t.Fatalf("completed: %q", l)
	}
	p.Finish()
	// Plain output: a line per status change, every PlainEvery and at the
	// end, not one per poll.
	if n := strings.Count(out.String(), "\n"); n != 4 || strings.Contains(out.String(), "110/1000") {
		t.Fatalf("%d plain lines:\n%s", n, out.String())
	}
	var tty bytes.Buffer
	tp := cli.NewBatchProgress(&tty, true, func() time.Time { return now })
	tp.Update(st(batch.StatusInProgress, 10, 5, 0))
	tp.Finish()
	if !strings.Contains(tty.String(), "\r\033[Kbatch_1 [===============               ]  50%") || !strings.HasSuffix(tty.String(), "\n") {
		t.Fatalf("tty %q", tty.String())
	}
}

func TestParseQuota(t *testing.T) {
	q, err := cli.ParseQuota("cpu-moe=64:500,borrow=16,lend=8")
	if err != nil || q.Flavor != "cpu-moe" || q.Lines != 64 || q.TokensPerSecond != 500 || *q.BorrowingLimit != 16 || *q.LendingLimit != 8 {
		t.Fatalf("%+v %v", q, err)
	}
	if q, err := cli.ParseQuota("gpu=8"); err != nil || q.Lines != 8 || q.TokensPerSecond != 0 || q.BorrowingLimit != nil {
		t.Fatalf("%+v %v", q, err)
	}
	for _, bad := range []string{"gpu", "=8", "gpu=x", "gpu=8:y", "gpu=8,steal=1", "gpu=-1"} {
		if _, err := cli.ParseQuota(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestQueuesTables(t *testing.T) {
	var out bytes.Buffer
	cli.QueuesTables(&out, batch.QueuesReply{
		Pools:  []batch.PoolStatus{{Name: "moe", Cohort: "frontier", Flavors: []batch.FlavorStatus{{Flavor: "cpu-moe", Nominal: 8, InUse: 10, Borrowed: 2, TokensPerSecond: 500, TokensRate: 420}}}, {Name: "m", Implicit: true}},
		Queues: []batch.QueueStatus{{Pool: "moe", Tenant: "acme", Weight: 2, Share: 0.25, Admitted: 6, Borrowed: 2, Waiting: 40, Held: true}},
	})
	s := out.String()
	for _, want := range []string{"POOL", "SHARE", "WAITING", "HELD", "acme", "0.250", "held", "NOMINAL", "LENT", "frontier", "cpu-moe", "420/500", "m (implicit)"} {
		if !strings.Contains(s, want) {
			t.Errorf("tables lack %q:\n%s", want, s)
		}
	}
}
