package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/natsutil"
)

// serviceProcess is one `aiforge run <target>` process of the built binary.
type serviceProcess struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	logs   *bytes.Buffer
	exited chan struct{}
}

// startService runs `aiforge run target` on the bus as identity, with the
// shared data dir (the object store, the secrets key).
func startService(t *testing.T, bin, target, natsURL, creds, identity, dataDir string, extra ...string) *serviceProcess {
	t.Helper()
	args := append([]string{"run", target, "--nats-url", natsURL, "--nats-nkey", busauth.SeedFile(creds, identity),
		"--data-dir", dataDir, "--log-level", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "AIFORGE_ADMIN_KEY="+adminKey)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serviceProcess{t: t, name: target, cmd: cmd, logs: &logs, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s (pid %d) log:\n%s", target, cmd.Process.Pid, logs.String())
		}
	})
	return p
}

// kill9 kills the process with SIGKILL and waits for it.
func (p *serviceProcess) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		p.t.Fatal(err)
	}
	<-p.exited
}

// TestBatchOf10000LinesSurvivesKill9: a 10,000-line batch through the engine
// simulator, with the batch service and the workers as processes of the
// built binary, each killed with SIGKILL mid-batch (twice each) and
// replaced. Every custom_id is in the output file exactly once, the usage
// stream bills each line once (10,000 batch requests), and the usage audit
// finds no difference.
func TestBatchOf10000LinesSurvivesKill9(t *testing.T) {
	const lines = 10000
	bin := buildAiforge(t)
	dataDir := t.TempDir()
	var url, creds string
	startStack(t, stackOpts{targets: []string{"nats"}, dataDir: dataDir, mutate: func(o *app.Options) {
		o.NATSListen = "127.0.0.1:-1"
		o.OnNATSListen = func(u, dir string) { url, creds = u, dir }
	}})
	as := func(identity string) func(*app.Options) {
		return func(o *app.Options) {
			o.NATS = natsutil.ConnectOptions{NKeyFile: busauth.SeedFile(creds, identity)}
		}
	}
	start := time.Now()
	startStack(t, stackOpts{natsURL: url, targets: []string{"usage"}, dataDir: dataDir, mutate: as(busauth.Usage)})
	s := startStack(t, stackOpts{natsURL: url, targets: []string{"edge"}, dataDir: dataDir, mutate: as(busauth.Edge)})
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 3, TimeToFirstToken: 2 * time.Millisecond})
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "chat",
		"engine": map[string]any{"base_url": base, "model": "up", "max_concurrency": 8},
		"price":  map[string]any{"input_per_mtok_usd": 1, "output_per_mtok_usd": 2}}, nil); err != nil {
		t.Fatal(err)
	}
	batchArgs := []string{"--batch-ack-wait", "3s"}
	batchProc := startService(t, bin, "batch", url, creds, busauth.Batch, dataDir, batchArgs...)
	workers := []*serviceProcess{
		startService(t, bin, "workers", url, creds, busauth.Worker, dataDir),
		startService(t, bin, "workers", url, creds, busauth.Worker, dataDir),
	}
	s.waitServed(key, "chat")
	t.Logf("stack of processes ready in %s", time.Since(start).Round(time.Millisecond))

	c := sdkClient(s, key)
	b := submitBatch(t, c, batchLines("chat", "k", lines, 3), nil)
	began := time.Now()
	// Kill at these completed counts: the batch service, a worker, the
	// batch service again, the other worker.
	kills := []struct {
		at     int64
		worker int // -1: the batch service
	}{{1500, -1}, {3500, 0}, {5500, -1}, {7500, 1}}
	for _, k := range kills {
		waitBatch(t, c, b.ID, 3*time.Minute, func(b *openai.Batch) bool { return b.RequestCounts.Completed >= k.at || final(b) },
			fmt.Sprintf("%d lines done", k.at))
		if k.worker < 0 {
			batchProc.kill9()
			batchProc = startService(t, bin, "batch", url, creds, busauth.Batch, dataDir, batchArgs...)
		} else {
			workers[k.worker].kill9()
			workers[k.worker] = startService(t, bin, "workers", url, creds, busauth.Worker, dataDir)
		}
		t.Logf("killed %s at %d completed lines (%s in)", map[bool]string{true: "the batch service", false: "a worker"}[k.worker < 0], k.at,
			time.Since(began).Round(time.Millisecond))
	}
	b = waitBatch(t, c, b.ID, 5*time.Minute, final, "batch final")
	t.Logf("final after %s: %s %+v", time.Since(began).Round(time.Millisecond), b.Status, b.RequestCounts)
	if b.Status != openai.BatchStatusCompleted {
		t.Fatalf("final: %s", b.RawJSON())
	}
	ok, codes := exactlyOnce(t, fileLines(t, c, b.OutputFileID), fileLines(t, c, b.ErrorFileID), "k", lines)
	if ok != lines {
		t.Fatalf("%d of %d answered; errors %v", ok, lines, codes)
	}

	// Billed once: the usage reports count 10,000 batch requests, and the
	// audit's replay of the usage stream matches the ledgers.
	from := strconv.FormatInt(start.Add(-time.Minute).Unix(), 10)
	var billed int64
	eventually(t, time.Minute, func() bool {
		var page struct {
			Data []struct {
				Results []struct {
					Requests int64 `json:"num_model_requests"`
				} `json:"results"`
			} `json:"data"`
		}
		if getJSON(t, s.url+"/v1/organization/usage/completions?batch=true&start_time="+from, key, &page) != 200 {
			return false
		}
		billed = 0
		for _, d := range page.Data {
			for _, r := range d.Results {
				billed += r.Requests
			}
		}
		return billed >= lines
	}, "10,000 batch requests in the usage report")
	if billed != lines {
		t.Fatalf("usage reports %d batch requests for %d lines", billed, lines)
	}
	var audit struct {
		EventsReplayed int64 `json:"events_replayed"`
		Differences    []any `json:"differences"`
	}
	window := "?from=" + from + "&to=" + strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	if err := s.admin.Do(ctx, "POST", "/admin/v1/usage/audit"+window, nil, &audit); err != nil {
		t.Fatal(err)
	}
	if audit.EventsReplayed < lines || len(audit.Differences) != 0 {
		t.Fatalf("audit: %d events replayed, differences %v", audit.EventsReplayed, audit.Differences)
	}
	t.Logf("billed %d batch requests; audit replayed %d events, no difference", billed, audit.EventsReplayed)
}
