package supervisor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/sealed"
	"github.com/aiforge/aiforge/services/worker"
)

const supEngineKey = "sk-engine-supervisor-test-4242"

func runSupervisor(t *testing.T, h *harness, key *sealed.PrivateKey) *Supervisor {
	t.Helper()
	sup, err := New(Config{
		WorkerDefaults: worker.Config{HeartbeatInterval: 200 * time.Millisecond, HealthInterval: time.Second, DrainTimeout: 2 * time.Second},
		RetryInterval:  100 * time.Millisecond,
		SecretsKey:     key,
	}, h.deps())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("supervisor Run: %v", err)
		}
	})
	return sup
}

// serves reports whether model answers a chat request with 200.
func (h *harness) serves(model string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, res, err := h.do(ctx, newReq(model, events.EndpointChatCompletions, false, false, chatBody))
	return err == nil && res.Status == 200
}

// TestSealedEngineKeys: the workers open a sealed key and call the engine
// with it (the simulator refuses any other), serve a binding stored in
// clear by an older version, and refuse, naming the model and the cause
// but never the key, a sealed key they cannot open.
func TestSealedEngineKeys(t *testing.T) {
	h := newHarness(t)
	ctx := testCtx(t)
	store, err := registry.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	secrets, _ := sealed.Generate()
	other, _ := sealed.Generate()
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}, APIKey: supEngineKey})
	sup := runSupervisor(t, h, secrets)

	put := func(name string, to sealed.PublicKey) registry.Model {
		m := registry.Model{Name: name, Engine: registry.Engine{BaseURL: base, Model: "up", APIKey: supEngineKey}}
		if err := m.SealEngineKey(to); err != nil {
			t.Fatal(err)
		}
		if err := store.PutModel(ctx, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	put("chat", secrets.Public())
	eventually(t, 5*time.Second, "the sealed binding served", func() bool { return h.serves("chat") })
	if sim.Stats().Completed == 0 {
		t.Fatal("the engine completed nothing")
	}

	// Sealing the same key again is no change: the worker keeps serving.
	put("chat", secrets.Public())

	// A binding an older version stored with its key in clear.
	models, err := h.js.KeyValue(ctx, events.BucketModels)
	if err != nil {
		t.Fatal(err)
	}
	legacy, _ := json.Marshal(registry.Model{Name: "legacy", Engine: registry.Engine{BaseURL: base, Model: "up", APIKey: supEngineKey}})
	if _, err := models.Put(ctx, registry.ModelKey("legacy"), legacy); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the legacy binding served", func() bool { return h.serves("legacy") })

	// Sealed to another key; moved from another binding.
	put("foreign", other.Public())
	moved := put("donor", secrets.Public())
	moved.Name = "moved"
	if err := store.PutModel(ctx, moved); err != nil {
		t.Fatal(err)
	}
	for model, cause := range map[string]error{"foreign": sealed.ErrWrongKey, "moved": sealed.ErrContext} {
		eventually(t, 5*time.Second, model+"'s error status", func() bool {
			st := sup.Status()[model]
			return strings.HasPrefix(st, "error: ") && strings.Contains(st, `"`+model+`"`) && strings.Contains(st, cause.Error())
		})
	}
	// The watch delivers in order: the re-sealed chat came before these.
	if strings.Contains(h.logs.String(), "restarting its worker") {
		t.Fatal("sealing the same key again restarted the worker")
	}
	if sup.Status()["chat"] != StatusServing || !h.serves("chat") {
		t.Fatalf("chat stopped serving: %v", sup.Status())
	}
	if strings.Contains(h.logs.String(), supEngineKey) || strings.Contains(strings.Join(statusValues(sup), " "), supEngineKey) {
		t.Fatal("the engine key shows in the logs or the status")
	}
}

func TestSealedEngineKeyWithoutSecretsKey(t *testing.T) {
	h := newHarness(t)
	ctx := testCtx(t)
	store, err := registry.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	secrets, _ := sealed.Generate()
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}, APIKey: supEngineKey})
	sup := runSupervisor(t, h, nil)
	m := registry.Model{Name: "chat", Engine: registry.Engine{BaseURL: base, Model: "up", APIKey: supEngineKey}}
	if err := m.SealEngineKey(secrets.Public()); err != nil {
		t.Fatal(err)
	}
	if err := store.PutModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the error status", func() bool {
		st := sup.Status()["chat"]
		return strings.Contains(st, registry.ErrNoSecretsKey.Error()) && strings.Contains(st, "AIFORGE_SECRETS_KEY_FILE")
	})
	if h.serves("chat") {
		t.Fatal("served without the engine key")
	}
	if !strings.Contains(h.logs.String(), "model=chat") || strings.Contains(h.logs.String(), supEngineKey) {
		t.Fatalf("logs: %s", h.logs.String())
	}
	// Deleting the model clears its status.
	if err := store.DeleteModel(ctx, "chat"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the status gone", func() bool { _, ok := sup.Status()["chat"]; return !ok })
}

func statusValues(s *Supervisor) []string {
	var out []string
	for _, v := range s.Status() {
		out = append(out, v)
	}
	return out
}
