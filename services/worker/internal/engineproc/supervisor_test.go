package engineproc

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/ggufgen"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker/internal/engineproc/fakeengine"
)

func TestMain(m *testing.M) {
	fakeengine.Main() // serves, and exits, when run as the fake engine
	os.Exit(m.Run())
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// states records every state a supervisor reports.
type states struct {
	mu  sync.Mutex
	all []State
}

func (s *states) add(st State) { s.mu.Lock(); s.all = append(s.all, st); s.mu.Unlock() }
func (s *states) phases() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, st := range s.all {
		if len(out) == 0 || out[len(out)-1] != st.Phase {
			out = append(out, st.Phase)
		}
	}
	return out
}

// fake is a supervisor of the fake engine (this test binary) as
// llama-server, with env added to the engine's environment.
func fake(t *testing.T, env map[string]string, mut func(*Config)) (*Supervisor, *states, func()) {
	t.Helper()
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
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
	rec := &states{}
	cfg := Config{
		Spec: Spec{
			Served: "served", Upstream: "up", Port: freePort(t), Dir: filepath.Join(dir, "engine"),
			Process: registry.EngineProcess{Kind: registry.ProcessLlamaServer, Binary: exe, ModelPath: model, Env: e},
		},
		RetryInterval: 50 * time.Millisecond,
		ProbeInterval: 20 * time.Millisecond,
		StopGrace:     5 * time.Second,
		OnChange:      rec.add,
	}
	if mut != nil {
		mut(&cfg)
	}
	sup, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sup.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("the supervisor did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return sup, rec, stop
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// The engine starts and serves; killed with SIGKILL, it is restarted
// after a backoff and serves again with a new process; stopped, it is
// gone. Its metrics are scraped from /metrics (unlabelled series).
func TestCrashRestartStop(t *testing.T) {
	argsFile := filepath.Join(t.TempDir(), "args")
	sup, rec, stop := fake(t, map[string]string{fakeengine.ArgsFileEnv: argsFile}, nil)
	eventually(t, 20*time.Second, "serving", func() bool { return sup.State().Phase == PhaseServing })
	first := sup.State()
	if first.PID <= 0 || !alive(first.PID) || first.Restarts != 0 {
		t.Fatalf("state %+v", first)
	}
	b, err := os.ReadFile(argsFile)
	if err != nil || !strings.Contains(string(b), "--alias\nup\n--metrics") {
		t.Fatalf("engine args %q %v", b, err)
	}
	eventually(t, 10*time.Second, "metrics scraped", func() bool {
		names := map[string]bool{}
		for _, s := range sup.Samples() {
			names[s.Name] = true
		}
		return names["llamacpp_requests_served_total"] && names["llamacpp_kv_cache_usage_ratio"] && !names["llamacpp_labelled"]
	})

	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a restarted engine serving", func() bool {
		st := sup.State()
		return st.Phase == PhaseServing && st.Restarts == 1 && st.PID != first.PID
	})
	st := sup.State()
	if !strings.Contains(st.LastError, "signal: killed") || st.LastErrorAt.IsZero() {
		t.Fatalf("last error %q", st.LastError)
	}
	if !alive(st.PID) {
		t.Fatal("the restarted engine is not running")
	}
	ph := rec.phases()
	want := []string{PhaseStarting, PhaseServing, PhaseUnhealthy, PhaseStarting, PhaseServing}
	if strings.Join(ph, ",") != strings.Join(want, ",") {
		t.Fatalf("phases %v, want %v", ph, want)
	}
	stop()
	if sup.State().Phase != PhaseStopped {
		t.Fatalf("phase after stop %q", sup.State().Phase)
	}
	eventually(t, 10*time.Second, "the engine process to be gone", func() bool { return !alive(st.PID) })
}

// An engine that exits at start is started again with a growing backoff;
// its error carries what it printed.
func TestFailingStartBacksOff(t *testing.T) {
	sup, rec, stop := fake(t, map[string]string{fakeengine.ExitEnv: "fake engine: model file is corrupt"}, nil)
	eventually(t, 20*time.Second, "three restarts", func() bool { return sup.State().Restarts >= 3 })
	st := sup.State()
	if st.Phase == PhaseServing || !strings.Contains(st.LastError, "model file is corrupt") || !strings.Contains(st.LastError, "exit status 3") {
		t.Fatalf("state %+v", st)
	}
	stop()
	for _, p := range rec.phases() {
		if p == PhaseServing {
			t.Fatal("a failing engine was reported serving")
		}
	}
}

// An engine that ignores SIGTERM is killed after the grace.
func TestStopKillsAfterGrace(t *testing.T) {
	sup, _, stop := fake(t, map[string]string{fakeengine.IgnoreTermEnv: "1"}, func(c *Config) { c.StopGrace = 200 * time.Millisecond })
	eventually(t, 20*time.Second, "serving", func() bool { return sup.State().Phase == PhaseServing })
	pid := sup.State().PID
	stop()
	if alive(pid) {
		t.Fatal("an engine ignoring SIGTERM outlived the stop")
	}
}

// An engine that never becomes healthy in StartTimeout is killed and
// started again.
func TestStartTimeout(t *testing.T) {
	sup, _, _ := fake(t, nil, func(c *Config) {
		c.StartTimeout = 300 * time.Millisecond
		c.Spec.Process.Kind = registry.ProcessOllama // health on /api/version, which the fake does not serve as 200
	})
	eventually(t, 20*time.Second, "a restart after the start timeout", func() bool {
		st := sup.State()
		return st.Restarts >= 1 && strings.Contains(st.LastError, "did not answer")
	})
	if sup.State().Phase == PhaseServing {
		t.Fatal("served")
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{Spec: Spec{Process: registry.EngineProcess{Kind: "x"}}}); err == nil {
		t.Fatal("a bad process accepted")
	}
	_, err := New(Config{Spec: Spec{Process: registry.EngineProcess{Kind: registry.ProcessColi, ModelPath: "/m"}}})
	if err == nil || !strings.Contains(err.Error(), "port") {
		t.Fatalf("no port: %v", err)
	}
}

// Sleep stops the engine and keeps it stopped (asleep, no restart); Wake
// starts it again once however often it is called, measures the cold
// start, and counts a wake, not a restart; a Sleep racing a Wake leaves it
// awake or asleep, never restarting in a loop.
func TestSleepWake(t *testing.T) {
	var colds []time.Duration
	var mu sync.Mutex
	sup, rec, _ := fake(t, nil, func(c *Config) {
		c.OnColdStart = func(d time.Duration) { mu.Lock(); colds = append(colds, d); mu.Unlock() }
	})
	eventually(t, 20*time.Second, "serving", func() bool { return sup.State().Phase == PhaseServing })
	if sup.Wake() {
		t.Fatal("Wake of an awake engine started it")
	}
	pid := sup.State().PID
	for cycle := 1; cycle <= 2; cycle++ {
		if !sup.Sleep() || sup.Sleep() {
			t.Fatal("Sleep reported wrongly")
		}
		eventually(t, 20*time.Second, "asleep", func() bool { return sup.State().Phase == PhaseAsleep })
		if alive(pid) || sup.State().PID != 0 {
			t.Fatalf("asleep with pid %d alive", pid)
		}
		woke := 0
		var wg sync.WaitGroup
		var wmu sync.Mutex
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if sup.Wake() {
					wmu.Lock()
					woke++
					wmu.Unlock()
				}
			}()
		}
		wg.Wait()
		if woke != 1 || !sup.State().Waking {
			t.Fatalf("cycle %d: %d wakes started it; state %+v", cycle, woke, sup.State())
		}
		eventually(t, 20*time.Second, "serving again", func() bool { st := sup.State(); return st.Phase == PhaseServing && !st.Waking })
		st := sup.State()
		if st.PID == pid || !alive(st.PID) || st.Wakes != cycle || st.Restarts != 0 || st.LastColdStart <= 0 {
			t.Fatalf("cycle %d: state %+v", cycle, st)
		}
		pid = st.PID
	}
	mu.Lock()
	n := len(colds)
	mu.Unlock()
	if n != 2 {
		t.Fatalf("%d cold starts measured", n)
	}
	// Woken before the stopped engine was even seen asleep: it serves.
	sup.Sleep()
	sup.Wake()
	eventually(t, 20*time.Second, "serving after a sleep and a wake at once", func() bool {
		st := sup.State()
		return st.Phase == PhaseServing && !st.Waking && st.PID != pid
	})
	if st := sup.State(); st.Restarts != 0 || st.Wakes != 3 {
		t.Fatalf("state %+v", st)
	}
	for _, p := range rec.phases() {
		if p == PhaseUnhealthy {
			t.Fatalf("a sleep or wake looked like a failure: %v", rec.phases())
		}
	}
}
