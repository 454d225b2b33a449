package supervisor

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ggufgen"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker"
	"github.com/aiforge/aiforge/services/worker/internal/engineproc/fakeengine"
)

func TestMain(m *testing.M) {
	fakeengine.Main() // serves, and exits, when run as the fake engine
	os.Exit(m.Run())
}

// countingStore counts the object reads (Get) of the store it wraps.
type countingStore struct {
	objstore.Store
	gets atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A served model's weights come from the worker's materialised copy (the
// shared cache, ModelsDir): its engine, with an idle stop, loads the
// deployed version through the current link; scaling it to zero and back
// and restarting the whole worker process on the same models directory
// read nothing from the object store again.
func TestWakesAndRestartsServeWeightsFromTheSharedCache(t *testing.T) {
	h := newHarness(t)
	ctx := testCtx(t)
	cat, err := catalog.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	local, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir(), Logger: h.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = local.Close() })
	objects := &countingStore{Store: local}

	// A published version of two files, deployed as "sleepy".
	var gguf bytes.Buffer
	if err := ggufgen.Write(&gguf, ggufgen.Config{}); err != nil {
		t.Fatal(err)
	}
	v, err := cat.AddVersion(ctx, "acme/sleepy", events.ModelKindModel, "", catalog.Version{Status: catalog.StatusScanning, Source: catalog.Source{Type: events.ModelSourceUpload}})
	if err != nil {
		t.Fatal(err)
	}
	var files []catalog.File
	for p, body := range map[string][]byte{"model.gguf": gguf.Bytes(), "README.md": []byte("# sleepy\n")} {
		info, err := local.Put(ctx, v.Prefix+p, bytes.NewReader(body), int64(len(body)), "")
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, catalog.File{Path: p, Size: info.Size, SHA256: info.SHA256})
	}
	if _, err := cat.ApplyVerdict(ctx, events.ModelVerdictV1{Name: "acme/sleepy", Version: v.Version, Status: events.VerdictPublished, Files: files, License: "mit", ScannedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Deploy(ctx, "sleepy", "acme/sleepy", v.Version); err != nil {
		t.Fatal(err)
	}

	modelsDir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argsFile := filepath.Join(t.TempDir(), "args")
	reg, err := registry.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(modelsDir, url.PathEscape("sleepy"), "current", "model.gguf")
	if err := reg.PutModel(ctx, registry.Model{Name: "sleepy", Engine: registry.Engine{Model: "up", Process: &registry.EngineProcess{
		Kind: registry.ProcessLlamaServer, Binary: exe, ModelPath: current, IdleStop: registry.Duration(time.Hour),
		Env: map[string]string{fakeengine.FakeEnv: "1", fakeengine.ArgsFileEnv: argsFile},
	}}}); err != nil {
		t.Fatal(err)
	}
	clock := &testClock{t: time.Unix(1_800_000_000, 0)}
	engineDir := t.TempDir()

	// run starts a supervisor (a worker process) on modelsDir and returns
	// it and its stop.
	run := func() (*Supervisor, func()) {
		deps := h.deps()
		deps.Objects = objects
		deps.Now = clock.Now
		sup, err := New(Config{
			WorkerDefaults: worker.Config{
				HeartbeatInterval: 200 * time.Millisecond, HealthInterval: 200 * time.Millisecond, DrainTimeout: 2 * time.Second,
				IdleCheckInterval: 2 * time.Millisecond, EngineDir: engineDir,
				EngineProcess: worker.EngineProcessConfig{RetryInterval: 50 * time.Millisecond, ProbeInterval: 50 * time.Millisecond},
			},
			RetryInterval: 50 * time.Millisecond, ModelsDir: modelsDir, AdapterDir: t.TempDir(),
		}, deps)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sup.Run(rctx) }()
		stopped := false
		halt := func() {
			if stopped {
				return
			}
			stopped = true
			stop()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("supervisor: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Error("supervisor did not stop")
			}
		}
		t.Cleanup(halt)
		return sup, halt
	}
	workers, err := registry.OpenWorkers(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	process := func() *registry.ProcessState {
		rs, err := workers.List(ctx, "sleepy")
		if err != nil || len(rs) != 1 || rs[0].State != registry.WorkerServing {
			return nil
		}
		return rs[0].Process
	}
	chat := func() error {
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, res, err := h.do(rctx, newReq("sleepy", events.EndpointChatCompletions, false, false, chatBody))
		if err == nil && res.Status != http.StatusOK {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	serving := func(what string) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() bool {
			p := process()
			return p != nil && p.State == registry.ProcessServing && chat() == nil
		})
	}
	sleepWake := func(cycle string) {
		t.Helper()
		eventually(t, 30*time.Second, cycle+": the engine asleep", func() bool {
			clock.Advance(2 * time.Hour)
			p := process()
			return p != nil && p.State == registry.ProcessAsleep
		})
		if err := chat(); err != nil {
			t.Fatalf("%s: a request waking the engine: %v", cycle, err)
		}
	}

	sup, halt := run()
	eventually(t, 30*time.Second, "the deployment materialised", func() bool {
		return sup.DeploymentStatus()["sleepy"] == "ready acme/sleepy v1"
	})
	serving("the engine serving")
	reads := objects.gets.Load()
	if reads != int64(len(files)) {
		t.Fatalf("%d object reads to materialise %d files", reads, len(files))
	}
	args, err := os.ReadFile(argsFile)
	if err != nil || !strings.Contains(string(args), current) {
		t.Fatalf("the engine was not given the materialised weights %s: %q %v", current, args, err)
	}
	for i := range 2 {
		sleepWake("cycle " + string(rune('1'+i)))
	}
	if n := objects.gets.Load(); n != reads {
		t.Fatalf("sleep and wake read the object store %d more times", n-reads)
	}

	// The worker process restarts on the same models directory: the copy
	// there is verified against the catalog and used as it is.
	halt()
	sup, _ = run()
	eventually(t, 30*time.Second, "the deployment ready again", func() bool {
		return sup.DeploymentStatus()["sleepy"] == "ready acme/sleepy v1"
	})
	serving("the engine serving after the restart")
	sleepWake("after the restart")
	if n := objects.gets.Load(); n != reads {
		t.Fatalf("a restart and a wake read the object store %d more times", n-reads)
	}
	if p := process(); p == nil || p.Wakes != 1 {
		t.Fatalf("process after the restart %+v", p)
	}
}
