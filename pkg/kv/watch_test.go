package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/kv"
)

type event struct {
	c    kv.Change[rec]
	done bool
}

// startWatch runs kv.Watch in a goroutine; its callbacks arrive on the
// returned channel, its return value on the other.
func startWatch(ctx context.Context, b jetstream.KeyValue) (<-chan event, <-chan error) {
	ch := make(chan event, 64)
	ret := make(chan error, 1)
	go func() {
		ret <- kv.Watch(ctx, b, func(c kv.Change[rec], done bool) { ch <- event{c, done} })
	}()
	return ch, ret
}

func next(t *testing.T, ch <-chan event) event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no watch callback within 10s")
		return event{}
	}
}

func waitReturn(t *testing.T, ret <-chan error) error {
	t.Helper()
	select {
	case err := <-ret:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return within 10s")
		return nil
	}
}

func TestWatch(t *testing.T) {
	b, _ := bucket(t)
	ctx := testCtx(t)
	for _, k := range []string{"a", "b", "gone"} {
		if _, err := kv.Put(ctx, b, k, rec{Name: k}); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, b, "gone"); err != nil {
		t.Fatal(err)
	}

	wctx, cancel := context.WithCancel(ctx)
	ch, ret := startWatch(wctx, b)

	initial := map[string]rec{}
	for {
		e := next(t, ch)
		if e.done {
			if e.c.Key != "" || e.c.Revision != 0 || e.c.Deleted || e.c.Err != nil || e.c.Value.Name != "" {
				t.Fatalf("initialDone came with change %+v", e.c)
			}
			break
		}
		if e.c.Deleted || e.c.Err != nil {
			t.Fatalf("initial state holds %+v", e.c)
		}
		if e.c.Revision == 0 || e.c.Value.Name != e.c.Key {
			t.Fatalf("initial change %+v", e.c)
		}
		initial[e.c.Key] = e.c.Value
	}
	if len(initial) != 2 || initial["a"].Name != "a" || initial["b"].Name != "b" {
		t.Fatalf("initial state = %v, want a and b", initial)
	}

	rev, err := kv.Put(ctx, b, "c", rec{Name: "c", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if e := next(t, ch); e.done || e.c.Key != "c" || e.c.Value.N != 1 || e.c.Revision != rev || e.c.Deleted || e.c.Err != nil {
		t.Fatalf("put seen as %+v", e)
	}
	if err := kv.Delete(ctx, b, "a"); err != nil {
		t.Fatal(err)
	}
	if e := next(t, ch); e.done || e.c.Key != "a" || !e.c.Deleted || e.c.Value.Name != "" {
		t.Fatalf("delete seen as %+v", e)
	}
	if err := b.Purge(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if e := next(t, ch); e.c.Key != "b" || !e.c.Deleted {
		t.Fatalf("purge seen as %+v", e)
	}
	putRaw(t, b, "c", "{garbage")
	e := next(t, ch)
	var de *kv.DecodeError
	if e.c.Key != "c" || e.c.Deleted || !errors.As(e.c.Err, &de) || de.Key != "c" || e.c.Value.N != 0 {
		t.Fatalf("garbage seen as %+v", e)
	}

	cancel()
	if err := waitReturn(t, ret); err != nil {
		t.Fatalf("Watch returned %v after its context ended", err)
	}
}

func TestWatchEmptyBucket(t *testing.T) {
	b, _ := bucket(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	ch, _ := startWatch(ctx, b)
	if e := next(t, ch); !e.done {
		t.Fatalf("first callback on an empty bucket = %+v, want initialDone", e)
	}
}

// TestWatchConnectionClosed: a watch whose connection goes away reports it
// instead of returning as if it had been stopped.
func TestWatchConnectionClosed(t *testing.T) {
	b, nc := bucket(t)
	ch, ret := startWatch(testCtx(t), b)
	if e := next(t, ch); !e.done {
		t.Fatalf("first callback = %+v, want initialDone", e)
	}
	nc.Close()
	if err := waitReturn(t, ret); err == nil {
		t.Fatal("Watch returned nil after its connection closed")
	}
}
