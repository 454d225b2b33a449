package e2e

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/aiforge/aiforge/pkg/ggufgen"
	"github.com/aiforge/aiforge/pkg/registry"
)

// TestBatchThroughASupervisedOllamaSurvivesItsCrash: a model whose engine
// is an Ollama the worker starts and supervises (registry.EngineProcess)
// runs a batch; the Ollama process is killed with SIGKILL mid-batch; the
// worker restarts it and the batch's lines resume: the batch completes
// with every custom_id answered once.
func TestBatchThroughASupervisedOllamaSurvivesItsCrash(t *testing.T) {
	bin := ollamaBinary(t)
	const lines = 1000
	dir := t.TempDir()
	if err := ggufgen.WriteFile(filepath.Join(dir, "tiny.gguf"), ggufgen.Config{Seed: 13}); err != nil {
		t.Fatal(err)
	}
	// One thread (see ollamaProc.create): the tiny model needs no more.
	modelfile := filepath.Join(dir, "Modelfile")
	if err := os.WriteFile(modelfile, []byte("FROM ./tiny.gguf\nPARAMETER num_thread 1\nPARAMETER num_ctx 256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "tiny-chat",
		"engine": map[string]any{"model": "tiny", "max_concurrency": 2, "request_timeout": "2m",
			"process": map[string]any{"kind": registry.ProcessOllama, "binary": bin, "model_path": modelfile}}}, nil); err != nil {
		t.Fatal(err)
	}
	process := func() *registry.ProcessState {
		var m struct {
			Status struct {
				Replicas []registry.WorkerState `json:"replicas"`
			} `json:"status"`
		}
		if err := s.admin.Do(ctx, "GET", "/admin/v1/models/tiny-chat", nil, &m); err != nil || len(m.Status.Replicas) == 0 {
			return nil
		}
		if r := m.Status.Replicas[0]; r.State == registry.WorkerServing {
			return r.Process
		}
		return nil
	}
	deadline := time.Now().Add(3 * time.Minute)
	for p := process(); p == nil || p.State != registry.ProcessServing || p.PID == 0; p = process() {
		if time.Now().After(deadline) {
			var st any
			_ = s.admin.Do(ctx, "GET", "/admin/v1/models/tiny-chat", nil, &st)
			t.Fatalf("the supervised Ollama is not serving after 3m: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.waitServed(key, "tiny-chat")

	c := sdkClient(s, key)
	b := submitBatch(t, c, batchLines("tiny-chat", "o", lines, 16), nil)
	mid := waitBatch(t, c, b.ID, 3*time.Minute, func(b *openai.Batch) bool { return b.RequestCounts.Completed >= 5 || final(b) }, "5 lines done")
	if final(mid) {
		t.Fatalf("the batch ended before the engine could be killed: %s", mid.RawJSON())
	}
	before := process()
	if before == nil {
		t.Fatal("no engine process state")
	}
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	eventually(t, 3*time.Minute, func() bool {
		p := process()
		return p != nil && p.PID != before.PID && p.Restarts > before.Restarts && p.State == registry.ProcessServing
	}, "Ollama restarted by its worker")
	t.Logf("Ollama (pid %d) killed with %d of %d lines done; serving again as pid %d after %s", before.PID, mid.RequestCounts.Completed, lines, process().PID, time.Since(killed).Round(time.Millisecond))
	b = waitBatch(t, c, b.ID, 5*time.Minute, final, "batch final")
	if b.Status != openai.BatchStatusCompleted {
		t.Fatalf("final: %s", b.RawJSON())
	}
	ok, codes := exactlyOnce(t, fileLines(t, c, b.OutputFileID), fileLines(t, c, b.ErrorFileID), "o", lines)
	if ok != lines {
		t.Fatalf("%d of %d lines answered; errors %v", ok, lines, codes)
	}
	t.Logf("batch of %d lines completed across the engine's crash: %+v", lines, b.RequestCounts)
}
