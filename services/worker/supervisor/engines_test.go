package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/services/worker"
)

// A model with two engines runs a worker per engine: both engines serve
// the name, and each binding change restarts both.
func TestSupervisorRunsAWorkerPerEngine(t *testing.T) {
	h := newHarness(t)
	ctx := testCtx(t)
	store, err := registry.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	simA, baseA := startSim(t, enginesim.Config{Models: []string{"up-a"}})
	simB, baseB := startSim(t, enginesim.Config{Models: []string{"up-b"}})
	sup, err := New(Config{
		WorkerDefaults: worker.Config{HeartbeatInterval: 200 * time.Millisecond, HealthInterval: time.Second, DrainTimeout: 2 * time.Second},
		RetryInterval:  100 * time.Millisecond,
	}, h.deps())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(runCtx) }()
	defer func() { stop(); <-done }()

	m := registry.Model{Name: "chat", Engine: registry.Engine{BaseURL: baseA, Model: "up-a"},
		Engines: []registry.Engine{{ID: "b", BaseURL: baseB, Model: "up-b"}}}
	if err := store.PutModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	// The queue group spreads requests over both workers: both engines
	// serve some of them.
	eventually(t, 10*time.Second, "both engines to serve the name", func() bool {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _, _ = h.do(rctx, newReq("chat", events.EndpointChatCompletions, false, false, chatBody))
		return simA.Stats().Completed > 0 && simB.Stats().Completed > 0
	})
	if st := sup.Status()["chat"]; st != StatusServing {
		t.Fatalf("status %q", st)
	}

	// An engine that cannot be reached does not mark the model failed
	// while another one serves it.
	m.Engines = append(m.Engines, registry.Engine{ID: "down", BaseURL: "http://127.0.0.1:1/v1", Model: "x"})
	if err := store.PutModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the model to serve again with its third engine down", func() bool {
		return sup.Status()["chat"] == StatusServing
	})
}

func TestModelStatusIsTheBestOfItsEngines(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"error: x", StatusServing}, StatusServing},
		{[]string{"error: x", StatusStarting}, StatusStarting},
		{[]string{"error: x", "error: y"}, "error: x"},
	} {
		if got := modelStatus(c.in); got != c.want {
			t.Errorf("modelStatus(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
