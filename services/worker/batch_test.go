package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// batchClient is a bridge client on the batch family, as the batch service
// has.
func (h *harness) batchClient() *bridge.Client {
	h.t.Helper()
	c, err := bridge.NewClient(h.edge, bridge.ClientConfig{Family: bridge.FamilyBatch})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = c.Close() })
	return c
}

// usageCount is how many events the USAGE stream holds on subj.
func (h *harness) usageCount(subj string) uint64 {
	h.t.Helper()
	ctx := testCtx(h.t)
	stream, err := h.js.Stream(ctx, events.StreamUsage)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Subjects[subj]
}

// usageV3 waits for the one batch usage event of tenant.
func (h *harness) usageV3(tenant string) (events.UsageRecordedV3, *jetstream.RawStreamMsg) {
	h.t.Helper()
	ctx := testCtx(h.t)
	stream, err := h.js.Stream(ctx, events.StreamUsage)
	if err != nil {
		h.t.Fatal(err)
	}
	subj := events.Subject(events.TypeUsageRecordedV3, tenant)
	var msg *jetstream.RawStreamMsg
	eventually(h.t, 10*time.Second, "usage event on "+subj, func() bool {
		m, err := stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false
		}
		if err != nil {
			h.t.Fatal(err)
		}
		msg = m
		return true
	})
	var ev events.UsageRecordedV3
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		h.t.Fatal(err)
	}
	if err := ev.Validate(); err != nil {
		h.t.Fatalf("usage event invalid: %v", err)
	}
	if n := h.usageCount(subj); n != 1 {
		h.t.Fatalf("%d usage events on %s, want 1", n, subj)
	}
	return ev, msg
}

// A batch line (the batch family, with its batch id) is served like a
// real-time request and recorded as usage v3 with the batch flag and id,
// its request id the event id, so a redelivered line is recorded once;
// every other field is what the same real-time request records.
func TestBatchLineUsage(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	cfg := modelFor("served", "up", base)
	cfg.Engine.Class = "cpu-moe"
	svc := h.startWorker(cfg)
	batch := h.batchClient()
	body := `{"model":"served","messages":[{"role":"user","content":"hello"}],"max_tokens":5}`

	rt := newReq("served", events.EndpointChatCompletions, false, false, body)
	if _, res, err := h.do(testCtx(t), rt); err != nil || res.Status != http.StatusOK {
		t.Fatalf("real-time request: %+v %v", res, err)
	}
	rtEv, _ := h.usageEvent(rt.Tenant)

	line := newReq("served", events.EndpointChatCompletions, false, false, body)
	line.Reservations = []events.Reservation{{Key: "tenant.x", NanoUSD: 7}}
	line.Header = nats.Header{bridge.HdrBatchID: []string{"batch_abc"}}
	var got []byte
	res, err := batch.Do(testCtx(t), line, func(p []byte) error { got = append(got, p...); return nil })
	if err != nil || res.Status != http.StatusOK || res.WorkerID != svc.ID() {
		t.Fatalf("batch line: %+v %v", res, err)
	}
	if !json.Valid(got) {
		t.Fatalf("batch line answer %q", got)
	}
	ev, msg := h.usageV3(line.Tenant)
	if msg.Header.Get(nats.MsgIdHdr) != line.ID || ev.RequestID != line.ID {
		t.Fatalf("msg id %q, event request id %q, want %q", msg.Header.Get(nats.MsgIdHdr), ev.RequestID, line.ID)
	}
	if msg.Header.Get(events.HeaderType) != events.TypeUsageRecordedV3 {
		t.Fatalf("event type %q", msg.Header.Get(events.HeaderType))
	}
	if !ev.Batch || ev.BatchID != "batch_abc" {
		t.Fatalf("batch %v id %q", ev.Batch, ev.BatchID)
	}
	if len(ev.Reservations) != 1 || ev.Reservations[0] != line.Reservations[0] {
		t.Fatalf("reservations %+v", ev.Reservations)
	}
	if n := h.usageCount(events.Subject(events.TypeUsageRecordedV2, line.Tenant)); n != 0 {
		t.Fatalf("a batch line also published %d v2 events", n)
	}
	// Everything but the per-request fields is the real-time request's.
	norm := func(u events.UsageRecordedV1) events.UsageRecordedV1 {
		u.RequestID, u.Tenant, u.LatencyMS, u.StartedAt, u.FinishedAt = "", "", 0, time.Time{}, time.Time{}
		return u
	}
	if a, b := norm(ev.UsageRecordedV1), norm(rtEv); a != b {
		t.Fatalf("batch line usage\n %+v\nreal-time usage\n %+v", a, b)
	}

	// The same line again (the batch service redelivering it to a worker
	// after a crash): answered, and still one usage event.
	if _, err := batch.Do(testCtx(t), line, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the second answer's usage publish", func() bool {
		return counterValue(t, h, "aiforge_worker_requests_total",
			map[string]string{"model": "served", "endpoint": "chat.completions", "status": "ok"}) == 3
	})
	h.usageV3(line.Tenant)

	// The replica reports its class.
	h.waitReported("served", "the class reported", func(st registry.WorkerState) bool {
		return st.State == registry.WorkerServing && st.Class == "cpu-moe"
	})
	if st := svc.State(); st.Class != "cpu-moe" {
		t.Fatalf("State().Class = %q", st.Class)
	}
}

// A batch line without a batch id is refused before the engine, and not
// billed (its usage could not name its batch).
func TestBatchLineWithoutBatchID(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	h.startWorker(modelFor("served", "up", base))
	batch := h.batchClient()
	line := newReq("served", events.EndpointChatCompletions, false, false, chatBody)
	_, err := batch.Do(testCtx(t), line, func([]byte) error { return nil })
	var be *bridge.Error
	if !errors.As(err, &be) || be.Status != http.StatusBadRequest || be.Retryable {
		t.Fatalf("err %v, want a permanent 400", err)
	}
	if sim.LastBody() != nil {
		t.Fatalf("the engine got %s", sim.LastBody())
	}
	for _, typ := range []string{events.TypeUsageRecordedV2, events.TypeUsageRecordedV3} {
		if n := h.usageCount(events.Subject(typ, line.Tenant)); n != 0 {
			t.Fatalf("%d usage events on %s", n, typ)
		}
	}
}

// The only slot runs a batch line whose reader stalls, and another line
// waits; a real-time stream queued after it starts first when the slot
// frees. The batch gauges show the lines' share of running and waiting.
func TestRealtimeWinsOverBatchLines(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	cfg := modelFor("served", "up", base)
	cfg.Engine.MaxConcurrency = 1
	h.startWorker(cfg)
	batch := h.batchClient()
	const long = `{"model":"served","messages":[{"role":"user","content":"hi"}],"max_tokens":2000}`
	gauge := func(name string) float64 {
		m := findMetric(t, h, name, map[string]string{"model": "served"})
		if m == nil {
			return -1
		}
		return m.GetGauge().GetValue()
	}
	firsts := make(chan string, 4)
	done := make(chan error, 4)
	stream := func(ctx context.Context, c *bridge.Client, name string, stall bool) {
		req := newReq("served", events.EndpointChatCompletions, true, false, long)
		req.Header = nats.Header{bridge.HdrBatchID: []string{"batch_1"}}
		go func() {
			first := true
			_, err := c.Do(ctx, req, func([]byte) error {
				if first {
					first = false
					firsts <- name
					if stall {
						<-ctx.Done()
						return ctx.Err()
					}
				}
				return nil
			})
			if stall && errors.Is(err, context.Canceled) {
				err = nil
			}
			done <- err
		}()
	}
	ctx := testCtx(t)
	l1, stopL1 := context.WithCancel(ctx)
	defer stopL1()
	stream(l1, batch, "line1", true)
	if got := recv(t, firsts, "line1 to start"); got != "line1" {
		t.Fatalf("%s started", got)
	}
	stream(ctx, batch, "line2", false)
	eventually(t, 10*time.Second, "line2 queued", func() bool { return gauge("aiforge_worker_batch_requests_waiting") == 1 })
	stream(ctx, h.client, "rt", false)
	eventually(t, 10*time.Second, "rt queued", func() bool { return gauge("aiforge_worker_requests_waiting") == 2 })
	if v := gauge("aiforge_worker_batch_requests_running"); v != 1 {
		t.Fatalf("batch running %v, want 1", v)
	}
	stopL1()
	if got := recv(t, firsts, "the next stream"); got != "rt" {
		t.Fatalf("%s started when the slot freed; want the real-time stream", got)
	}
	if got := recv(t, firsts, "the last stream"); got != "line2" {
		t.Fatalf("%s started last; want line2", got)
	}
	for range 3 {
		if err := recv(t, done, "the streams to end"); err != nil {
			t.Fatal(err)
		}
	}
}

func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
