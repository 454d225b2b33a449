package edge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	pkgfiles "github.com/aiforge/aiforge/pkg/files"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/edge"
)

// batchEdge is an edge with an object store, as the Batch API needs.
type batchEdge struct {
	*harness
	objs objstore.Store
}

func startBatchEdge(t *testing.T, mutate func(*edge.Config)) *batchEdge {
	t.Helper()
	objs, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = objs.Close() })
	h := startEdgeDeps(t, mutate, func(d *edge.Deps) { d.Objects = objs })
	return &batchEdge{harness: h, objs: objs}
}

func (h *batchEdge) sdk(key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(h.url + "/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0)}, opts...)...)
}

func (h *batchEdge) kv(bucket string) jetstream.KeyValue {
	h.t.Helper()
	b, err := h.js.KeyValue(context.Background(), bucket)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// batchLines is a JSONL input file of n chat lines.
func batchLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[{"role":"user","content":"hi %d"}]}}`+"\n", i, i)
	}
	return b.String()
}

func uploadBatchFile(t *testing.T, c openai.Client, content string) *openai.FileObject {
	t.Helper()
	f, err := c.Files.New(context.Background(), openai.FileNewParams{File: openai.File(strings.NewReader(content), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func createBatch(c openai.Client, fileID string, opts ...option.RequestOption) (*openai.Batch, error) {
	return c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: fileID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h}, opts...)
}

func sdkError(t *testing.T, err error, status int, code string) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want an API error %d %s", err, status, code)
	}
	if apiErr.StatusCode != status || apiErr.Code != code {
		t.Fatalf("error %d %q (%s), want %d %q", apiErr.StatusCode, apiErr.Code, apiErr.Message, status, code)
	}
	return apiErr
}

// setBatch plays the batch service: it changes a batch record by
// compare-and-set, as that service does.
func (h *batchEdge) setBatch(tenant, id string, fn func(*batch.Record)) {
	h.t.Helper()
	if _, _, err := kv.Update(context.Background(), h.kv(events.BucketBatches), batch.Key(tenant, id), func(r *batch.Record, exists bool) error {
		if !exists {
			return kv.ErrNotFound
		}
		fn(r)
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *batchEdge) batchRecords(tenant string) []batch.Record {
	h.t.Helper()
	es, err := kv.List[batch.Record](context.Background(), h.kv(events.BucketBatches), batch.TenantPrefix(tenant)+">")
	if err != nil {
		h.t.Fatal(err)
	}
	return kv.Values(es)
}

// The official SDK creates, reads, lists and cancels batches unchanged;
// the record the batch service picks up holds what it needs.
func TestBatchLifecycleWithSDK(t *testing.T) {
	h := startBatchEdge(t, nil)
	acme, acmeKeyID := h.tenantKey("acme")
	globex, _ := h.tenantKey("globex")
	c, other := h.sdk(acme), h.sdk(globex)
	ctx := context.Background()

	in := batchLines(3)
	f := uploadBatchFile(t, c, in)
	b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: map[string]string{"job": "nightly"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.ID, "batch_") || b.Object != "batch" || b.Status != openai.BatchStatusValidating || b.InputFileID != f.ID ||
		b.Endpoint != "/v1/chat/completions" || b.CompletionWindow != "24h" || b.Metadata["job"] != "nightly" {
		t.Fatalf("created batch %+v", b)
	}
	if b.ExpiresAt != b.CreatedAt+24*3600 || b.CancellingAt != 0 || b.OutputFileID != "" || b.RequestCounts.Total != 0 {
		t.Fatalf("created batch times/counts: %s", b.RawJSON())
	}
	// OpenAI's schema: the required fields present; the optional ones, not
	// nullable, left out until they have a value (never null).
	var raw map[string]any
	if err := json.Unmarshal([]byte(b.RawJSON()), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "object", "endpoint", "input_file_id", "completion_window", "status", "created_at", "expires_at", "request_counts", "metadata"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("batch object lacks %q", k)
		}
	}
	for _, k := range []string{"errors", "output_file_id", "error_file_id", "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at"} {
		if v, ok := raw[k]; ok {
			t.Errorf("a validating batch has %q = %v", k, v)
		}
	}
	for _, k := range []string{"tenant", "key_id", "input_object_key", "estimated_tokens", "expiry"} {
		if _, ok := raw[k]; ok {
			t.Errorf("batch object shows the record's %q", k)
		}
	}
	recs := h.batchRecords("acme")
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	rec := recs[0]
	if rec.Tenant != "acme" || rec.KeyID != acmeKeyID || rec.InputObjectKey != pkgfiles.ObjectKey("acme", f.ID) ||
		rec.EstimatedTokens != int64(len(in)+3)/4 || rec.Expiry.Unix() != b.ExpiresAt {
		t.Fatalf("record %+v", rec)
	}

	got, err := c.Batches.Get(ctx, b.ID)
	if err != nil || got.ID != b.ID || got.Status != openai.BatchStatusValidating {
		t.Fatalf("get: %v %+v", err, got)
	}
	_, err = other.Batches.Get(ctx, b.ID)
	sdkError(t, err, http.StatusNotFound, "not_found")
	_, err = other.Batches.Cancel(ctx, b.ID)
	sdkError(t, err, http.StatusNotFound, "not_found")
	_, err = c.Batches.Get(ctx, "batch_nope")
	sdkError(t, err, http.StatusNotFound, "not_found")

	// Pages, newest first.
	ids := []string{b.ID}
	for range 4 {
		nb, err := createBatch(c, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		ids = append([]string{nb.ID}, ids...)
	}
	page, err := c.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.Data[0].ID != ids[0] || page.Data[1].ID != ids[1] || !page.HasMore {
		t.Fatalf("first page: %s", page.RawJSON())
	}
	var listed []string
	iter := c.Batches.ListAutoPaging(ctx, openai.BatchListParams{Limit: openai.Int(2)})
	for iter.Next() {
		listed = append(listed, iter.Current().ID)
	}
	if err := iter.Err(); err != nil || strings.Join(listed, ",") != strings.Join(ids, ",") {
		t.Fatalf("auto paging: %v %v, want %v", err, listed, ids)
	}
	if r := h.do("GET", "/v1/batches", acme, nil, nil).json(t); r["first_id"] != ids[0] || r["last_id"] != ids[4] || r["has_more"] != false {
		t.Fatalf("default page: %v", r)
	}
	if op, err := other.Batches.List(ctx, openai.BatchListParams{}); err != nil || len(op.Data) != 0 {
		t.Fatalf("another tenant lists %v %v", err, op)
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x"} {
		apiError(t, h.do("GET", "/v1/batches?"+q, acme, nil, nil), http.StatusBadRequest, "invalid_value")
	}

	// Cancel: validating → cancelling, again → as it is; in progress too.
	cb, err := c.Batches.Cancel(ctx, b.ID)
	if err != nil || cb.Status != openai.BatchStatusCancelling || cb.CancellingAt == 0 {
		t.Fatalf("cancel: %v %+v", err, cb)
	}
	again, err := c.Batches.Cancel(ctx, b.ID)
	if err != nil || again.Status != openai.BatchStatusCancelling || again.CancellingAt != cb.CancellingAt {
		t.Fatalf("cancel again: %v %+v", err, again)
	}
	h.setBatch("acme", ids[0], func(r *batch.Record) {
		r.Status, r.RequestCounts = batch.StatusInProgress, batch.RequestCounts{Total: 3, Completed: 1}
	})
	if cb, err := c.Batches.Cancel(ctx, ids[0]); err != nil || cb.Status != openai.BatchStatusCancelling || cb.RequestCounts.Completed != 1 {
		t.Fatalf("cancel in progress: %v %+v", err, cb)
	}
	for _, st := range []string{batch.StatusCompleted, batch.StatusFinalizing, batch.StatusCancelled} {
		h.setBatch("acme", ids[1], func(r *batch.Record) { r.Status = st })
		_, err := c.Batches.Cancel(ctx, ids[1])
		e := sdkError(t, err, http.StatusConflict, "batch_not_cancellable")
		if !strings.Contains(e.Message, st) {
			t.Fatalf("message %q does not name %s", e.Message, st)
		}
	}
}

// Create is validated as OpenAI validates it, before anything is written.
func TestBatchCreateValidation(t *testing.T) {
	h := startBatchEdge(t, nil)
	acme, _ := h.tenantKey("acme")
	globex, _ := h.tenantKey("globex")
	c := h.sdk(acme)
	f := uploadBatchFile(t, c, batchLines(2))
	notBatch, err := c.Files.New(context.Background(), openai.FileNewParams{File: openai.File(strings.NewReader("notes"), "n.txt", "text/plain"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	theirs := uploadBatchFile(t, h.sdk(globex), batchLines(1))
	long := strings.Repeat("k", 65)
	many := map[string]string{}
	for i := range 17 {
		many[fmt.Sprint("k", i)] = "v"
	}
	body := func(mut func(map[string]any)) map[string]any {
		m := map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
		mut(m)
		return m
	}
	for _, tc := range []struct {
		name   string
		body   any
		status int
		code   string
		param  string
	}{
		{"no input file", body(func(m map[string]any) { delete(m, "input_file_id") }), 400, "missing_required_parameter", "input_file_id"},
		{"no endpoint", body(func(m map[string]any) { delete(m, "endpoint") }), 400, "missing_required_parameter", "endpoint"},
		{"no window", body(func(m map[string]any) { delete(m, "completion_window") }), 400, "missing_required_parameter", "completion_window"},
		{"bad endpoint", body(func(m map[string]any) { m["endpoint"] = "/v1/images/generations" }), 400, "invalid_value", "endpoint"},
		{"bad window", body(func(m map[string]any) { m["completion_window"] = "48h" }), 400, "invalid_value", "completion_window"},
		{"17 metadata pairs", body(func(m map[string]any) { m["metadata"] = many }), 400, "object_above_max_properties", "metadata"},
		{"long metadata key", body(func(m map[string]any) { m["metadata"] = map[string]string{long: "v"} }), 400, "string_above_max_length", "metadata"},
		{"long metadata value", body(func(m map[string]any) { m["metadata"] = map[string]string{"k": strings.Repeat("v", 513)} }), 400, "string_above_max_length", "metadata.k"},
		{"metadata not strings", body(func(m map[string]any) { m["metadata"] = map[string]any{"k": 1} }), 400, "invalid_type", ""},
		{"bad expiry", body(func(m map[string]any) {
			m["output_expires_after"] = map[string]any{"anchor": "created_at", "seconds": 60}
		}), 400, "invalid_value", "output_expires_after.seconds"},
		{"unknown file", body(func(m map[string]any) { m["input_file_id"] = "file-nope" }), 404, "not_found", "input_file_id"},
		{"another tenant's file", body(func(m map[string]any) { m["input_file_id"] = theirs.ID }), 404, "not_found", "input_file_id"},
		{"not a batch file", body(func(m map[string]any) { m["input_file_id"] = notBatch.ID }), 400, "invalid_file_purpose", "input_file_id"},
		{"not json", "{", 400, "invalid_json", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := apiError(t, h.do("POST", "/v1/batches", acme, tc.body, nil), tc.status, tc.code)
			if tc.param != "" && e["param"] != tc.param {
				t.Fatalf("param %v, want %s", e["param"], tc.param)
			}
		})
	}
	// The SDK's own types reach the same answers.
	_, err = c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1Moderations, CompletionWindow: "24h"})
	sdkError(t, err, 400, "invalid_value")
	if n := len(h.batchRecords("acme")); n != 0 {
		t.Fatalf("%d batches written by refused creates", n)
	}
	// Metadata at its bounds is accepted.
	ok := map[string]string{}
	for i := range 16 {
		ok[fmt.Sprintf("%064d", i)] = strings.Repeat("é", 512)
	}
	if r := h.do("POST", "/v1/batches", acme, body(func(m map[string]any) { m["metadata"] = ok }), nil); r.status != 200 {
		t.Fatalf("metadata at its bounds: %d %s", r.status, r.body)
	}
	apiError(t, h.do("POST", "/v1/batches", "sk-nope", body(func(map[string]any) {}), nil), 401, "invalid_api_key")
}

// An Idempotency-Key makes a create safe to retry: the same body gets the
// same batch, another body is refused.
func TestBatchIdempotencyKey(t *testing.T) {
	h := startBatchEdge(t, nil)
	acme, _ := h.tenantKey("acme")
	globex, _ := h.tenantKey("globex")
	c := h.sdk(acme)
	f := uploadBatchFile(t, c, batchLines(2))
	key := option.WithHeader("Idempotency-Key", "nightly-2026-12-01")
	first, err := createBatch(c, f.ID, key)
	if err != nil {
		t.Fatal(err)
	}
	// The same body written differently is the same request.
	r := h.do("POST", "/v1/batches", acme, `{ "completion_window":"24h", "endpoint":"/v1/chat/completions",  "input_file_id":"`+f.ID+`" }`,
		map[string]string{"Idempotency-Key": "nightly-2026-12-01"})
	if r.status != 200 || r.json(t)["id"] != first.ID {
		t.Fatalf("retry: %d %s, want batch %s", r.status, r.body, first.ID)
	}
	again, err := createBatch(c, f.ID, key)
	if err != nil || again.ID != first.ID {
		t.Fatalf("retry with the SDK: %v %v", err, again)
	}
	if n := len(h.batchRecords("acme")); n != 1 {
		t.Fatalf("%d batches for one key", n)
	}
	// The key is the tenant's: another tenant's same key is its own.
	gf := uploadBatchFile(t, h.sdk(globex), batchLines(1))
	if gb, err := createBatch(h.sdk(globex), gf.ID, key); err != nil || gb.ID == first.ID {
		t.Fatalf("another tenant's key: %v %v", err, gb)
	}
	_, err = c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1Embeddings,
		CompletionWindow: "24h"}, key)
	sdkError(t, err, http.StatusConflict, "idempotency_key_reused")
	r = h.do("POST", "/v1/batches", acme, map[string]any{"input_file_id": f.ID, "endpoint": "/v1/completions", "completion_window": "24h"},
		map[string]string{"Idempotency-Key": "nightly-2026-12-01"})
	apiError(t, r, http.StatusConflict, "idempotency_key_reused")
	if r.header.Get("X-Should-Retry") != "false" {
		t.Fatal("a reused key's 409 lets the SDK retry")
	}
	// A refused create does not hold its key.
	r = h.do("POST", "/v1/batches", acme, map[string]any{"input_file_id": "file-nope", "endpoint": "/v1/completions", "completion_window": "24h"},
		map[string]string{"Idempotency-Key": "k2"})
	apiError(t, r, http.StatusNotFound, "not_found")
	if b, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1Completions,
		CompletionWindow: "24h"}, option.WithHeader("Idempotency-Key", "k2")); err != nil || b.Endpoint != "/v1/completions" {
		t.Fatalf("key after a refusal: %v %v", err, b)
	}
	apiError(t, h.do("POST", "/v1/batches", acme, map[string]any{"input_file_id": f.ID, "endpoint": "/v1/completions", "completion_window": "24h"},
		map[string]string{"Idempotency-Key": strings.Repeat("x", 257)}), 400, "invalid_request")
}

// A tenant's enqueued lines and tokens are bounded up front: a batch past
// the bound is refused with 429 before any record is written, and fits
// again once earlier lines finish or a queue raises the bound.
func TestBatchEnqueuedLimit(t *testing.T) {
	h := startBatchEdge(t, func(c *edge.Config) { c.BatchMaxEnqueuedLines = 5 })
	acme, _ := h.tenantKey("acme")
	c := h.sdk(acme)
	three := uploadBatchFile(t, c, batchLines(3))
	first, err := createBatch(c, three.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = createBatch(c, three.ID)
	e := sdkError(t, err, http.StatusTooManyRequests, "batch_enqueued_limit_exceeded")
	if !strings.Contains(e.Message, "limit 5 enqueued lines") || !strings.Contains(e.Message, "3 already enqueued") {
		t.Fatalf("message %q does not name the limit", e.Message)
	}
	if n := len(h.batchRecords("acme")); n != 1 {
		t.Fatalf("%d records after a refusal", n)
	}
	r := h.do("POST", "/v1/batches", acme, map[string]any{"input_file_id": three.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h"}, nil)
	apiError(t, r, http.StatusTooManyRequests, "batch_enqueued_limit_exceeded")
	if r.header.Get("X-Should-Retry") != "false" {
		t.Fatal("429 lets the SDK retry at once")
	}

	// Lines that finished no longer count.
	h.setBatch("acme", first.ID, func(r *batch.Record) {
		r.Status, r.RequestCounts = batch.StatusInProgress, batch.RequestCounts{Total: 3, Completed: 1, Failed: 1}
	})
	second, err := createBatch(c, three.ID) // 1 + 3 ≤ 5
	if err != nil {
		t.Fatal(err)
	}
	_, err = createBatch(c, three.ID)
	sdkError(t, err, http.StatusTooManyRequests, "batch_enqueued_limit_exceeded")
	// Final batches do not count at all.
	h.setBatch("acme", second.ID, func(r *batch.Record) { r.Status = batch.StatusFailed })
	if _, err := createBatch(c, three.ID); err != nil {
		t.Fatal(err)
	}

	// A queue of the tenant sets its own bounds, lines and tokens.
	if r := h.admin("PUT", "/admin/v1/batch/queues/chat/acme", map[string]any{"max_enqueued_lines": 100, "max_enqueued_tokens": 200}); r.status != http.StatusCreated {
		t.Fatalf("put queue: %d %s", r.status, r.body)
	}
	// The file of three lines is ~130 tokens; two in flight take 1+3 lines.
	_, err = createBatch(c, three.ID)
	e = sdkError(t, err, http.StatusTooManyRequests, "batch_enqueued_limit_exceeded")
	if !strings.Contains(e.Message, "limit 200 enqueued tokens") {
		t.Fatalf("message %q", e.Message)
	}
	if r := h.admin("PUT", "/admin/v1/batch/queues/chat/acme", map[string]any{"max_enqueued_lines": 100}); r.status != http.StatusOK {
		t.Fatalf("put queue: %d %s", r.status, r.body)
	}
	if _, err := createBatch(c, three.ID); err != nil {
		t.Fatalf("within the queue's bound: %v", err)
	}
}

// purpose=batch uploads count their lines as they stream; batch output
// files are downloaded and listed but never uploaded.
func TestBatchFiles(t *testing.T) {
	h := startBatchEdge(t, nil)
	acme, _ := h.tenantKey("acme")
	c := h.sdk(acme)
	ctx := context.Background()
	files := h.kv(events.BucketFiles)
	for _, tc := range []struct {
		content string
		lines   int64
	}{
		{batchLines(4), 4},
		{strings.TrimSuffix(batchLines(2), "\n"), 2}, // no final newline
		{batchLines(2) + "\n  \n\r\n", 2},            // blank lines at the end
		{"", 0},                                      // empty
		{"{}\r\n{}\r\n", 2},                          // CRLF
		{strings.Repeat("x", 200_000) + "\n{}\n", 2}, // a long line
	} {
		f := uploadBatchFile(t, c, tc.content)
		rec, _, err := kv.Get[pkgfiles.Record](ctx, files, pkgfiles.Key("acme", f.ID))
		if err != nil || rec.Lines != tc.lines || rec.Bytes != int64(len(tc.content)) {
			t.Fatalf("%.20q: lines %d bytes %d (%v), want %d", tc.content, rec.Lines, rec.Bytes, err, tc.lines)
		}
	}
	_, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("{}\n"), "out.jsonl", "application/jsonl"), Purpose: "batch_output"})
	e := sdkError(t, err, http.StatusBadRequest, "invalid_request")
	if !strings.Contains(e.Message, "batch_output") {
		t.Fatalf("message %q", e.Message)
	}

	// An output file as the batch service writes it.
	out := `{"id":"batch_req_1","custom_id":"req-0","response":{"status_code":200,"request_id":"r1","body":{}},"error":null}` + "\n"
	id := "file-out" + events.NewID()[:8]
	key := pkgfiles.ObjectKey("acme", id)
	info, err := h.objs.Put(ctx, key, strings.NewReader(out), int64(len(out)), "application/jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, files, pkgfiles.Key("acme", id), pkgfiles.Record{File: pkgfiles.File{ID: id, Object: "file", Bytes: info.Size,
		CreatedAt: time.Now().Unix(), Filename: "batch_x_output.jsonl", Purpose: pkgfiles.PurposeBatchOutput, Status: pkgfiles.StatusProcessed}, Tenant: "acme", ObjectKey: key}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Files.Content(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != out {
		t.Fatalf("content %q %v", got, err)
	}
	page, err := c.Files.List(ctx, openai.FileListParams{Purpose: openai.String("batch_output")})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != id || page.Data[0].Purpose != "batch_output" {
		t.Fatalf("list batch_output: %v %+v", err, page)
	}
}

// Without an object store there are no batch files: 503, the key checked
// first.
func TestBatchesWithoutStorage(t *testing.T) {
	h := startEdge(t, nil)
	acme, _ := h.tenantKey("acme")
	apiError(t, h.do("GET", "/v1/batches", acme, nil, nil), http.StatusServiceUnavailable, "storage_unavailable")
	apiError(t, h.do("GET", "/v1/batches", "sk-nope", nil, nil), http.StatusUnauthorized, "invalid_api_key")
}
