package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/enginesim"
)

// BatchOptions size a batch run.
type BatchOptions struct {
	// Lines is the batch's size (default 4000).
	Lines int
	// Slots is the model's worker slots and the direct run's concurrency:
	// the engine's capacity (default 16).
	Slots int
	// LineLatency is how long the simulator takes per line (default 50ms).
	LineLatency time.Duration
	Progress    io.Writer
}

// BatchReport compares lines/s through the batch tier with the
// simulator's direct capacity, measured in the same run.
type BatchReport struct {
	Lines, Slots int
	LineLatency  time.Duration
	// DirectRPS is the engine's capacity: requests/s at Slots concurrent
	// requests straight to the simulator. BatchLPS is lines/s from the
	// batch's create to its completed status (validation, dispatch,
	// results and output files included).
	DirectRPS, BatchLPS float64
	BatchWall           time.Duration
}

// Ratio is BatchLPS over DirectRPS.
func (r BatchReport) Ratio() float64 { return r.BatchLPS / r.DirectRPS }

// Print writes the report.
func (r BatchReport) Print(w io.Writer) {
	fmt.Fprintf(w, "batch tier vs the engine simulator's direct capacity (%d lines, %d slots, %s per line)\n", r.Lines, r.Slots, r.LineLatency)
	fmt.Fprintf(w, "  direct, %d concurrent requests:  %8.1f requests/s\n", r.Slots, r.DirectRPS)
	fmt.Fprintf(w, "  through batch (create→completed): %8.1f lines/s  (%s)\n", r.BatchLPS, r.BatchWall.Round(time.Millisecond))
	fmt.Fprintf(w, "  ratio: %.1f%% of direct capacity (target >= 90%%)\n", 100*r.Ratio())
}

// RunBatch measures the engine's direct capacity, then the same number of
// lines as one batch through aiforge to the same engine, with the worker
// given the same number of slots.
func RunBatch(ctx context.Context, o BatchOptions) (BatchReport, error) {
	if o.Lines <= 0 {
		o.Lines = 4000
	}
	if o.Slots <= 0 {
		o.Slots = 16
	}
	if o.LineLatency <= 0 {
		o.LineLatency = 50 * time.Millisecond
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	rep := BatchReport{Lines: o.Lines, Slots: o.Slots, LineLatency: o.LineLatency}
	env, err := SetupEngine(ctx, o.Progress, enginesim.Config{TimeToFirstToken: o.LineLatency, AnswerTokens: 2}, nil)
	if err != nil {
		return rep, err
	}
	defer env.Close()
	// A model of its own with exactly Slots worker slots.
	if err := env.Admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "bench-batch",
		"engine": map[string]any{"base_url": env.EngineURL, "model": "bench-upstream", "max_concurrency": o.Slots}}, nil); err != nil {
		return rep, err
	}
	served := env.Gateway
	served.model = "bench-batch"
	if err := waitServed(ctx, served); err != nil {
		return rep, err
	}

	fmt.Fprintf(o.Progress, "direct: %d requests at concurrency %d ...\n", o.Lines, o.Slots)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range o.Slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(o.Lines) {
				if _, err := env.Direct.Call(false, 2); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return rep, fmt.Errorf("direct: %w", e)
	}
	rep.DirectRPS = float64(o.Lines) / time.Since(start).Seconds()

	fmt.Fprintf(o.Progress, "batch: %d lines ...\n", o.Lines)
	var b bytes.Buffer
	for i := range o.Lines {
		fmt.Fprintf(&b, `{"custom_id":"l-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"bench-batch","messages":[{"role":"user","content":"line %d"}],"max_tokens":2}}`+"\n", i, i)
	}
	dir, err := os.MkdirTemp("", "aiforge-bench-batch-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "lines.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		return rep, err
	}
	f, err := env.Tenant.UploadFile(ctx, path, "batch", nil)
	if err != nil {
		return rep, err
	}
	start = time.Now()
	created, err := env.Tenant.CreateBatch(ctx, cli.BatchCreate{InputFileID: f.ID, Endpoint: batch.EndpointChatCompletions}, "")
	if err != nil {
		return rep, err
	}
	final, err := env.Tenant.WaitBatch(ctx, created.ID, 10*time.Millisecond, nil)
	if err != nil {
		return rep, err
	}
	rep.BatchWall = time.Since(start)
	if final.Status != batch.StatusCompleted || final.RequestCounts.Completed != int64(o.Lines) {
		return rep, fmt.Errorf("batch ended %s with %+v", final.Status, final.RequestCounts)
	}
	rep.BatchLPS = float64(o.Lines) / rep.BatchWall.Seconds()
	return rep, nil
}
