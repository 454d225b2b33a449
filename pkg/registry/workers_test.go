package registry_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/registry"
)

func TestWorkersPutListDelete(t *testing.T) {
	_, js := open(t)
	ctx := testCtx(t)
	w, err := registry.OpenWorkers(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, st := range []registry.WorkerState{
		{WorkerID: "w-1", Model: "meta-llama/Llama-3.1-8B", State: registry.WorkerServing, StartedAt: now, UpdatedAt: now},
		{WorkerID: "w-2", Model: "meta-llama/Llama-3.1-8B", EngineID: "b", State: registry.WorkerUnauthorized, LastError: "401", StartedAt: now, UpdatedAt: now},
		{WorkerID: "w-3", Model: "other", State: registry.WorkerServing, StartedAt: now, UpdatedAt: now},
	} {
		if err := w.Put(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Put(ctx, registry.WorkerState{Model: "x"}); err == nil {
		t.Error("a state without a worker id was stored")
	}
	got, err := w.List(ctx, "meta-llama/Llama-3.1-8B")
	if err != nil || len(got) != 2 || got[0].WorkerID != "w-1" || got[1].State != registry.WorkerUnauthorized {
		t.Fatalf("List(model) = %+v, %v", got, err)
	}
	if !got[0].Servable() || got[1].Servable() {
		t.Errorf("Servable: %v %v", got[0].Servable(), got[1].Servable())
	}
	all, err := w.List(ctx, "")
	if err != nil || len(all) != 3 {
		t.Fatalf("List(all) = %d, %v", len(all), err)
	}
	if err := w.Delete(ctx, "other", "w-3"); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, "other", "w-3"); err != nil {
		t.Errorf("deleting a gone state: %v", err)
	}
	if all, _ := w.List(ctx, ""); len(all) != 2 {
		t.Errorf("after delete: %d states", len(all))
	}
}

// A replica that stops refreshing its state disappears, and watchers are
// told: the bucket keeps limit markers for expired keys.
func TestWorkerStateExpiryIsWatched(t *testing.T) {
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	// The bucket as events.Buckets declares it, with a short TTL.
	var cfg jetstream.KeyValueConfig
	for _, kc := range events.Buckets(events.StreamOptions{}) {
		if kc.Bucket == events.BucketWorkers {
			cfg = kc
		}
	}
	if cfg.TTL != events.WorkerStateTTL || cfg.LimitMarkerTTL == 0 {
		t.Fatalf("the workers bucket: TTL %v, limit markers %v", cfg.TTL, cfg.LimitMarkerTTL)
	}
	cfg.TTL, cfg.LimitMarkerTTL = time.Second, time.Second
	if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	w, err := registry.OpenWorkers(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	ch := startWatch(t, w.Watch)
	if e := next(t, ch); !e.done {
		t.Fatalf("first callback %+v, want the end of the initial state", e)
	}
	if err := w.Put(ctx, registry.WorkerState{WorkerID: "w-1", Model: "m", State: registry.WorkerServing}); err != nil {
		t.Fatal(err)
	}
	if e := next(t, ch); e.c.Deleted || e.c.Value.WorkerID != "w-1" {
		t.Fatalf("put seen as %+v", e.c)
	}
	if e := next(t, ch); !e.c.Deleted || e.c.Key != registry.WorkerKey("m", "w-1") {
		t.Fatalf("expiry seen as %+v", e.c)
	}
}
