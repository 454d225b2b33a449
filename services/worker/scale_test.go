package worker

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ggufgen"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker/internal/engineproc/fakeengine"
)

// fakeClock is the clock of idle stops in the tests: it moves only when
// the test advances it, so an engine sleeps exactly when the test says.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// sleepyWorker runs a worker supervising the fake engine (as
// llama-server) with an idle stop of an hour on clock, checked every few
// milliseconds: it sleeps only when the test advances the clock.
func sleepyWorker(t *testing.T, h *harness, clock *fakeClock, env map[string]string, tune func(*Config)) *Service {
	t.Helper()
	model := filepath.Join(t.TempDir(), "m.gguf")
	if err := ggufgen.WriteFile(model, ggufgen.Config{}); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := map[string]string{fakeengine.FakeEnv: "1"}
	for k, v := range env {
		e[k] = v
	}
	cfg := supervisedConfig(t, "sleepy", registry.EngineProcess{
		Kind: registry.ProcessLlamaServer, Binary: exe, ModelPath: model, Env: e, IdleStop: registry.Duration(time.Hour),
	})
	cfg.IdleCheckInterval = 2 * time.Millisecond
	if tune != nil {
		tune(&cfg)
	}
	deps := h.deps()
	deps.Now = clock.Now
	svc, _ := h.runWorker(cfg, deps)
	eventually(t, 30*time.Second, "ready", svc.Ready)
	return svc
}

func (h *harness) chat(t *testing.T, stream bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, res, err := h.do(ctx, newReq("sleepy", events.EndpointChatCompletions, stream, false, chatBody))
	if err == nil && res.Status != http.StatusOK {
		err = errors.New("status " + res.ContentType)
	}
	return err
}

// asleep advances the clock past the idle stop and waits for the replica
// to report its engine asleep, still serving; it returns the state.
func (h *harness) asleep(t *testing.T, clock *fakeClock) registry.WorkerState {
	t.Helper()
	// Advanced at each poll: a request's end, recorded just after its
	// answer reached the test, counts as activity at the clock's time.
	return h.waitReported("sleepy", "the engine asleep", func(st registry.WorkerState) bool {
		clock.Advance(2 * time.Hour)
		return st.State == registry.WorkerServing && st.Process != nil && st.Process.State == registry.ProcessAsleep
	})
}

func engineState(t *testing.T, h *harness, state string) float64 {
	t.Helper()
	m := findMetric(t, h, "aiforge_engine_state", map[string]string{"model": "sleepy", "state": state})
	if m == nil {
		t.Fatalf("no aiforge_engine_state{state=%q}", state)
	}
	return m.GetGauge().GetValue()
}

// An engine with an idle stop is stopped when idle (its process gone, the
// replica still serving and reporting it asleep) and woken by the next
// requests: concurrent first requests start it once and are all answered.
// Each wake is measured in aiforge_engine_cold_start_seconds; none counts
// as a restart. The clock is the test's: nothing sleeps before it moves.
func TestScaleToZeroAndBack(t *testing.T) {
	h := newHarness(t)
	clock := newFakeClock()
	svc := sleepyWorker(t, h, clock, nil, nil)
	if err := h.chat(t, false); err != nil {
		t.Fatal(err)
	}
	first := h.waitReported("sleepy", "serving", func(st registry.WorkerState) bool {
		return st.Process != nil && st.Process.State == registry.ProcessServing && st.Process.PID > 0
	})
	if svc.proc.Asleep() {
		t.Fatal("asleep before the clock moved")
	}
	pid := first.Process.PID
	for cycle := 1; cycle <= 3; cycle++ {
		h.asleep(t, clock)
		eventually(t, 10*time.Second, "the engine process gone", func() bool { return syscall.Kill(pid, 0) != nil })
		if !svc.Ready() || engineState(t, h, registry.ProcessAsleep) != 1 || engineState(t, h, registry.ProcessServing) != 0 {
			t.Fatalf("cycle %d: ready %v, state gauges asleep %v serving %v", cycle, svc.Ready(),
				engineState(t, h, registry.ProcessAsleep), engineState(t, h, registry.ProcessServing))
		}
		n := 1 + 2*cycle // several first requests, streamed and not
		errs := make(chan error, n)
		for i := range n {
			go func() { errs <- h.chat(t, i%2 == 0) }()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("cycle %d: a request to the asleep engine: %v", cycle, err)
			}
		}
		st := svc.State()
		p := st.Process
		if p.State != registry.ProcessServing || p.PID == pid || p.Wakes != cycle || p.Restarts != 0 || p.LastColdStart <= 0 {
			t.Fatalf("cycle %d: process %+v", cycle, p)
		}
		pid = p.PID
		if c := histogramCount(t, h, "aiforge_engine_cold_start_seconds", "sleepy"); c != uint64(cycle) {
			t.Fatalf("cycle %d: %d cold starts measured", cycle, c)
		}
	}
	if v := counterValue(t, h, "aiforge_engine_restarts_total", map[string]string{"model": "sleepy"}); v != 0 {
		t.Fatalf("wakes counted as restarts: %v", v)
	}
	// Idle is counted from the last request's end.
	clock.Advance(59 * time.Minute)
	if err := h.chat(t, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the request ended in the worker", func() bool { return svc.active.Load() == 0 })
	clock.Advance(59 * time.Minute)
	if svc.maybeSleep() || svc.proc.Asleep() {
		t.Fatal("asleep 59 minutes after a request, with an idle stop of an hour")
	}
}

// Past the cold start wait a request for an asleep engine is answered 503
// model_warming with a Retry-After, streamed or not, while the engine
// goes on starting; once it is healthy requests are served.
func TestScaleToZeroWarmingPastTheBound(t *testing.T) {
	h := newHarness(t)
	clock := newFakeClock()
	hold := filepath.Join(t.TempDir(), "hold")
	svc := sleepyWorker(t, h, clock, map[string]string{fakeengine.HoldFileEnv: hold}, func(c *Config) {
		c.ColdStartWait = 50 * time.Millisecond
	})
	h.asleep(t, clock)
	// The woken engine answers its health probe 503 while hold exists:
	// it cannot become healthy within the wait.
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{false, true} {
		err := h.chat(t, stream)
		var be *bridge.Error
		if !errors.As(err, &be) || be.Status != http.StatusServiceUnavailable || be.Code != contracts.CodeModelWarming ||
			be.RetryAfter < time.Second || be.Retryable {
			t.Fatalf("stream %v: %v (%+v)", stream, err, be)
		}
		e, ok := contracts.ParseError(be.Status, be.Body)
		if !ok || e.Code != contracts.CodeModelWarming || !strings.Contains(e.Message, "sleepy") {
			t.Fatalf("stream %v: body %s", stream, be.Body)
		}
	}
	h.waitReported("sleepy", "the engine starting on", func(st registry.WorkerState) bool {
		return st.State == registry.WorkerServing && st.Process != nil && st.Process.State == registry.ProcessStarting && st.Process.Wakes == 0
	})
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "served once the engine is healthy", func() bool { return h.chat(t, true) == nil })
	if p := svc.State().Process; p.Wakes != 1 || p.Restarts != 0 {
		t.Fatalf("process %+v", p)
	}
	if v := counterValue(t, h, "aiforge_worker_request_errors_total", map[string]string{"model": "sleepy", "code": contracts.CodeModelWarming}); v < 2 {
		t.Fatalf("model_warming errors counted %v", v)
	}
}

// A wake whose start fails answers its requests at once with a clear
// error (not a wait to the bound, here longer than the test); the engine
// is started again with backoff and serves once it can.
func TestScaleToZeroFailedWake(t *testing.T) {
	h := newHarness(t)
	clock := newFakeClock()
	exitFile := filepath.Join(t.TempDir(), "exit")
	svc := sleepyWorker(t, h, clock, map[string]string{fakeengine.ExitFileEnv: exitFile}, func(c *Config) {
		c.ColdStartWait = time.Hour
	})
	h.asleep(t, clock)
	if err := os.WriteFile(exitFile, []byte("cannot load the model"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := h.chat(t, false)
	var be *bridge.Error
	if !errors.As(err, &be) || be.Status != http.StatusServiceUnavailable || be.Code != contracts.CodeNoWorker {
		t.Fatalf("a failed wake answered %v (%+v)", err, be)
	}
	if e, ok := contracts.ParseError(be.Status, be.Body); !ok || !strings.Contains(e.Message, "failed to start") || strings.Contains(e.Message, "cannot load") {
		t.Fatalf("body %s (%v)", be.Body, err)
	}
	st := h.waitReported("sleepy", "the failure reported", func(st registry.WorkerState) bool {
		return st.Process != nil && strings.Contains(st.Process.LastError, "cannot load the model")
	})
	if st.Process.Wakes != 0 {
		t.Fatalf("process %+v", st.Process)
	}
	if err := os.Remove(exitFile); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "served after the engine started", func() bool { return h.chat(t, false) == nil })
	if !svc.Ready() {
		t.Fatal("not ready")
	}
}

// No idle stop: the engine never sleeps, however long it idles.
func TestNoIdleStopNeverSleeps(t *testing.T) {
	h := newHarness(t)
	clock := newFakeClock()
	svc := sleepyWorker(t, h, clock, nil, func(c *Config) { c.Engine.Process.IdleStop = 0 })
	clock.Advance(1000 * time.Hour)
	if svc.maybeSleep() || svc.proc.Asleep() {
		t.Fatal("an engine without an idle stop was put to sleep")
	}
	if err := h.chat(t, false); err != nil {
		t.Fatal(err)
	}
}

// A worker stopped while its engine is asleep stops at once, its engine
// process stopped for good (not woken to be stopped).
func TestStopWhileAsleep(t *testing.T) {
	h := newHarness(t)
	clock := newFakeClock()
	model := filepath.Join(t.TempDir(), "m.gguf")
	if err := ggufgen.WriteFile(model, ggufgen.Config{}); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := supervisedConfig(t, "sleepy", registry.EngineProcess{
		Kind: registry.ProcessLlamaServer, Binary: exe, ModelPath: model, Env: map[string]string{fakeengine.FakeEnv: "1"},
		IdleStop: registry.Duration(time.Hour),
	})
	cfg.IdleCheckInterval = 2 * time.Millisecond
	deps := h.deps()
	deps.Now = clock.Now
	svc, done, stop := h.runWorkerCancel(cfg, deps)
	eventually(t, 30*time.Second, "ready", svc.Ready)
	h.asleep(t, clock)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := svc.proc.State(); st.Phase != registry.ProcessStopped || st.Wakes != 0 || st.PID != 0 {
		t.Fatalf("engine after the worker stopped: %+v", st)
	}
}
