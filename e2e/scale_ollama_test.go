package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/ggufgen"
	"github.com/aiforge/aiforge/pkg/registry"
)

// sleepyOllama is a stack serving tiny-chat from an Ollama its worker
// supervises with an idle stop of idleStop.
type sleepyOllama struct {
	s   *stack
	key string
}

func startSleepyOllama(t *testing.T, idleStop string, coldStartWait time.Duration) *sleepyOllama {
	t.Helper()
	bin := ollamaBinary(t)
	dir := t.TempDir()
	if err := ggufgen.WriteFile(filepath.Join(dir, "tiny.gguf"), ggufgen.Config{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	// One thread (see ollamaProc.create): the tiny model needs no more.
	modelfile := filepath.Join(dir, "Modelfile")
	if err := os.WriteFile(modelfile, []byte("FROM ./tiny.gguf\nPARAMETER num_thread 1\nPARAMETER num_ctx 256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, stackOpts{mutate: func(o *app.Options) {
		o.WorkerDefaults.ColdStartWait = coldStartWait
		o.WorkerDefaults.IdleCheckInterval = 20 * time.Millisecond
	}})
	key, _ := s.tenantKey("acme")
	if err := s.admin.Do(context.Background(), "POST", "/admin/v1/models", map[string]any{"name": "tiny-chat",
		"engine": map[string]any{"model": "tiny", "request_timeout": "2m",
			"process": map[string]any{"kind": registry.ProcessOllama, "binary": bin, "model_path": modelfile, "idle_stop": idleStop}}}, nil); err != nil {
		t.Fatal(err)
	}
	return &sleepyOllama{s: s, key: key}
}

// replica is the model's one replica state, nil when there is none.
func (o *sleepyOllama) replica() *registry.WorkerState {
	var m struct {
		Status struct {
			Replicas []registry.WorkerState `json:"replicas"`
		} `json:"status"`
	}
	if err := o.s.admin.Do(context.Background(), "GET", "/admin/v1/models/tiny-chat", nil, &m); err != nil || len(m.Status.Replicas) != 1 {
		return nil
	}
	return &m.Status.Replicas[0]
}

// waitProcess waits for the replica's engine process in state, the
// replica serving.
func (o *sleepyOllama) waitProcess(t *testing.T, state string, within time.Duration) registry.ProcessState {
	t.Helper()
	var last *registry.WorkerState
	deadline := time.Now().Add(within)
	for {
		r := o.replica()
		if r != nil && r.State == registry.WorkerServing && r.Process != nil && r.Process.State == state {
			return *r.Process
		}
		if r != nil {
			last = r
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine is not %s after %s: %+v", state, within, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gone reports whether no process has pid.
func gone(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) != nil }

// metricLines are the /metrics lines of name (and its _bucket, _sum,
// _count) for tiny-chat.
func (o *sleepyOllama) metricLines(t *testing.T, name string) []string {
	t.Helper()
	resp, err := http.Get(o.s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, name) && strings.Contains(l, `model="tiny-chat"`) {
			out = append(out, l)
		}
	}
	return out
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1)*p + 0.5)
	return s[i]
}

// A real Ollama supervised with a short idle stop scales to zero (its
// process gone, the replica serving with the engine asleep) and comes
// back on the next chat through the OpenAI Go SDK, cycle after cycle;
// concurrent first requests start it once. The cold start (wake to
// healthy) of every cycle is in aiforge_engine_cold_start_seconds; the
// test logs its p50 and p99 and the first answer's latency.
func TestSupervisedOllamaScalesToZeroAndBack(t *testing.T) {
	o := startSleepyOllama(t, "1s", 2*time.Minute)
	first := o.waitProcess(t, registry.ProcessServing, 3*time.Minute)
	c := openai.NewClient(option.WithBaseURL(o.s.url+"/v1/"), option.WithAPIKey(o.key), option.WithMaxRetries(0))
	chat := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		r, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "tiny-chat",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
			MaxTokens: openai.Int(4), Temperature: openai.Float(0),
		})
		if err == nil && (len(r.Choices) != 1 || r.Usage.CompletionTokens != 4) {
			err = fmt.Errorf("answer %s", r.RawJSON())
		}
		return time.Since(start), err
	}

	const cycles = 6
	pid := first.PID
	var cold, firstAnswer []time.Duration
	for cycle := 1; cycle <= cycles; cycle++ {
		asleep := o.waitProcess(t, registry.ProcessAsleep, time.Minute)
		if !gone(pid) {
			t.Fatalf("cycle %d: the engine is reported asleep but pid %d runs", cycle, pid)
		}
		if asleep.Wakes != cycle-1 {
			t.Fatalf("cycle %d: wakes %d", cycle, asleep.Wakes)
		}
		n := 1
		if cycle == cycles {
			n = 4 // concurrent first requests start it once
		}
		lat := make([]time.Duration, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); lat[i], errs[i] = chat() }()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("cycle %d: chat %d through the asleep engine: %v", cycle, i, err)
			}
		}
		r := o.replica()
		if r == nil || r.Process == nil || r.Process.Wakes != cycle || r.Process.PID == pid || r.Process.Restarts != 0 {
			t.Fatalf("cycle %d: after the wake %+v", cycle, r)
		}
		pid = r.Process.PID
		cold = append(cold, r.Process.LastColdStart.D())
		firstAnswer = append(firstAnswer, slices.Max(lat))
	}
	lines := o.metricLines(t, "aiforge_engine_cold_start_seconds_count")
	if len(lines) != 1 || !strings.HasSuffix(lines[0], " "+strconv.Itoa(cycles)) {
		t.Fatalf("cold start count lines %q", lines)
	}
	t.Logf("metric: %s", lines[0])
	for _, l := range o.metricLines(t, "aiforge_engine_cold_start_seconds_sum") {
		t.Logf("metric: %s", l)
	}
	for _, l := range o.metricLines(t, "aiforge_engine_state") {
		t.Logf("metric: %s", l)
	}
	t.Logf("Ollama scaled to zero and back %d times: cold start (wake to model loaded) p50 %s p99 %s (each: %v); first answer after a wake p50 %s p99 %s",
		cycles, percentile(cold, 0.5).Round(time.Millisecond), percentile(cold, 0.99).Round(time.Millisecond), cold,
		percentile(firstAnswer, 0.5).Round(time.Millisecond), percentile(firstAnswer, 0.99).Round(time.Millisecond))
}

// Past the cold start wait (here a nanosecond: no start is that fast) a
// request for the asleep Ollama is answered 503 model_warming with a
// Retry-After, streamed and not; the engine goes on starting, and the
// OpenAI SDK, which retries a 503 after its Retry-After, is served.
func TestSupervisedOllamaWarmingPastTheBound(t *testing.T) {
	o := startSleepyOllama(t, "3s", time.Nanosecond)
	o.waitProcess(t, registry.ProcessServing, 3*time.Minute)
	for _, stream := range []bool{true, false} {
		o.waitProcess(t, registry.ProcessAsleep, time.Minute)
		body := fmt.Sprintf(`{"model":"tiny-chat","messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":%v}`, stream)
		st, b, h := httpDo(o.s.url+"/v1/chat/completions", o.key, "POST", body)
		var e struct {
			Error struct {
				Code, Type, Message string
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		ra, _ := strconv.Atoi(h.Get("Retry-After"))
		if st != http.StatusServiceUnavailable || e.Error.Code != "model_warming" || e.Error.Type != "server_error" || ra < 1 ||
			!strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Fatalf("stream %v: %d %s Retry-After %q", stream, st, b, h.Get("Retry-After"))
		}
		t.Logf("stream %v: %d Retry-After: %s %s", stream, st, h.Get("Retry-After"), b)
		o.waitProcess(t, registry.ProcessServing, time.Minute) // it went on starting
	}
	o.waitProcess(t, registry.ProcessAsleep, time.Minute)
	c := openai.NewClient(option.WithBaseURL(o.s.url+"/v1/"), option.WithAPIKey(o.key), option.WithMaxRetries(5))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "tiny-chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}, MaxTokens: openai.Int(4),
	})
	if err != nil || len(r.Choices) != 1 {
		t.Fatalf("the SDK retrying after Retry-After: %v", err)
	}
}
