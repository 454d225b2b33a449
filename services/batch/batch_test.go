package batch

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/sealed"
)

var testSecretsKey = func() *sealed.PrivateKey {
	k, err := sealed.Generate()
	if err != nil {
		panic(err)
	}
	return k
}()

// ids maps the custom ids of output and error lines to how often each
// appears.
func ids(files ...[]api.OutputLine) map[string]int {
	m := map[string]int{}
	for _, f := range files {
		for _, l := range f {
			m[l.CustomID]++
		}
	}
	return m
}

func TestBatchCompletes(t *testing.T) {
	e := newEnv(t, Config{})
	e.startWorker("w1", 4, true)
	e.start()
	lines := chatLines(20)
	// One line the engine refuses (no messages): an answer, in the error file.
	lines[7] = `{"custom_id":"c7","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-model","messages":[],"stream":true}}`
	rec := e.submit(api.EndpointChatCompletions, lines)

	got := e.waitStatus(rec.ID, 30*time.Second, api.StatusCompleted, api.StatusFailed)
	if got.Status != api.StatusCompleted {
		t.Fatalf("status %s, errors %+v", got.Status, got.Errors)
	}
	if got.RequestCounts != (api.RequestCounts{Total: 20, Completed: 19, Failed: 1}) {
		t.Fatalf("request counts %+v", got.RequestCounts)
	}
	if got.InProgressAt == nil || got.FinalizingAt == nil || got.CompletedAt == nil || got.ExpiresAt == nil {
		t.Fatalf("timestamps: %+v", got.Batch)
	}
	if len(got.Models) != 1 || got.Models[0] != testModel || got.EstimatedTokens <= 0 {
		t.Fatalf("models %v, estimated tokens %d", got.Models, got.EstimatedTokens)
	}
	if got.OutputFileID == nil || *got.OutputFileID != OutputFileID(rec.ID) || got.ErrorFileID == nil || *got.ErrorFileID != ErrorFileID(rec.ID) {
		t.Fatalf("file ids %v %v", got.OutputFileID, got.ErrorFileID)
	}
	out, errs := e.file(got.OutputFileID), e.file(got.ErrorFileID)
	if len(out) != 19 || len(errs) != 1 {
		t.Fatalf("%d output lines, %d error lines", len(out), len(errs))
	}
	// Input order, and OpenAI's shape.
	want := 0
	for _, l := range out {
		if want == 7 {
			want++
		}
		if l.CustomID != fmt.Sprintf("c%d", want) {
			t.Fatalf("output line %q out of order, want c%d", l.CustomID, want)
		}
		want++
		if !strings.HasPrefix(l.ID, "batch_req_") || l.Error != nil || l.Response == nil || l.Response.StatusCode != 200 {
			t.Fatalf("output line %+v", l)
		}
		var body struct {
			Object  string `json:"object"`
			Choices []struct {
				Message struct{ Content string }
			}
		}
		if err := json.Unmarshal(l.Response.Body, &body); err != nil || body.Object != "chat.completion" || len(body.Choices) != 1 {
			t.Fatalf("output body %s: %v", l.Response.Body, err)
		}
		idx := want - 1
		if l.Response.RequestID != events.LineID(rec.ID, int64(idx)) {
			t.Fatalf("request id %s, want %s", l.Response.RequestID, events.LineID(rec.ID, int64(idx)))
		}
	}
	if l := errs[0]; l.CustomID != "c7" || l.Response == nil || l.Response.StatusCode != 400 || l.Error != nil {
		t.Fatalf("error line %+v", l)
	}
	if e.usageEvents() != 19 {
		t.Fatalf("%d usage events, want 19", e.usageEvents())
	}
	// The batch's lines, results and consumer are gone; its final status
	// stays.
	e.eventually(10*time.Second, func() bool {
		info, err := e.js.Stream(testCtx(t), events.StreamBatch)
		if err != nil {
			return false
		}
		st := info.CachedInfo().State
		_, cerr := info.Consumer(testCtx(t), consumerName(rec.ID))
		return st.Msgs == 1 && cerr != nil // the finished event
	}, "the batch's lines and results purged")
	// Every admission was released.
	st := e.svc.disp.status()
	for _, q := range st.Queues {
		if q.Admitted != 0 || q.Waiting != 0 {
			t.Fatalf("queue %+v still holds lines", q)
		}
	}
	for _, p := range st.Pools {
		for _, f := range p.Flavors {
			if f.InUse != 0 {
				t.Fatalf("pool %s flavor %+v in use", p.Name, f)
			}
		}
	}
}

func TestBatchQueueGroupWithoutWorkerState(t *testing.T) {
	e := newEnv(t, Config{DefaultCapacity: 2})
	e.startWorker("w1", 2, false)
	e.start()
	lines := []string{
		`{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"sim-model","input":"hello"}}`,
		`{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{"model":"sim-model","input":["x","y"]}}`,
	}
	rec := e.submit(api.EndpointEmbeddings, lines)
	got := e.waitStatus(rec.ID, 30*time.Second, api.StatusCompleted, api.StatusFailed)
	if got.Status != api.StatusCompleted || got.ErrorFileID != nil {
		t.Fatalf("status %s, error file %v, errors %+v", got.Status, got.ErrorFileID, got.Errors)
	}
	out := e.file(got.OutputFileID)
	if len(out) != 2 || out[0].CustomID != "a" || out[1].CustomID != "b" {
		t.Fatalf("output %+v", out)
	}
	var emb struct {
		Object string `json:"object"`
		Data   []any  `json:"data"`
	}
	if err := json.Unmarshal(out[1].Response.Body, &emb); err != nil || emb.Object != "list" || len(emb.Data) != 2 {
		t.Fatalf("embeddings body %s", out[1].Response.Body)
	}
}

func TestBatchResponsesLines(t *testing.T) {
	e := newEnv(t, Config{})
	e.startWorker("w1", 4, true)
	e.start()
	rec := e.submit(api.EndpointResponses, []string{
		`{"custom_id":"r1","method":"POST","url":"/v1/responses","body":{"model":"sim-model","input":"hi","instructions":"be brief","max_output_tokens":3}}`,
		`{"custom_id":"r2","method":"POST","url":"/v1/responses","body":{"model":"sim-model","input":[{"role":"user","content":"hello"}],"stream":true}}`,
	})
	got := e.waitStatus(rec.ID, 30*time.Second, api.StatusCompleted, api.StatusFailed)
	if got.Status != api.StatusCompleted {
		t.Fatalf("status %s, errors %+v", got.Status, got.Errors)
	}
	out := e.file(got.OutputFileID)
	if len(out) != 2 {
		t.Fatalf("output %+v", out)
	}
	for _, l := range out {
		var r struct {
			ID     string `json:"id"`
			Object string `json:"object"`
			Status string `json:"status"`
			Output []struct {
				Type    string `json:"type"`
				Content []struct{ Type, Text string }
			} `json:"output"`
			Usage struct {
				TotalTokens int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(l.Response.Body, &r); err != nil || r.Object != "response" || !strings.HasPrefix(r.ID, "resp_") ||
			len(r.Output) != 1 || r.Output[0].Type != "message" || len(r.Output[0].Content) != 1 || r.Output[0].Content[0].Text == "" || r.Usage.TotalTokens == 0 {
			t.Fatalf("responses body %s: %v", l.Response.Body, err)
		}
	}
}

func TestBatchValidationFails(t *testing.T) {
	e := newEnv(t, Config{})
	e.start()
	ok := func(id string) string {
		return `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-model","messages":[{"role":"user","content":"q"}]}}`
	}
	cases := []struct {
		name     string
		endpoint string
		lines    []string
		code     string
		line     int64
	}{
		{"duplicate custom id", api.EndpointChatCompletions, []string{ok("a"), ok("b"), ok("a")}, api.CodeDuplicateCustomID, 3},
		{"not json", api.EndpointChatCompletions, []string{ok("a"), `{"custom_id":`}, api.CodeInvalidJSONL, 2},
		{"wrong url", api.EndpointChatCompletions, []string{`{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"sim-model","input":"x"}}`}, api.CodeMismatchedURL, 1},
		{"unknown url", api.EndpointChatCompletions, []string{`{"custom_id":"a","method":"POST","url":"/v1/images","body":{"model":"sim-model"}}`}, api.CodeInvalidURL, 1},
		{"method", api.EndpointChatCompletions, []string{`{"custom_id":"a","method":"GET","url":"/v1/chat/completions","body":{"model":"sim-model"}}`}, api.CodeInvalidMethod, 1},
		{"no model", api.EndpointChatCompletions, []string{`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}`}, api.CodeMissingModel, 1},
		{"two models", api.EndpointChatCompletions, []string{ok("a"), `{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"other","messages":[]}}`}, api.CodeInvalidBody, 2},
		{"unknown model", api.EndpointChatCompletions, []string{`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"nope","messages":[]}}`}, api.CodeModelNotFound, 1},
		{"file search", api.EndpointResponses, []string{`{"custom_id":"a","method":"POST","url":"/v1/responses","body":{"model":"sim-model","input":"q","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}}`}, api.CodeUnsupported, 1},
		{"no custom id", api.EndpointChatCompletions, []string{`{"method":"POST","url":"/v1/chat/completions","body":{"model":"sim-model"}}`}, api.CodeMissingCustomID, 1},
		{"empty", api.EndpointChatCompletions, []string{"", "  "}, api.CodeEmptyFile, 0},
	}
	recs := make([]api.Record, len(cases))
	for i, c := range cases {
		recs[i] = e.submit(c.endpoint, c.lines)
	}
	for i, c := range cases {
		got := e.waitStatus(recs[i].ID, 30*time.Second, api.StatusFailed, api.StatusInProgress, api.StatusCompleted)
		if got.Status != api.StatusFailed || got.FailedAt == nil || got.Errors == nil || len(got.Errors.Data) == 0 {
			t.Errorf("%s: status %s, errors %+v", c.name, got.Status, got.Errors)
			continue
		}
		d := got.Errors.Data[0]
		if got.Errors.Object != "list" || d.Code != c.code || (c.line > 0 && (d.Line == nil || *d.Line != c.line)) || d.Message == "" {
			t.Errorf("%s: first error %+v (line %v), want %s at line %d", c.name, d, d.Line, c.code, c.line)
		}
	}
}

func TestBatchInputFileMissing(t *testing.T) {
	e := newEnv(t, Config{})
	// Created while the service is down (it resumes it at start).
	rec := e.submit(api.EndpointChatCompletions, chatLines(1))
	if err := e.objects.Delete(testCtx(t), rec.InputObjectKey); err != nil {
		t.Fatal(err)
	}
	e.start()
	got := e.waitStatus(rec.ID, 30*time.Second, api.StatusFailed, api.StatusCompleted)
	if got.Status != api.StatusFailed || got.Errors == nil || got.Errors.Data[0].Code != api.CodeFileNotFound {
		t.Fatalf("status %s, errors %+v", got.Status, got.Errors)
	}
}

// An answer larger than one bus message goes through the object store;
// a line asking for a stream is answered whole.
func TestBatchLargeAnswerAndStreamFlag(t *testing.T) {
	e := newEnv(t, Config{InlineBodyLimit: 256 << 10})
	e.startWorker("w1", 2, true)
	e.start()
	rec := e.submit(api.EndpointChatCompletions, []string{
		`{"custom_id":"big","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-model","messages":[{"role":"user","content":"long"}],"max_tokens":100000}}`,
		`{"custom_id":"s","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-model","messages":[{"role":"user","content":"q"}],"stream":true,"stream_options":{"include_usage":true}}}`,
	})
	got := e.waitStatus(rec.ID, 60*time.Second, api.StatusCompleted)
	out := e.file(got.OutputFileID)
	if len(out) != 2 || out[0].CustomID != "big" || out[1].CustomID != "s" {
		t.Fatalf("output %d lines", len(out))
	}
	if n := e.objects.(*recordingStore).put(bodyPrefix(testTenant, rec.ID)); n != 1 || len(out[0].Response.Body) <= 256<<10 {
		t.Fatalf("%d answers of %d bytes spilled to the object store", n, len(out[0].Response.Body))
	}
	var big struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(out[0].Response.Body, &big); err != nil || big.Usage.CompletionTokens != 100000 {
		t.Fatalf("big answer: %v, %d tokens", err, big.Usage.CompletionTokens)
	}
	var small struct {
		Object string `json:"object"`
	}
	if err := json.Unmarshal(out[1].Response.Body, &small); err != nil || small.Object != "chat.completion" {
		t.Fatalf("streamed line answered %s", out[1].Response.Body)
	}
	// The spilled body is removed with the batch's lines.
	e.eventually(10*time.Second, func() bool {
		for _, err := range e.objects.List(testCtx(t), bodyPrefix(testTenant, rec.ID)) {
			return err != nil
		}
		return true
	}, "the spilled answer removed")
}
