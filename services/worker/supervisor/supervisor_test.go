package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker"
)

func TestSupervisor(t *testing.T) {
	h := newHarness(t)
	ctx := testCtx(t)
	store, err := registry.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	simA, baseA := startSim(t, enginesim.Config{Models: []string{"up-a"}})
	simB, baseB := startSim(t, enginesim.Config{Models: []string{"up-b"}})

	sup, err := New(Config{
		WorkerDefaults: worker.Config{HeartbeatInterval: 200 * time.Millisecond, HealthInterval: time.Second, DrainTimeout: 2 * time.Second, Source: "aiforge-up"},
		RetryInterval:  100 * time.Millisecond,
	}, h.deps())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(runCtx) }()
	defer func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("supervisor Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("supervisor did not stop")
		}
	}()

	served := func(model string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := newReq(model, events.EndpointChatCompletions, false, false, chatBody)
		_, res, err := h.do(ctx, req)
		return req.Tenant, errors.Join(err, func() error {
			if err == nil && res.Status != 200 {
				return errors.New("status")
			}
			return nil
		}())
	}

	// A registered model is served within 2 s.
	if err := store.PutModel(ctx, registry.Model{Name: "chat", Engine: registry.Engine{BaseURL: baseA, Model: "up-a"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the model to be served", func() bool { _, err := served("chat"); return err == nil })
	// The worker takes requests as soon as it subscribes; its status
	// follows from the hook called just after.
	eventually(t, 2*time.Second, "the status serving", func() bool { return sup.Status()["chat"] == StatusServing })
	tenant, _ := served("chat")
	if ev, _ := h.usageEvent(tenant); ev.Reporter != "aiforge-up" || ev.Model != "chat" {
		t.Fatalf("event %+v", ev)
	}
	if simA.Stats().Completed == 0 {
		t.Fatal("engine A served nothing")
	}

	// A new binding restarts the worker on the new engine.
	if err := store.PutModel(ctx, registry.Model{Name: "chat", Engine: registry.Engine{BaseURL: baseB, Model: "up-b"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the new binding to serve", func() bool {
		before := simB.Stats().Completed
		_, err := served("chat")
		return err == nil && simB.Stats().Completed > before
	})

	// A bad binding shows in Status and is retried.
	if err := store.PutModel(ctx, registry.Model{Name: "broken", Engine: registry.Engine{BaseURL: baseA, Model: "no-such-weights"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the error status", func() bool {
		st := sup.Status()["broken"]
		return strings.HasPrefix(st, "error: ") && strings.Contains(st, "no-such-weights") && strings.Contains(st, "up-a")
	})
	_, deadBase, closeDead, err := enginesim.Start(enginesim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	closeDead()
	if err := store.PutModel(ctx, registry.Model{Name: "offline", Engine: registry.Engine{BaseURL: deadBase, Model: "sim-model"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the unreachable status", func() bool {
		return strings.Contains(sup.Status()["offline"], "engine unreachable")
	})

	// A deleted model is no longer served.
	if err := store.DeleteModel(ctx, "chat"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the model to go", func() bool {
		_, err := served("chat")
		return errors.Is(err, bridge.ErrNoWorker)
	})
	if _, ok := sup.Status()["chat"]; ok {
		t.Fatalf("status still lists a deleted model: %v", sup.Status())
	}
}

func TestSupervisorConfig(t *testing.T) {
	if _, err := New(Config{RetryInterval: -1}, Deps{}); err == nil {
		t.Fatal("want an error")
	}
}
