package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/services/worker"
)

// adapterWorld is a supervisor serving a base model bound to a simulator,
// with the catalog and a local object store.
type adapterWorld struct {
	h       *harness
	cat     *catalog.Store
	objects objstore.Store
	sim     *enginesim.Sim
	dir     string
	models  string
	sup     *Supervisor
}

const adapterEngineKey = "sk-engine-secret-0123456789"

func newAdapterWorld(t *testing.T) *adapterWorld {
	t.Helper()
	h := newHarness(t)
	ctx := testCtx(t)
	cat, err := catalog.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir(), Logger: h.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = objects.Close() })
	sim, base := startSim(t, enginesim.Config{Models: []string{"up-base"}, APIKey: adapterEngineKey})
	reg, err := registry.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	bm := registry.Model{Name: "base", Engine: registry.Engine{BaseURL: base, Model: "up-base", APIKey: adapterEngineKey}}
	if err := bm.SealEngineKey(secrets.Public()); err != nil {
		t.Fatal(err)
	}
	if err := reg.PutModel(ctx, bm); err != nil {
		t.Fatal(err)
	}
	w := &adapterWorld{h: h, cat: cat, objects: objects, sim: sim, dir: t.TempDir(), models: t.TempDir()}
	deps := h.deps()
	deps.Objects = objects
	w.sup, err = New(Config{
		WorkerDefaults: worker.Config{HeartbeatInterval: 200 * time.Millisecond, HealthInterval: 200 * time.Millisecond, DrainTimeout: 2 * time.Second},
		RetryInterval:  100 * time.Millisecond,
		AdapterDir:     w.dir,
		ModelsDir:      w.models,
		SecretsKey:     secrets,
	}, deps)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.sup.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("supervisor Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("supervisor did not stop")
		}
		if strings.Contains(h.logs.String(), adapterEngineKey) {
			t.Error("the engine API key appears in the logs")
		}
	})
	return w
}

// addAdapter stores an adapter version's files and records it in the
// catalog with status (published versions get a verdict). corrupt stores
// other bytes than the catalog lists for the weights.
func (w *adapterWorld) addAdapter(t *testing.T, name, base, status, weights string, corrupt bool) catalog.Version {
	t.Helper()
	ctx := testCtx(t)
	files := map[string]string{
		"adapter_config.json":       `{"peft_type":"LORA","r":8,"base_model_name_or_path":"` + base + `"}`,
		"adapter_model.safetensors": weights,
	}
	v, err := w.cat.AddVersion(ctx, name, events.ModelKindAdapter, base, catalog.Version{Status: catalog.StatusScanning, Source: catalog.Source{Type: events.ModelSourceUpload}})
	if err != nil {
		t.Fatal(err)
	}
	var listed []catalog.File
	for _, p := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		body := files[p]
		sum := sha256.Sum256([]byte(body))
		listed = append(listed, catalog.File{Path: p, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])})
		if corrupt && p == "adapter_model.safetensors" {
			body = strings.ToUpper(body)
		}
		if _, err := w.objects.Put(ctx, v.Prefix+p, strings.NewReader(body), int64(len(body)), ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.cat.UpdateVersion(ctx, name, v.Version, func(cv *catalog.Version) error { cv.Files = listed; return nil }); err != nil {
		t.Fatal(err)
	}
	switch status {
	case catalog.StatusPublished:
		v, err = w.cat.ApplyVerdict(ctx, events.ModelVerdictV1{Name: name, Version: v.Version, Status: events.VerdictPublished, Files: listed, License: "apache-2.0", ScannedAt: time.Now()})
	case catalog.StatusRejected:
		v, err = w.cat.ApplyVerdict(ctx, events.ModelVerdictV1{Name: name, Version: v.Version, Status: events.VerdictRejected, Files: listed,
			Reasons: []catalog.Reason{{Code: "code_bearing_pickle", Message: "no"}}, ScannedAt: time.Now()})
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (w *adapterWorld) loaded() map[string]string {
	out := map[string]string{}
	for _, a := range w.sim.LoRAAdapters() {
		out[a.Name] = a.Path
	}
	return out
}

// ask sends one chat request for model over the bus, as the edge does.
func (w *adapterWorld) ask(model string) (string, [][]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := newReq(model, events.EndpointChatCompletions, false, false, `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
	frames, res, err := w.h.do(ctx, req)
	if err == nil && res.Status != 200 {
		err = fmt.Errorf("status %d", res.Status)
	}
	return req.Tenant, frames, err
}

func TestSupervisorServesAdapters(t *testing.T) {
	w := newAdapterWorld(t)
	const n = 24
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("team/lora-%02d", i)
		w.addAdapter(t, names[i], "base", catalog.StatusPublished, "weights of "+names[i], false)
	}
	// Never served: still scanning, rejected, of a base nobody serves, and
	// one whose stored weights do not match the catalog.
	w.addAdapter(t, "team/scanning", "base", catalog.StatusScanning, "w", false)
	w.addAdapter(t, "team/rejected", "base", catalog.StatusRejected, "w", false)
	w.addAdapter(t, "team/orphan", "other-base", catalog.StatusPublished, "w", false)
	w.addAdapter(t, "team/corrupt", "base", catalog.StatusPublished, "weights", true)

	eventually(t, 20*time.Second, "all adapters loaded into the one engine", func() bool { return len(w.loaded()) == n })
	loaded := w.loaded()
	for _, name := range names {
		dir := filepath.Join(w.dir, url.PathEscape(name), "v1")
		if loaded[name] != dir {
			t.Fatalf("adapter %s loaded from %q, want %q", name, loaded[name], dir)
		}
		got, err := os.ReadFile(filepath.Join(dir, "adapter_model.safetensors"))
		if err != nil || string(got) != "weights of "+name {
			t.Fatalf("materialised weights of %s: %q, %v", name, got, err)
		}
	}

	// Every adapter name is served on the bus, reaching the engine under
	// its own name; usage names the adapter.
	for _, name := range names {
		var tenant string
		var frames [][]byte
		eventually(t, 10*time.Second, name+" to be served", func() bool {
			var err error
			tenant, frames, err = w.ask(name)
			return err == nil
		})
		if body := w.sim.LastBody(); !bytes.Contains(body, []byte(`"model":"`+name+`"`)) {
			t.Fatalf("engine saw %s for %s", body, name)
		}
		if len(frames) == 0 || !bytes.Contains(bytes.Join(frames, nil), []byte(`"model":"`+name+`"`)) {
			t.Fatalf("answer for %s: %s", name, bytes.Join(frames, nil))
		}
		if ev, _ := w.h.usageEvent(tenant); ev.Model != name {
			t.Fatalf("usage event names %q, want %q", ev.Model, name)
		}
	}
	eventually(t, 5*time.Second, "the corrupt adapter's error status", func() bool {
		return strings.Contains(w.sup.AdapterStatus()["team/corrupt"], "SHA-256")
	})
	for _, name := range []string{"team/scanning", "team/rejected", "team/orphan", "team/corrupt"} {
		if _, ok := loaded[name]; ok {
			t.Fatalf("%s was loaded", name)
		}
		if _, _, err := w.ask(name); !errors.Is(err, bridge.ErrNoWorker) {
			t.Fatalf("%s: %v, want no worker", name, err)
		}
	}
	for _, name := range []string{"team/scanning", "team/rejected", "team/orphan"} {
		if _, err := os.Stat(filepath.Join(w.dir, url.PathEscape(name))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s was materialised: %v", name, err)
		}
	}
	if _, err := os.ReadFile(filepath.Join(w.dir, url.PathEscape("team/corrupt"), "v1", "adapter_model.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("corrupt weights were kept: %v", err)
	}
	if st := w.sup.AdapterStatus()[names[5]]; st != StatusServing {
		t.Fatalf("status of %s: %q", names[5], st)
	}

	// A newer published version is unloaded and loaded from its own path.
	unloads := w.sim.LoRAUnloadCalls()
	w.addAdapter(t, names[0], "base", catalog.StatusScanning, "v2 scanning", false)
	w.addAdapter(t, names[0], "base", catalog.StatusPublished, "v3 weights", false)
	v3 := filepath.Join(w.dir, url.PathEscape(names[0]), "v3")
	eventually(t, 10*time.Second, "version 3 loaded", func() bool { return w.loaded()[names[0]] == v3 })
	if w.sim.LoRAUnloadCalls() <= unloads {
		t.Fatal("the old version was not unloaded")
	}
	if _, err := os.Stat(filepath.Join(w.dir, url.PathEscape(names[0]), "v2")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the scanning version 2 was materialised: %v", err)
	}
	eventually(t, 10*time.Second, "version 3 served", func() bool { _, _, err := w.ask(names[0]); return err == nil })

	// A deleted adapter is unloaded and no longer served.
	if err := w.cat.Delete(testCtx(t), names[1]); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the deleted adapter unloaded", func() bool { _, ok := w.loaded()[names[1]]; return !ok })
	eventually(t, 10*time.Second, "the deleted adapter no longer served", func() bool {
		_, _, err := w.ask(names[1])
		return errors.Is(err, bridge.ErrNoWorker)
	})

	// An engine restart forgets runtime adapters: they are loaded again.
	w.sim.DropLoRAAdapters()
	eventually(t, 20*time.Second, "adapters loaded again after the engine restart", func() bool { return len(w.loaded()) == n-1 })
	for _, name := range []string{names[0], names[2], names[n-1]} {
		eventually(t, 10*time.Second, name+" served again", func() bool { _, _, err := w.ask(name); return err == nil })
	}
	if _, ok := w.loaded()[names[1]]; ok {
		t.Fatal("the deleted adapter was loaded again")
	}
}

// Removing the base model stops and unloads its adapters.
func TestAdaptersFollowTheirBase(t *testing.T) {
	w := newAdapterWorld(t)
	w.addAdapter(t, "sql", "base", catalog.StatusPublished, "sql weights", false)
	eventually(t, 10*time.Second, "the adapter served", func() bool { _, _, err := w.ask("sql"); return err == nil })
	reg, err := registry.Open(testCtx(t), w.h.js)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.DeleteModel(testCtx(t), "base"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the adapter unloaded", func() bool { return len(w.loaded()) == 0 })
	eventually(t, 10*time.Second, "the adapter no longer served", func() bool {
		_, _, err := w.ask("sql")
		return errors.Is(err, bridge.ErrNoWorker)
	})
	if _, ok := w.sup.AdapterStatus()["sql"]; ok {
		t.Fatalf("status still lists the adapter: %v", w.sup.AdapterStatus())
	}
}
