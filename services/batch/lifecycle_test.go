package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	api "github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
)

// checkOnce asserts that every custom id c0..c<n-1> is in the output and
// error files exactly once, and returns the error lines.
func checkOnce(t *testing.T, n int, out, errs []api.OutputLine) {
	t.Helper()
	seen := ids(out, errs)
	for i := range n {
		if c := seen[fmt.Sprintf("c%d", i)]; c != 1 {
			t.Errorf("custom_id c%d appears %d times in output+error", i, c)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct custom ids, want %d", len(seen), n)
	}
}

// stopped returns a channel told when the dispatch of a batch stops.
func (e *env) stopped() chan string {
	ch := make(chan string, 64)
	e.onStop = func(id string) {
		select {
		case ch <- id:
		default:
		}
	}
	return ch
}

func waitStopped(t *testing.T, ch chan string, id string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("the dispatch of %s did not stop", id)
		}
	}
}

func TestBatchCancelKeepsPartialResults(t *testing.T) {
	e := newEnv(t, Config{})
	e.worker.gate = make(chan struct{}, 100)
	for range 5 {
		e.worker.gate <- struct{}{}
	}
	e.startWorker("w1", 2, true)
	stops := e.stopped()
	e.start()
	rec := e.submit(api.EndpointChatCompletions, chatLines(30))
	e.eventually(30*time.Second, func() bool { return e.worker.served.Load() >= 5 }, "5 lines served")
	e.cancelBatch(rec.ID)
	// The lines in flight (held at the gate) finish once dispatch stopped.
	waitStopped(t, stops, rec.ID)
	close(e.worker.gate)

	got := e.waitStatus(rec.ID, 30*time.Second, api.StatusCancelled)
	if got.CancelledAt == nil || got.CancellingAt == nil {
		t.Fatalf("timestamps %+v", got.Batch)
	}
	out, errs := e.file(got.OutputFileID), e.file(got.ErrorFileID)
	checkOnce(t, 30, out, errs)
	if len(out) < 5 || len(out) > 7 {
		t.Fatalf("%d lines answered, want the 5 served and at most the 2 in flight", len(out))
	}
	for _, l := range errs {
		if l.Response != nil || l.Error == nil || l.Error.Code != api.CodeBatchCancelled {
			t.Fatalf("error line %+v", l)
		}
	}
	if got.RequestCounts != (api.RequestCounts{Total: 30, Completed: int64(len(out))}) {
		t.Fatalf("request counts %+v with %d answered", got.RequestCounts, len(out))
	}
}

func TestBatchExpires(t *testing.T) {
	e := newEnv(t, Config{Window: 2 * time.Second})
	e.worker.gate = make(chan struct{}, 100)
	for range 3 {
		e.worker.gate <- struct{}{}
	}
	e.startWorker("w1", 2, true)
	stops := e.stopped()
	e.start()
	rec := e.submit(api.EndpointChatCompletions, chatLines(12))
	waitStopped(t, stops, rec.ID)
	close(e.worker.gate)

	got := e.waitStatus(rec.ID, 30*time.Second, api.StatusExpired)
	if got.ExpiredAt == nil || got.ExpiresAt == nil || *got.ExpiresAt > rec.CreatedAt+2 {
		t.Fatalf("expired_at %v, expires_at %v (created %d)", got.ExpiredAt, got.ExpiresAt, rec.CreatedAt)
	}
	out, errs := e.file(got.OutputFileID), e.file(got.ErrorFileID)
	checkOnce(t, 12, out, errs)
	if len(out) < 3 || len(out) > 5 || len(errs) == 0 {
		t.Fatalf("%d answered, %d expired", len(out), len(errs))
	}
	for _, l := range errs {
		if l.Error == nil || l.Error.Code != api.CodeBatchExpired {
			t.Fatalf("error line %+v", l)
		}
	}
}

func TestBatchCancelledWhileValidating(t *testing.T) {
	e := newEnv(t, Config{})
	rec := e.submit(api.EndpointChatCompletions, chatLines(3))
	e.cancelBatch(rec.ID)
	e.start()
	got := e.waitStatus(rec.ID, 30*time.Second, api.StatusCancelled, api.StatusCompleted)
	if got.Status != api.StatusCancelled || got.CancelledAt == nil || got.InProgressAt != nil || got.OutputFileID != nil || got.ErrorFileID != nil {
		t.Fatalf("record %+v", got.Batch)
	}
}

func TestBatchRetriesRetryableFailures(t *testing.T) {
	e := newEnv(t, Config{RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond, LineAttempts: 3})
	e.startWorker("w1", 4, true)
	e.start()
	rec := e.submit(api.EndpointChatCompletions, chatLines(4))
	e.worker.mu.Lock()
	e.worker.fail[events.LineID(rec.ID, 1)] = 2 // two failures, then an answer on the last attempt
	e.worker.fail[events.LineID(rec.ID, 2)] = 5 // fails every attempt
	e.worker.mu.Unlock()
	got := e.waitStatus(rec.ID, 30*time.Second, api.StatusCompleted)
	out, errs := e.file(got.OutputFileID), e.file(got.ErrorFileID)
	checkOnce(t, 4, out, errs)
	if len(out) != 3 || len(errs) != 1 || errs[0].CustomID != "c2" || errs[0].Error == nil || errs[0].Error.Code != api.CodeLineFailed {
		t.Fatalf("output %+v, errors %+v", out, errs)
	}
	if got.RequestCounts != (api.RequestCounts{Total: 4, Completed: 3, Failed: 1}) {
		t.Fatalf("request counts %+v", got.RequestCounts)
	}
}

// TestBatchExactlyOnceAcrossKills kills the batch service mid-batch
// several times (its connection closed under it, or stopped) and restarts
// it: every custom_id is in the files once, every line billed once.
func TestBatchExactlyOnceAcrossKills(t *testing.T) {
	const n = 400
	e := newEnv(t, Config{AckWait: 3 * time.Second, Prefetch: 32})
	e.sim.SetTiming(15*time.Millisecond, 0)
	e.startWorker("w1", 8, true)
	e.start()
	rec := e.submit(api.EndpointChatCompletions, chatLines(n))
	midBatch := 0
	for round := range 4 {
		target := e.worker.served.Load() + 40
		e.eventually(60*time.Second, func() bool {
			return e.worker.served.Load() >= target || api.Final(e.get(rec.ID).Status)
		}, fmt.Sprintf("round %d: 40 more lines served", round))
		if e.get(rec.ID).Status == api.StatusInProgress {
			midBatch++
		}
		if round%2 == 0 {
			e.kill()
		} else {
			e.stop()
		}
		e.start()
	}
	got := e.waitStatus(rec.ID, 90*time.Second, api.StatusCompleted)
	if midBatch < 3 {
		t.Fatalf("only %d of the kills came mid-batch", midBatch)
	}
	out, errs := e.file(got.OutputFileID), e.file(got.ErrorFileID)
	checkOnce(t, n, out, errs)
	if len(out) != n || len(errs) != 0 {
		t.Fatalf("%d output lines, %d error lines", len(out), len(errs))
	}
	if got.RequestCounts != (api.RequestCounts{Total: n, Completed: n}) {
		t.Fatalf("request counts %+v", got.RequestCounts)
	}
	if u := e.usageEvents(); u != n {
		t.Fatalf("%d usage events for %d lines", u, n)
	}
	reruns := 0
	for i := range n {
		switch c := e.worker.timesServed(events.LineID(rec.ID, int64(i))); {
		case c == 0:
			t.Fatalf("line %d never served", i)
		case c > 1:
			reruns += c - 1
		}
	}
	t.Logf("%d kills mid-batch; %d lines run again after a kill (billed once: %d usage events)", midBatch, reruns, n)
	if _, _, err := kv.Get[api.Record](testCtx(t), e.batches, api.Key(testTenant, rec.ID)); err != nil {
		t.Fatal(err)
	}
}

// TestBatchUnderBusPermissions runs batches with the bus enforcing
// pkg/busauth: the batch service's identity may do everything it does.
func TestBatchUnderBusPermissions(t *testing.T) {
	e := newEnvOn(t, Config{Window: 3 * time.Second}, true)
	e.worker.gate = make(chan struct{}, 100)
	for range 10 {
		e.worker.gate <- struct{}{}
	}
	e.startWorker("w1", 2, true)
	stops := e.stopped()
	e.start()
	rec := e.submit(api.EndpointChatCompletions, chatLines(10))
	got := e.waitStatus(rec.ID, 30*time.Second, api.StatusCompleted)
	checkOnce(t, 10, e.file(got.OutputFileID), nil)
	bad := e.submit(api.EndpointChatCompletions, []string{`{"custom_id":"x"}`})
	if got := e.waitStatus(bad.ID, 30*time.Second, api.StatusFailed, api.StatusCompleted); got.Status != api.StatusFailed {
		t.Fatalf("status %s", got.Status)
	}
	// Expiry with lines in flight, and a restart that finds the batch's
	// consumer.
	exp := e.submit(api.EndpointChatCompletions, chatLines(6))
	e.eventually(30*time.Second, func() bool { return e.get(exp.ID).Status == api.StatusInProgress }, "in progress")
	e.kill()
	// What the killed service's dispatch said is not the expiry: the
	// restarted one stops the batch's dispatch at its expiry, or expires
	// it at once when the window passed while it was down.
	for len(stops) > 0 {
		<-stops
	}
	e.start()
	deadline := time.After(30 * time.Second)
	for stopped := false; !stopped; {
		select {
		case id := <-stops:
			stopped = id == exp.ID
		case <-time.After(10 * time.Millisecond):
			stopped = e.get(exp.ID).Status != api.StatusInProgress
		case <-deadline:
			t.Fatalf("the restarted service did not stop the dispatch of %s at its expiry", exp.ID)
		}
	}
	close(e.worker.gate)
	got = e.waitStatus(exp.ID, 30*time.Second, api.StatusExpired)
	checkOnce(t, 6, e.file(got.OutputFileID), e.file(got.ErrorFileID))

	edge := e.connect("edge", busauth.Edge)
	b, _ := json.Marshal(api.QueryRequest{Kind: api.QueryQueues})
	m, err := edge.Request(events.BatchQuery, b, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r api.QueuesReply
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Error != "" {
		t.Fatalf("queues reply %s: %v", m.Data, err)
	}
}

// Two replicas share a batch's lines; each learns the other's results.
func TestBatchTwoReplicas(t *testing.T) {
	e := newEnv(t, Config{Prefetch: 16})
	e.sim.SetTiming(5*time.Millisecond, 0)
	e.startWorker("w1", 8, true)
	e.start()
	nc2 := e.connect("batch-2", busauth.Batch)
	js2, err := jetstream.New(nc2)
	if err != nil {
		t.Fatal(err)
	}
	reg2 := prometheus.NewRegistry()
	svc2, err := New(e.cfg, Deps{NC: nc2, JS: js2, Objects: e.objects, Registerer: reg2, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc2.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	e.eventually(20*time.Second, svc2.Ready, "the second replica ready")
	rec := e.submit(api.EndpointChatCompletions, chatLines(200))
	got := e.waitStatus(rec.ID, 60*time.Second, api.StatusCompleted)
	out, errs := e.file(got.OutputFileID), e.file(got.ErrorFileID)
	checkOnce(t, 200, out, errs)
	if len(out) != 200 || e.usageEvents() != 200 {
		t.Fatalf("%d answered, %d usage events", len(out), e.usageEvents())
	}
	mfs, err := reg2.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sent float64
	for _, mf := range mfs {
		if mf.GetName() == "aiforge_batch_lines_dispatched_total" {
			for _, m := range mf.GetMetric() {
				sent += m.GetCounter().GetValue()
			}
		}
	}
	if sent == 0 || sent >= 200 {
		t.Fatalf("the second replica sent %v of the 200 lines; want a share", sent)
	}
}
