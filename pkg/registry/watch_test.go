package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/registry"
)

// event is one watcher callback, flattened for a channel.
type event[T any] struct {
	c    registry.Change[T]
	done bool
}

// startWatch runs watch in a goroutine and returns its callbacks as a
// channel; the watcher is stopped (and its return checked) at cleanup.
func startWatch[T any](t *testing.T, watch func(context.Context, func(registry.Change[T], bool)) error) <-chan event[T] {
	t.Helper()
	ch := make(chan event[T], 64)
	ctx, cancel := context.WithCancel(context.Background())
	ret := make(chan error, 1)
	go func() {
		ret <- watch(ctx, func(c registry.Change[T], done bool) { ch <- event[T]{c, done} })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-ret:
			if err != nil {
				t.Errorf("watch returned %v after cancel", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("watch did not return after its context ended")
		}
	})
	return ch
}

func next[T any](t *testing.T, ch <-chan event[T]) event[T] {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no watch callback within 5s")
		return event[T]{}
	}
}

func TestWatchKeys(t *testing.T) {
	s, _ := open(t)
	ctx := testCtx(t)
	if _, err := s.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	k1, _, err := s.CreateKey(ctx, "acme", "one", nil, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	k2, _, err := s.CreateKey(ctx, "acme", "two", []string{"m"}, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}

	ch := startWatch(t, s.WatchKeys)

	initial := map[string]registry.Key{}
	for {
		e := next(t, ch)
		if e.done {
			break
		}
		if e.c.Deleted {
			t.Fatalf("initial state holds a deletion of %q", e.c.Key)
		}
		if e.c.Key != e.c.Value.ID {
			t.Fatalf("change key %q for record %q", e.c.Key, e.c.Value.ID)
		}
		initial[e.c.Key] = e.c.Value
	}
	if len(initial) != 2 || initial[k1.ID].Name != "one" || initial[k2.ID].Name != "two" {
		t.Fatalf("initial state = %#v", initial)
	}
	if initial[k1.ID].Hash != k1.Hash {
		t.Fatal("watched key lacks its hash")
	}

	k3, _, err := s.CreateKey(ctx, "acme", "three", nil, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	e := next(t, ch)
	if e.done || e.c.Deleted || e.c.Key != k3.ID || e.c.Value.Name != "three" {
		t.Fatalf("live create: %#v", e)
	}

	if err := s.RevokeKey(ctx, k1.ID); err != nil {
		t.Fatal(err)
	}
	e = next(t, ch)
	if e.done || !e.c.Deleted || e.c.Key != k1.ID || e.c.Value.ID != "" {
		t.Fatalf("live revoke: %#v", e)
	}
}

func TestWatchEmptyBucketSignalsInitialDone(t *testing.T) {
	s, _ := open(t)
	ch := startWatch(t, s.WatchModels)
	if e := next(t, ch); !e.done {
		t.Fatalf("first callback on an empty bucket = %#v, want initialDone", e)
	}
	if err := s.PutModel(testCtx(t), validModel("late/model:1")); err != nil {
		t.Fatal(err)
	}
	if e := next(t, ch); e.done || e.c.Value.Name != "late/model:1" {
		t.Fatalf("live put: %#v", e)
	}
}

func TestWatchModels(t *testing.T) {
	s, _ := open(t)
	ctx := testCtx(t)
	name := "meta-llama/Llama-3.1-8B:q4"
	if err := s.PutModel(ctx, validModel(name)); err != nil {
		t.Fatal(err)
	}

	ch := startWatch(t, s.WatchModels)
	e := next(t, ch)
	if e.done || e.c.Deleted || e.c.Value.Name != name || e.c.Key != registry.ModelKey(name) {
		t.Fatalf("initial: %#v", e)
	}
	if e := next(t, ch); !e.done {
		t.Fatalf("after the initial state: %#v, want initialDone", e)
	}

	// A replacement is a live change with the new value.
	m := validModel(name)
	m.Engine.Model = "v2"
	if err := s.PutModel(ctx, m); err != nil {
		t.Fatal(err)
	}
	if e := next(t, ch); e.done || e.c.Deleted || e.c.Value.Engine.Model != "v2" {
		t.Fatalf("live replace: %#v", e)
	}

	if err := s.DeleteModel(ctx, name); err != nil {
		t.Fatal(err)
	}
	e = next(t, ch)
	if e.done || !e.c.Deleted || e.c.Key != registry.ModelKey(name) {
		t.Fatalf("live delete: %#v", e)
	}
}

// The initial state is "the current keys": a key revoked before the watch
// started must not be replayed as a deletion (the edge logs and counts a
// revocation for each such callback on every start).
func TestWatchInitialStateOmitsDeletedKeys(t *testing.T) {
	s, _ := open(t)
	ctx := testCtx(t)
	if _, err := s.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	k0, _, err := s.CreateKey(ctx, "acme", "gone", nil, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, k0.ID); err != nil {
		t.Fatal(err)
	}
	k1, _, err := s.CreateKey(ctx, "acme", "live", nil, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ch := startWatch(t, s.WatchKeys)
	for {
		e := next(t, ch)
		if e.done {
			return
		}
		if e.c.Deleted || e.c.Key != k1.ID {
			t.Fatalf("initial state holds %#v; want only %s", e, k1.ID)
		}
	}
}
