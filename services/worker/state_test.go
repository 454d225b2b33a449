package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

// swapEngine is an engine whose implementation a test replaces as it
// goes (an engine restarted with another key or other weights); a nil
// handler is an engine that is down (connections are dropped).
type swapEngine struct {
	h   atomic.Pointer[http.Handler]
	url string
}

func newSwapEngine(t testing.TB, h http.Handler) *swapEngine {
	e := &swapEngine{}
	e.set(h)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := e.h.Load()
		if p == nil || *p == nil {
			panic(http.ErrAbortHandler) // the connection is dropped
		}
		(*p).ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	e.url = ts.URL + "/v1"
	return e
}

func (e *swapEngine) set(h http.Handler) { e.h.Store(&h) }

// replicas lists what the replicas of model report in the bucket.
func (h *harness) replicas(model string) []registry.WorkerState {
	h.t.Helper()
	ws, err := registry.OpenWorkers(testCtx(h.t), h.js)
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := ws.List(testCtx(h.t), model)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// waitReported waits until the only replica of model reports a state
// cond accepts, and returns it.
func (h *harness) waitReported(model, what string, cond func(registry.WorkerState) bool) registry.WorkerState {
	h.t.Helper()
	var got registry.WorkerState
	eventually(h.t, 10*time.Second, what, func() bool {
		rs := h.replicas(model)
		if len(rs) != 1 {
			return false
		}
		got = rs[0]
		return cond(got)
	})
	return got
}

func stateIs(state string) func(registry.WorkerState) bool {
	return func(st registry.WorkerState) bool { return st.State == state }
}

func (h *harness) notServed(t *testing.T, model string) {
	t.Helper()
	_, _, err := h.do(testCtx(t), newReq(model, events.EndpointChatCompletions, false, false, chatBody))
	if !errors.Is(err, bridge.ErrNoWorker) {
		t.Fatalf("a replica that does not pass its checks took a request: %v", err)
	}
}

func TestStateUnreachableThenServing(t *testing.T) {
	h := newHarness(t)
	eng := newSwapEngine(t, nil) // down
	cfg := modelFor("served", "up", eng.url)
	cfg.EngineWaitMax = 50 * time.Millisecond
	cfg.Engine.ID = "gpu-a"
	svc, done, stop := h.runWorkerCancel(cfg, h.deps())

	st := h.waitReported("served", "the unreachable state", stateIs(registry.WorkerUnreachable))
	if st.WorkerID != svc.ID() || st.EngineID != "gpu-a" || st.UpstreamModel != "up" || st.UpstreamVerified ||
		st.LastError == "" || st.LastErrorAt.IsZero() || st.StartedAt.IsZero() || !strings.HasPrefix(st.BaseURL, "http://127.0.0.1:") {
		t.Fatalf("unreachable state %+v", st)
	}
	h.notServed(t, "served")

	sim := enginesim.New(enginesim.Config{Models: []string{"up"}})
	eng.set(sim)
	st = h.waitReported("served", "the serving state", stateIs(registry.WorkerServing))
	if !st.UpstreamVerified || st.KeyVerified || st.MaxConcurrency != DefaultMaxConcurrency || st.MaxConcurrencyFrom != FromDefault ||
		st.LastError == "" {
		t.Fatalf("serving state %+v (the last error stays, with its time)", st)
	}
	if n := sim.Stats().Requests; n != 0 {
		t.Fatalf("without an engine key nothing but the model list is checked; the engine got %d inference requests", n)
	}
	if _, _, err := h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, chatBody)); err != nil {
		t.Fatal(err)
	}

	// The engine goes away while serving: unhealthy, paused; back: serving.
	eng.set(nil)
	h.waitReported("served", "the unhealthy state", stateIs(registry.WorkerUnhealthy))
	if svc.Ready() {
		t.Fatal("ready with its engine gone")
	}
	eng.set(sim)
	h.waitReported("served", "serving again", stateIs(registry.WorkerServing))

	// A stopping replica removes its state.
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rs := h.replicas("served"); len(rs) != 0 {
		t.Fatalf("a stopped replica left its state: %+v", rs)
	}
}

func TestHealthCheckFailureIsUnhealthy(t *testing.T) {
	// The existing health check path (TestHealthPausesWorker) with the
	// state it reports: a 5xx while serving is unhealthy.
	h := newHarness(t)
	sim := enginesim.New(enginesim.Config{Models: []string{"up"}})
	var failing atomic.Bool
	eng := newSwapEngine(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, "engine sick", http.StatusServiceUnavailable)
			return
		}
		sim.ServeHTTP(w, r)
	}))
	cfg := modelFor("served", "up", eng.url)
	cfg.HealthInterval = 20 * time.Millisecond
	h.startWorker(cfg)
	failing.Store(true)
	st := h.waitReported("served", "the unhealthy state", stateIs(registry.WorkerUnhealthy))
	if !strings.Contains(st.LastError, "503") {
		t.Fatalf("last error %q", st.LastError)
	}
	failing.Store(false)
	h.waitReported("served", "serving again", stateIs(registry.WorkerServing))
}

func TestStateWrongEngineKey(t *testing.T) {
	h := newHarness(t)
	const right, wrong = "sk-engine-RIGHT-41d2", "sk-engine-WRONG-93ab"
	// Like llama-server with --api-key: /v1/models is open, the rest is not.
	engineWith := func(key string) *enginesim.Sim {
		return enginesim.New(enginesim.Config{Models: []string{"up"}, APIKey: key})
	}
	eng := newSwapEngine(t, engineWith(right).With(enginesim.Flavor{OpenModels: true}))
	cfg := modelFor("served", "up", eng.url)
	cfg.Engine.APIKey = wrong
	cfg.EngineWaitMax = 50 * time.Millisecond
	svc, _ := h.runWorker(cfg, h.deps())

	st := h.waitReported("served", "the unauthorized state", stateIs(registry.WorkerUnauthorized))
	if !st.UpstreamVerified || st.KeyVerified || !strings.Contains(st.LastError, "401") {
		t.Fatalf("unauthorized state %+v", st)
	}
	if svc.Ready() {
		t.Fatal("ready with its key refused")
	}
	h.notServed(t, "served")
	raw, err := json.Marshal(h.replicas("served"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), wrong) || strings.Contains(h.logs.String(), wrong) {
		t.Fatalf("the engine key shows in the state or the logs: %s", raw)
	}

	// The engine is restarted with the key the binding holds: it serves.
	eng.set(engineWith(wrong).With(enginesim.Flavor{OpenModels: true}))
	st = h.waitReported("served", "the serving state", stateIs(registry.WorkerServing))
	if !st.KeyVerified || !st.UpstreamVerified {
		t.Fatalf("serving state %+v", st)
	}
	eventually(t, 10*time.Second, "a request served", func() bool {
		_, _, err := h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, chatBody))
		return err == nil
	})
}

func TestStateMisnamedThenServing(t *testing.T) {
	h := newHarness(t)
	eng := newSwapEngine(t, enginesim.New(enginesim.Config{Models: []string{"other-weights"}}))
	cfg := modelFor("served", "up", eng.url)
	cfg.EngineWaitMax = 50 * time.Millisecond
	h.runWorker(cfg, h.deps())
	st := h.waitReported("served", "the misnamed state", stateIs(registry.WorkerMisnamed))
	if st.UpstreamVerified || !strings.Contains(st.LastError, "other-weights") {
		t.Fatalf("misnamed state %+v", st)
	}
	h.notServed(t, "served")
	eng.set(enginesim.New(enginesim.Config{Models: []string{"up"}}))
	st = h.waitReported("served", "the serving state", stateIs(registry.WorkerServing))
	if !st.UpstreamVerified {
		t.Fatalf("serving state %+v", st)
	}
}

func TestMaxConcurrencyFromEngine(t *testing.T) {
	h := newHarness(t)
	// A llama-server with 3 slots and a 4096-token context per slot.
	sim, base, closeFn, err := enginesim.StartFlavor(enginesim.Config{Models: []string{"up"}, TokensPerSecond: 20},
		enginesim.Flavor{TotalSlots: 3, NCtx: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	cfg := modelFor("served", "up", base)
	cfg.StateInterval = 20 * time.Millisecond
	svc := h.startWorker(cfg)
	st := h.waitReported("served", "the serving state", stateIs(registry.WorkerServing))
	if st.MaxConcurrency != 3 || st.MaxConcurrencyFrom != FromEngine || st.ContextWindow != 4096 {
		t.Fatalf("state %+v, want 3 slots from the engine and a 4096 context", st)
	}

	// The bridge server uses it: of 5 long requests, 3 reach the engine
	// and 2 wait for a slot, and the state says so.
	ctx, cancel := context.WithCancel(testCtx(t))
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			body := strings.Replace(chatBody, `"max_tokens":6`, `"max_tokens":2000,"stream":true`, 1)
			_, _, _ = h.do(ctx, newReq("served", events.EndpointChatCompletions, true, false, body))
		})
	}
	h.waitReported("served", "3 in flight and 2 queued", func(st registry.WorkerState) bool {
		return st.InFlight == 3 && st.Queued == 2
	})
	if n := sim.Stats().InFlight; n != 3 {
		t.Fatalf("the engine holds %d requests, want 3", n)
	}
	if st := svc.State(); st.InFlight != 3 || st.Queued != 2 {
		t.Fatalf("state %+v", st)
	}
	cancel()
	wg.Wait()
}

func TestMaxConcurrencyPrecedence(t *testing.T) {
	h := newHarness(t)
	_, base, closeFn, err := enginesim.StartFlavor(enginesim.Config{Models: []string{"up", "vllm"}},
		enginesim.Flavor{TotalSlots: 3, MaxModelLen: 32768})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)

	// The binding's value wins over the engine's.
	cfg := modelFor("pinned", "up", base)
	cfg.Engine.MaxConcurrency = 2
	h.startWorker(cfg)
	st := h.waitReported("pinned", "the serving state", stateIs(registry.WorkerServing))
	if st.MaxConcurrency != 2 || st.MaxConcurrencyFrom != FromRegistry || st.ContextWindow != 32768 {
		t.Fatalf("state %+v", st)
	}

	// An engine that reports nothing: the worker's default.
	_, plain := startSim(t, enginesim.Config{Models: []string{"up"}})
	cfg = modelFor("plain", "up", plain)
	cfg.DefaultMaxConcurrency = 7
	h.startWorker(cfg)
	st = h.waitReported("plain", "the serving state", stateIs(registry.WorkerServing))
	if st.MaxConcurrency != 7 || st.MaxConcurrencyFrom != FromDefault || st.ContextWindow != 0 {
		t.Fatalf("state %+v", st)
	}
}

func TestStateWriteFailureKeepsServing(t *testing.T) {
	h := newHarness(t)
	// A bus without the workers bucket (an older deployment): the worker
	// serves anyway and says once that it cannot report.
	if err := h.js.DeleteKeyValue(testCtx(t), events.BucketWorkers); err != nil {
		t.Fatal(err)
	}
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	cfg := modelFor("served", "up", base)
	cfg.StateInterval = 10 * time.Millisecond
	h.startWorker(cfg)
	if _, _, err := h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, chatBody)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the failure logged", func() bool {
		return strings.Contains(h.logs.String(), "could not report the worker's state")
	})
	if n := strings.Count(h.logs.String(), "could not report the worker's state"); n != 1 {
		t.Fatalf("logged %d times, want once", n)
	}
}
