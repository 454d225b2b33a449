package worker

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ggufgen"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker/internal/engineproc/fakeengine"
)

func TestMain(m *testing.M) {
	fakeengine.Main() // serves, and exits, when run as the fake engine
	os.Exit(m.Run())
}

// supervisedConfig binds served to a supervised engine process.
func supervisedConfig(t *testing.T, served string, p registry.EngineProcess) Config {
	t.Helper()
	return Config{
		Model:          served,
		Engine:         registry.Engine{Model: "up", Process: &p, Class: "cpu-moe"},
		EngineDir:      t.TempDir(),
		EngineProcess:  EngineProcessConfig{RetryInterval: 50 * time.Millisecond, ProbeInterval: 50 * time.Millisecond},
		HealthInterval: time.Minute, // the process supervisor's changes trigger checks
	}
}

// outage sends requests while the engine is down: each ends, answered or
// failed retryably (or with no worker to take it), never hanging.
func (h *harness) outage(t *testing.T, model string, n int) (answered int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, res, err := h.do(ctx, newReq(model, events.EndpointChatCompletions, false, false, chatBody))
			mu.Lock()
			defer mu.Unlock()
			var be *bridge.Error
			switch {
			case err == nil && res.Status == http.StatusOK:
				answered++
			case errors.Is(err, bridge.ErrNoWorker):
			case errors.As(err, &be) && (be.Retryable || be.Status == http.StatusServiceUnavailable || be.Status == http.StatusBadGateway):
			default:
				t.Errorf("a request during the outage: %+v %v", res, err)
			}
		}()
	}
	wg.Wait()
	return answered
}

// A worker supervising its engine (the fake engine, as llama-server)
// serves once the engine is healthy; killed with SIGKILL, the engine is
// restarted and the worker serves again; the replica reports the
// process's state and the engine's metrics are exported; stopping the
// worker stops the engine.
func TestSupervisedEngineCrashRestart(t *testing.T) {
	h := newHarness(t)
	model := filepath.Join(t.TempDir(), "moe.gguf")
	if err := ggufgen.WriteFile(model, ggufgen.Config{Layers: 2, Experts: 4}); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := supervisedConfig(t, "served", registry.EngineProcess{
		Kind: registry.ProcessLlamaServer, Binary: exe, ModelPath: model, Slots: 3, MoEPlacement: "1",
		Env: map[string]string{fakeengine.FakeEnv: "1"},
	})
	svc, done, stop := h.runWorkerCancel(cfg, h.deps())
	eventually(t, 30*time.Second, "ready", svc.Ready)
	chat := func() error {
		_, res, err := h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, chatBody))
		if err == nil && res.Status != http.StatusOK {
			err = errors.New(res.ContentType)
		}
		return err
	}
	if err := chat(); err != nil {
		t.Fatal(err)
	}
	st := h.waitReported("served", "the process serving", func(st registry.WorkerState) bool {
		return st.State == registry.WorkerServing && st.Process != nil && st.Process.State == registry.ProcessServing
	})
	p := st.Process
	if p.Kind != registry.ProcessLlamaServer || p.PID <= 0 || p.MoEPlacement != "layers" || p.MoECPULayers != 1 || p.MoELayers != 2 ||
		p.MoEExpertsUsed != 2 || st.MaxConcurrency != 3 || st.Class != "cpu-moe" || !strings.HasPrefix(st.BaseURL, "http://127.0.0.1:") {
		t.Fatalf("state %+v process %+v", st, p)
	}
	eventually(t, 10*time.Second, "the engine's metrics", func() bool {
		up, ok := gaugeValueOK(t, h, "aiforge_engine_up", "served")
		return ok && up == 1 && findMetric(t, h, "aiforge_engine_llamacpp_kv_cache_usage_ratio", map[string]string{"model": "served", "engine": "llama-server"}) != nil
	})
	if m := findMetric(t, h, "aiforge_engine_moe_cpu_layers", map[string]string{"model": "served", "placement": "layers"}); m == nil || m.GetGauge().GetValue() != 1 {
		t.Fatalf("placement gauge %v", m)
	}
	if m := findMetric(t, h, "aiforge_engine_read_bytes_total", map[string]string{"model": "served"}); m == nil {
		t.Fatal("no process read bytes")
	}

	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.outage(t, "served", 4)
	st = h.waitReported("served", "the restarted process serving", func(st registry.WorkerState) bool {
		return st.State == registry.WorkerServing && st.Process != nil && st.Process.State == registry.ProcessServing && st.Process.Restarts == 1
	})
	if st.Process.PID == p.PID || !strings.Contains(st.Process.LastError, "killed") {
		t.Fatalf("process %+v", st.Process)
	}
	eventually(t, 10*time.Second, "serving again", svc.Ready)
	eventually(t, 10*time.Second, "a chat after the restart", func() bool { return chat() == nil })
	if v := counterValue(t, h, "aiforge_engine_restarts_total", map[string]string{"model": "served"}); v != 1 {
		t.Fatalf("restarts_total %v", v)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the engine stopped with its worker", func() bool { return syscall.Kill(st.Process.PID, 0) != nil })
	if _, ok := gaugeValueOK(t, h, "aiforge_engine_up", "served"); ok {
		t.Fatal("a stopped engine is still exported")
	}
}

func TestSupervisedEngineConfig(t *testing.T) {
	ok := supervisedConfig(t, "m", registry.EngineProcess{Kind: registry.ProcessOllama, ModelPath: "/m.gguf"})
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := ok
	bad.Engine.BaseURL = "http://127.0.0.1:9999/v1"
	if err := bad.Validate(); err == nil {
		t.Fatal("a base URL beside a process with no port accepted")
	}
	p := *ok.Engine.Process
	p.Port = 9999
	bad.Engine.Process = &p
	if err := bad.Validate(); err != nil {
		t.Fatalf("the base URL of its port refused: %v", err)
	}
	p2 := p
	p2.Args = []string{"--no-mmap"}
	bad.Engine.Process = &p2
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "mmap") {
		t.Fatalf("--no-mmap accepted: %v", err)
	}
}

// ollamaBinary finds the Ollama binary the real-engine suite uses (PATH,
// then $(go env GOPATH)/bin, ~/go/bin); missing, it fails under CI=true
// and skips loudly elsewhere.
func ollamaBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("ollama"); err == nil {
		return p
	}
	var dirs []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		dirs = append(dirs, filepath.SplitList(gp)...)
	} else if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		dirs = append(dirs, filepath.SplitList(strings.TrimSpace(string(out)))...)
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "bin", "ollama")
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	msg := "SKIPPING the real-Ollama supervision test: no ollama binary (install with `go install github.com/ollama/ollama@v0.6.5`)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		_, _ = tty.WriteString(msg + "\n")
		_ = tty.Close()
	}
	t.Skip(msg)
	return ""
}

// A worker supervising a real Ollama serves a chat; Ollama killed with
// SIGKILL is restarted by the worker, requests sent during the outage end
// (answered after the restart or failed retryably, never hanging), and
// requests succeed again.
func TestSupervisedOllama(t *testing.T) {
	bin := ollamaBinary(t)
	if testing.Short() {
		t.Skip("-short: this test starts a real Ollama process; run it without -short")
	}
	h := newHarness(t)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := ggufgen.WriteFile(model, ggufgen.Config{}); err != nil {
		t.Fatal(err)
	}
	cfg := supervisedConfig(t, "tiny-chat", registry.EngineProcess{
		Kind: registry.ProcessOllama, Binary: bin, ModelPath: model, ContextSize: 256,
	})
	cfg.Engine.Model = "tiny"
	cfg.RequestTimeout = 2 * time.Minute
	svc, _ := h.runWorker(cfg, h.deps())
	deadline := time.Now().Add(3 * time.Minute)
	for !svc.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("not ready; state %+v; engine log:\n%s", svc.State(), engineLog(cfg))
		}
		time.Sleep(20 * time.Millisecond)
	}
	body := `{"model":"tiny-chat","messages":[{"role":"user","content":"hello"}],"max_tokens":4,"temperature":0}`
	chat := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, res, err := h.do(ctx, newReq("tiny-chat", events.EndpointChatCompletions, false, false, body))
		if err == nil && res.Status != http.StatusOK {
			err = errors.New("status " + res.ContentType)
		}
		return err
	}
	if err := chat(); err != nil {
		t.Fatalf("chat: %v; engine log:\n%s", err, engineLog(cfg))
	}
	st := svc.State()
	if st.Process == nil || st.Process.State != registry.ProcessServing || st.UpstreamModel != "tiny:latest" {
		t.Fatalf("state %+v", st)
	}
	pid := st.Process.PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	answered := h.outage(t, "tiny-chat", 3)
	deadline = time.Now().Add(3 * time.Minute)
	for {
		st := svc.State()
		if st.Process != nil && st.Process.Restarts >= 1 && st.Process.State == registry.ProcessServing && st.Process.PID != pid && svc.Ready() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not restarted; state %+v %+v; engine log:\n%s", st, st.Process, engineLog(cfg))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := chat(); err != nil {
		t.Fatalf("chat after the restart: %v; engine log:\n%s", err, engineLog(cfg))
	}
	after := svc.State().Process
	if !strings.Contains(after.LastError, "killed") {
		t.Fatalf("the crash was not seen as one: last error %q", after.LastError)
	}
	t.Logf("ollama pid %d killed; restarted as pid %d (restarts %d, last error %q); %d of 3 requests sent during the outage answered",
		pid, after.PID, after.Restarts, after.LastError, answered)
}

func engineLog(cfg Config) string {
	matches, _ := filepath.Glob(filepath.Join(cfg.EngineDir, "*", "*", "engine.log*"))
	var b strings.Builder
	for _, m := range matches {
		data, _ := os.ReadFile(m)
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		b.WriteString("== " + m + "\n" + string(data) + "\n")
	}
	return b.String()
}
