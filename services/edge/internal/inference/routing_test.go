package inference

import (
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/registry"
)

func twoEngineModel(routing string, weightB int) registry.Model {
	return registry.Model{Name: "chat", Routing: routing,
		Engine:  registry.Engine{BaseURL: "http://a/v1", Model: "up"},
		Engines: []registry.Engine{{ID: "b", BaseURL: "http://b/v1", Model: "up", Weight: weightB}}}
}

var twoReplicas = []registry.WorkerState{
	{Model: "chat", WorkerID: "w-a", State: registry.WorkerServing},
	{Model: "chat", WorkerID: "w-b", EngineID: "b", State: registry.WorkerServing},
}

// With weight 3 against 1, least-outstanding keeps three requests in
// flight on b for each on a.
func TestPickWeightedLeastOutstanding(t *testing.T) {
	r := newRouter(RoutingConfig{}, time.Now)
	m := twoEngineModel("", 3)
	count := map[string]int{}
	for range 8 {
		pk := r.pick(m, twoReplicas, nil, false)
		if !pk.ok || !pk.others {
			t.Fatalf("pick = %+v", pk)
		}
		r.begin(m.Name, pk.worker) // held: outstanding grows
		count[pk.worker.WorkerID]++
	}
	if count["w-a"] != 2 || count["w-b"] != 6 {
		t.Fatalf("in flight %v, want 2 on a and 6 on b", count)
	}
}

// Latency routing prefers the engine measured faster, and one not yet
// measured is tried first.
func TestPickLatency(t *testing.T) {
	r := newRouter(RoutingConfig{}, time.Now)
	m := twoEngineModel(registry.RoutingLatency, 0)
	r.succeeded("chat", "", 50*time.Millisecond)
	if pk := r.pick(m, twoReplicas, nil, false); pk.worker.WorkerID != "w-b" {
		t.Fatalf("unmeasured engine not tried first: %s", pk.worker.WorkerID)
	}
	r.succeeded("chat", "b", 5*time.Millisecond)
	for range 5 {
		if pk := r.pick(m, twoReplicas, nil, false); pk.worker.WorkerID != "w-b" {
			t.Fatalf("picked the slower engine %s", pk.worker.WorkerID)
		}
	}
	// Load counts too: with b holding many requests, a wins.
	for range 20 {
		r.begin("chat", twoReplicas[1])
	}
	if pk := r.pick(m, twoReplicas, nil, false); pk.worker.WorkerID != "w-a" {
		t.Fatalf("a loaded fast engine still picked: %s", pk.worker.WorkerID)
	}
}

func TestCooldownAndProbation(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRouter(RoutingConfig{CooldownFailures: 2, Cooldown: 10 * time.Second}, func() time.Time { return now })
	m := twoEngineModel("", 0)
	if r.failed("chat", "") {
		t.Fatal("cooling after one failure of two")
	}
	r.succeeded("chat", "", time.Millisecond) // a success ends the count
	if r.failed("chat", "") {
		t.Fatal("the count survived a success")
	}
	if !r.failed("chat", "") {
		t.Fatal("not cooling after two failures in a row")
	}
	pk := r.pick(m, twoReplicas, nil, false)
	if pk.worker.WorkerID != "w-b" || pk.others || pk.cooling != 1 || pk.servable != 2 {
		t.Fatalf("pick during cooldown = %+v", pk)
	}
	if pk := r.pick(m, twoReplicas, map[string]bool{"w-b": true}, false); pk.ok || pk.cooling != 1 {
		t.Fatalf("only a cooling engine left: %+v", pk)
	}
	if pk := r.pick(m, twoReplicas, map[string]bool{"w-b": true}, true); !pk.ok || pk.worker.WorkerID != "w-a" {
		t.Fatalf("ignoring cooldowns: %+v", pk)
	}
	now = now.Add(11 * time.Second)
	if pk := r.pick(m, []registry.WorkerState{twoReplicas[0]}, nil, false); !pk.ok {
		t.Fatal("not tried again after the cooldown")
	}
	if !r.failed("chat", "") {
		t.Fatal("a failure right after a cooldown does not start the next")
	}
	// Off.
	off := newRouter(RoutingConfig{CooldownFailures: -1}, time.Now)
	for range 10 {
		if off.failed("chat", "") {
			t.Fatal("cooldown with cooldowns off")
		}
	}
}

func TestPickSkipsUnservableAndUnknownEngines(t *testing.T) {
	r := newRouter(RoutingConfig{}, time.Now)
	m := twoEngineModel("", 0)
	states := []registry.WorkerState{
		{Model: "chat", WorkerID: "w-x", EngineID: "gone", State: registry.WorkerServing},
		{Model: "chat", WorkerID: "w-a", State: registry.WorkerUnauthorized},
		{Model: "chat", WorkerID: "w-b", EngineID: "b", State: registry.WorkerServing},
	}
	for range 5 {
		if pk := r.pick(m, states, nil, false); pk.worker.WorkerID != "w-b" || pk.servable != 1 {
			t.Fatalf("pick = %+v", pk)
		}
	}
}

func TestContextWindowAndEstimate(t *testing.T) {
	m := registry.Model{Name: "m"}
	states := []registry.WorkerState{{State: registry.WorkerServing, ContextWindow: 8192}, {State: registry.WorkerServing, ContextWindow: 4096},
		{State: registry.WorkerStarting, ContextWindow: 1024}}
	if w := contextWindow(m, states); w != 4096 {
		t.Fatalf("window from replicas = %d", w)
	}
	m.ContextWindow = 2048
	if w := contextWindow(m, states); w != 2048 {
		t.Fatalf("the binding's window = %d", w)
	}
	if e := promptTokenEstimate(Request{InputBytes: 401}); e != 101 {
		t.Fatalf("estimate %d", e)
	}
}
