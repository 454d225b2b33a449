package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/enginesim"
)

// batchLines writes n chat lines for model, custom ids "<prefix>-<i>".
func batchLines(model, prefix string, n, maxTokens int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"%s-%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"line %d"}],"max_tokens":%d}}`+"\n",
			prefix, i, model, i, maxTokens)
	}
	return b.Bytes()
}

func sdkClient(s *stack, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// submitBatch uploads lines with purpose batch and creates a chat batch.
func submitBatch(t testing.TB, c openai.Client, lines []byte, meta map[string]string) *openai.Batch {
	t.Helper()
	ctx := context.Background()
	f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(lines), "lines.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitBatch polls a batch until cond holds, logging progress changes.
func waitBatch(t testing.TB, c openai.Client, id string, within time.Duration, cond func(*openai.Batch) bool, what string) *openai.Batch {
	t.Helper()
	var last *openai.Batch
	eventually(t, within, func() bool {
		b, err := c.Batches.Get(context.Background(), id)
		if err != nil {
			t.Logf("get %s: %v", id, err)
			return false
		}
		last = b
		return cond(b)
	}, what)
	return last
}

func final(b *openai.Batch) bool { return batch.Final(string(b.Status)) }

// fileLines downloads a file and decodes its JSONL lines (none for "").
func fileLines(t testing.TB, c openai.Client, id string) []batch.OutputLine {
	t.Helper()
	if id == "" {
		return nil
	}
	resp, err := c.Files.Content(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []batch.OutputLine
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l batch.OutputLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("file %s line %q: %v", id, sc.Text(), err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// exactlyOnce checks that the output and error files hold each custom id
// "<prefix>-0".."<prefix>-(n-1)" exactly once, and returns how many were
// answered with 2xx and the error codes of the rest.
func exactlyOnce(t testing.TB, out, errs []batch.OutputLine, prefix string, n int) (ok int, codes map[string]int) {
	t.Helper()
	seen := map[string]int{}
	codes = map[string]int{}
	for _, l := range out {
		seen[l.CustomID]++
		if l.Response == nil || l.Response.StatusCode != 200 || l.Error != nil {
			t.Errorf("output line %s is not a 200 answer: %+v", l.CustomID, l)
		}
		ok++
	}
	for _, l := range errs {
		seen[l.CustomID]++
		switch {
		case l.Error != nil:
			codes[l.Error.Code]++
		case l.Response != nil:
			codes[fmt.Sprint(l.Response.StatusCode)]++
		default:
			t.Errorf("error line %s has neither response nor error", l.CustomID)
		}
	}
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if seen[id] != 1 {
			t.Errorf("custom_id %s appears %d times in output+error files", id, seen[id])
		}
		delete(seen, id)
	}
	for id, c := range seen {
		t.Errorf("unexpected custom_id %s (%d times)", id, c)
	}
	return ok, codes
}

// TestBatchLifecycleWithTheOpenAISDK runs the Batch API as a user of the
// official OpenAI Go SDK does, unchanged: upload, create, poll, results;
// validation failure; cancel with partial results; expiry.
func TestBatchLifecycleWithTheOpenAISDK(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 4})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")
	c := sdkClient(s, key)
	ctx := context.Background()

	t.Run("completes", func(t *testing.T) {
		b := submitBatch(t, c, batchLines("chat", "ok", 40, 8), map[string]string{"run": "one"})
		if b.Status != openai.BatchStatusValidating || b.Endpoint != "/v1/chat/completions" || b.CompletionWindow != "24h" || b.Metadata["run"] != "one" || b.ExpiresAt == 0 {
			t.Fatalf("created: %s", b.RawJSON())
		}
		b = waitBatch(t, c, b.ID, time.Minute, final, "batch completed")
		if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Total != 40 || b.RequestCounts.Completed != 40 || b.RequestCounts.Failed != 0 ||
			b.InProgressAt == 0 || b.FinalizingAt == 0 || b.CompletedAt == 0 || b.OutputFileID == "" {
			t.Fatalf("final: %s", b.RawJSON())
		}
		out := fileLines(t, c, b.OutputFileID)
		errs := fileLines(t, c, b.ErrorFileID)
		ok, _ := exactlyOnce(t, out, errs, "ok", 40)
		if ok != 40 {
			t.Fatalf("%d answered", ok)
		}
		var body openai.ChatCompletion
		if err := json.Unmarshal(out[0].Response.Body, &body); err != nil || len(body.Choices) != 1 || body.Usage.CompletionTokens == 0 {
			t.Fatalf("answer body %s: %v", out[0].Response.Body, err)
		}
		if !strings.HasPrefix(out[0].ID, "batch_req_") || out[0].Response.RequestID == "" {
			t.Fatalf("output line %+v", out[0])
		}
		// Listed, newest first, with the SDK's cursor pages.
		page, err := c.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(10)})
		if err != nil || len(page.Data) == 0 || page.Data[0].ID != b.ID {
			t.Fatalf("list: %v %+v", err, page)
		}
	})

	t.Run("validation failure", func(t *testing.T) {
		lines := string(batchLines("chat", "v", 2, 4)) +
			"{not json\n" +
			`{"custom_id":"v-0","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[]}}` + "\n" +
			`{"custom_id":"v-9","method":"POST","url":"/v1/embeddings","body":{"model":"chat","input":"x"}}` + "\n"
		b := submitBatch(t, c, []byte(lines), nil)
		b = waitBatch(t, c, b.ID, time.Minute, final, "batch failed")
		if b.Status != openai.BatchStatusFailed || b.FailedAt == 0 || len(b.Errors.Data) < 3 {
			t.Fatalf("final: %s", b.RawJSON())
		}
		lineOf := map[int64]string{}
		for _, e := range b.Errors.Data {
			lineOf[e.Line] = e.Code
		}
		if lineOf[3] == "" || lineOf[4] != batch.CodeDuplicateCustomID || lineOf[5] == "" {
			t.Fatalf("errors by line %v: %s", lineOf, b.RawJSON())
		}
	})
}

// TestBatchCancelAndExpiryWithTheOpenAISDK: a batch cancelled while it runs
// keeps the answers it has, and its unfinished lines are in the error file
// as batch_cancelled; a batch whose window passes keeps its answers and its
// unfinished lines are there as batch_expired. Every custom_id once.
func TestBatchCancelAndExpiryWithTheOpenAISDK(t *testing.T) {
	// 100 ms per line, one slot: 200 lines take 20 s, far past the window.
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 2, TimeToFirstToken: 100 * time.Millisecond})
	const window = 6 * time.Second
	s := startStack(t, stackOpts{mutate: func(o *app.Options) { o.Batch.Window = window }})
	key, _ := s.tenantKey("acme")
	if err := s.admin.Do(context.Background(), "POST", "/admin/v1/models", map[string]any{"name": "slow",
		"engine": map[string]any{"base_url": base, "model": "up", "max_concurrency": 1}}, nil); err != nil {
		t.Fatal(err)
	}
	s.waitServed(key, "slow")
	c := sdkClient(s, key)
	ctx := context.Background()

	t.Run("cancel keeps partial results", func(t *testing.T) {
		b := submitBatch(t, c, batchLines("slow", "c", 200, 2), nil)
		waitBatch(t, c, b.ID, time.Minute, func(b *openai.Batch) bool { return b.RequestCounts.Completed >= 3 }, "a few lines done")
		cb, err := c.Batches.Cancel(ctx, b.ID)
		if err != nil || (cb.Status != openai.BatchStatusCancelling && cb.Status != openai.BatchStatusCancelled) || cb.CancellingAt == 0 {
			t.Fatalf("cancel: %v %s", err, cb.RawJSON())
		}
		b = waitBatch(t, c, b.ID, time.Minute, final, "batch cancelled")
		if b.Status != openai.BatchStatusCancelled || b.CancelledAt == 0 || b.OutputFileID == "" || b.ErrorFileID == "" {
			t.Fatalf("final: %s", b.RawJSON())
		}
		ok, codes := exactlyOnce(t, fileLines(t, c, b.OutputFileID), fileLines(t, c, b.ErrorFileID), "c", 200)
		if ok < 3 || ok != int(b.RequestCounts.Completed) || codes[batch.CodeBatchCancelled] != 200-ok {
			t.Fatalf("%d answered, error codes %v, counts %+v", ok, codes, b.RequestCounts)
		}
		t.Logf("cancelled after %d of 200 lines; %d batch_cancelled", ok, codes[batch.CodeBatchCancelled])
	})

	t.Run("expiry", func(t *testing.T) {
		b := submitBatch(t, c, batchLines("slow", "e", 200, 2), nil)
		if b.ExpiresAt-b.CreatedAt != int64(window/time.Second) {
			t.Fatalf("expires_at %d, created_at %d: want the %s window", b.ExpiresAt, b.CreatedAt, window)
		}
		b = waitBatch(t, c, b.ID, time.Minute, final, "batch expired")
		if b.Status != openai.BatchStatusExpired || b.ExpiredAt == 0 || b.ErrorFileID == "" {
			t.Fatalf("final: %s", b.RawJSON())
		}
		ok, codes := exactlyOnce(t, fileLines(t, c, b.OutputFileID), fileLines(t, c, b.ErrorFileID), "e", 200)
		if ok == 200 || codes[batch.CodeBatchExpired] != 200-ok {
			t.Fatalf("%d answered, error codes %v", ok, codes)
		}
		t.Logf("expired after %d of 200 lines; %d batch_expired", ok, codes[batch.CodeBatchExpired])
	})
}

var _ = io.EOF
var _ = http.StatusOK
