package kv_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/natstest"
)

type rec struct {
	Name string `json:"name"`
	N    int    `json:"n"`
	Tags []string
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// bucket starts a JetStream server and makes an empty bucket on it.
func bucket(t *testing.T) (jetstream.KeyValue, *nats.Conn) {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{Bucket: "test", History: 4})
	if err != nil {
		t.Fatal(err)
	}
	return b, nc
}

func putRaw(t *testing.T, b jetstream.KeyValue, key, raw string) uint64 {
	t.Helper()
	rev, err := b.Put(testCtx(t), key, []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func TestGetPutCreateDelete(t *testing.T) {
	b, _ := bucket(t)
	ctx := testCtx(t)

	if _, _, err := kv.Get[rec](ctx, b, "a"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	rev, err := kv.Create(ctx, b, "a", rec{Name: "a", N: 1})
	if err != nil || rev == 0 {
		t.Fatalf("Create = %d, %v", rev, err)
	}
	if _, err := kv.Create(ctx, b, "a", rec{Name: "again"}); !errors.Is(err, kv.ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	v, grev, err := kv.Get[rec](ctx, b, "a")
	if err != nil || v.Name != "a" || v.N != 1 || grev != rev {
		t.Fatalf("Get = %+v, %d, %v; want the created value at revision %d", v, grev, err, rev)
	}
	prev, err := kv.Put(ctx, b, "a", rec{Name: "a", N: 2})
	if err != nil || prev <= rev {
		t.Fatalf("Put = %d, %v", prev, err)
	}
	if v, _, _ := kv.Get[rec](ctx, b, "a"); v.N != 2 {
		t.Fatalf("after Put: %+v", v)
	}

	if err := kv.Delete(ctx, b, "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kv.Get[rec](ctx, b, "a"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("Get of a deleted key: %v, want ErrNotFound", err)
	}
	if err := kv.Delete(ctx, b, "a"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("Delete of a deleted key: %v, want ErrNotFound", err)
	}
	if err := kv.Delete(ctx, b, "never"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("Delete of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := kv.Create(ctx, b, "a", rec{Name: "reborn"}); err != nil {
		t.Fatalf("Create after Delete: %v", err)
	}
}

func TestDecodeError(t *testing.T) {
	b, _ := bucket(t)
	ctx := testCtx(t)
	rev := putRaw(t, b, "bad", "{not json")

	_, _, err := kv.Get[rec](ctx, b, "bad")
	var de *kv.DecodeError
	if !errors.As(err, &de) || de.Key != "bad" || de.Bucket != "test" || de.Revision != rev {
		t.Fatalf("Get of garbage: %v, want a *DecodeError for test/bad at %d", err, rev)
	}

	// Update never overwrites what it could not read.
	called := false
	_, written, err := kv.Update(ctx, b, "bad", func(v *rec, exists bool) error { called = true; return nil })
	if !errors.As(err, &de) || written || called {
		t.Fatalf("Update of garbage: written %v, fn called %v, err %v; want a *DecodeError and nothing done", written, called, err)
	}
	e, err := b.Get(ctx, "bad")
	if err != nil || e.Revision() != rev {
		t.Fatalf("garbage was overwritten: %v, %v", e, err)
	}
}

func TestList(t *testing.T) {
	b, _ := bucket(t)
	ctx := testCtx(t)

	got, err := kv.List[rec](ctx, b)
	if err != nil || len(got) != 0 {
		t.Fatalf("List of an empty bucket = %v, %v", got, err)
	}
	for _, k := range []string{"t.acme.2", "t.acme.1", "t.globex.1", "t.acme.gone"} {
		if _, err := kv.Put(ctx, b, k, rec{Name: k}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, b, "t.acme.1", rec{Name: "t.acme.1", N: 7}); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, b, "t.acme.gone"); err != nil {
		t.Fatal(err)
	}

	all, err := kv.List[rec](ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if keys := entryKeys(all); !slices.Equal(keys, []string{"t.acme.1", "t.acme.2", "t.globex.1"}) {
		t.Fatalf("List keys = %q", keys)
	}
	if all[0].Value.N != 7 || all[0].Revision == 0 {
		t.Fatalf("List holds %+v, want the latest value of t.acme.1", all[0])
	}
	if vs := kv.Values(all); len(vs) != 3 || vs[2].Name != "t.globex.1" {
		t.Fatalf("Values = %+v", vs)
	}

	filters := []string{"t.acme.*"}
	acme, err := kv.List[rec](ctx, b, filters...)
	if err != nil {
		t.Fatal(err)
	}
	if keys := entryKeys(acme); !slices.Equal(keys, []string{"t.acme.1", "t.acme.2"}) {
		t.Fatalf("filtered List keys = %q", keys)
	}
	if filters[0] != "t.acme.*" {
		t.Fatalf("List changed the caller's filters to %q", filters)
	}
	if none, err := kv.List[rec](ctx, b, "t.initech.*"); err != nil || len(none) != 0 {
		t.Fatalf("List matching nothing = %v, %v", none, err)
	}

	// A record that does not decode fails the listing, by name.
	putRaw(t, b, "t.acme.bad", `{"name": 5}`)
	putRaw(t, b, "t.acme.worse", `[`)
	_, err = kv.List[rec](ctx, b)
	var de *kv.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("List over corrupt records: %v, want *DecodeError", err)
	}
	for _, k := range []string{"t.acme.bad", "t.acme.worse"} {
		if !containsKey(err, k) {
			t.Errorf("List error %q does not name %s", err, k)
		}
	}
	if got, err := kv.List[rec](ctx, b, "t.globex.*"); err != nil || len(got) != 1 {
		t.Fatalf("a filter avoiding the corrupt records = %v, %v", got, err)
	}
}

func TestListContextEnded(t *testing.T) {
	b, _ := bucket(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	if _, err := kv.Put(ctx, b, "a", rec{}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if got, err := kv.List[rec](ctx, b); err == nil {
		t.Fatalf("List with an ended context = %v, nil error", got)
	}
}

func entryKeys[T any](es []kv.Entry[T]) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

func containsKey(err error, key string) bool {
	var found bool
	var walk func(error)
	walk = func(err error) {
		var de *kv.DecodeError
		if errors.As(err, &de) && de.Key == key {
			found = true
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return found
}

// TestUpdateConcurrent: writers racing on one key, starting from no key at
// all, each land every increment: no update is lost.
func TestUpdateConcurrent(t *testing.T) {
	b, _ := bucket(t)
	ctx := testCtx(t)
	const writers, each = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				_, written, err := kv.Update(ctx, b, "counter", func(v *rec, exists bool) error {
					if !exists {
						v.Name = "counter"
					}
					v.N++
					v.Tags = append(v.Tags, fmt.Sprintf("%d/%d", w, i))
					return nil
				})
				if err == nil && !written {
					err = errors.New("Update succeeded without writing")
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	v, _, err := kv.Get[rec](ctx, b, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if v.N != writers*each || len(v.Tags) != writers*each {
		t.Fatalf("counter = %d with %d tags, want %d: updates were lost", v.N, len(v.Tags), writers*each)
	}
	seen := map[string]bool{}
	for _, tag := range v.Tags {
		if seen[tag] {
			t.Fatalf("increment %s landed twice", tag)
		}
		seen[tag] = true
	}
}

func TestUpdateCreatesAndReturns(t *testing.T) {
	b, _ := bucket(t)
	ctx := testCtx(t)
	v, written, err := kv.Update(ctx, b, "new", func(v *rec, exists bool) error {
		if exists {
			return errors.New("a missing key was reported as existing")
		}
		v.Name = "new"
		return nil
	})
	if err != nil || !written || v.Name != "new" {
		t.Fatalf("Update of a missing key = %+v, %v, %v", v, written, err)
	}
	v, written, err = kv.Update(ctx, b, "new", func(v *rec, exists bool) error {
		if !exists || v.Name != "new" {
			return fmt.Errorf("fn saw %+v, exists %v", *v, exists)
		}
		v.N = 3
		return nil
	})
	if err != nil || !written || v.N != 3 {
		t.Fatalf("Update of an existing key = %+v, %v, %v", v, written, err)
	}
}

func TestUpdateNoChangeAndAbort(t *testing.T) {
	b, _ := bucket(t)
	ctx := testCtx(t)
	rev, err := kv.Put(ctx, b, "k", rec{Name: "k", N: 1})
	if err != nil {
		t.Fatal(err)
	}

	// ErrNoChange writes nothing and answers the stored value, even if fn
	// scribbled on its copy first.
	v, written, err := kv.Update(ctx, b, "k", func(v *rec, exists bool) error {
		v.N = 99
		return fmt.Errorf("already done: %w", kv.ErrNoChange)
	})
	if err != nil || written || v.N != 1 {
		t.Fatalf("no-change Update = %+v, %v, %v; want the stored value, false, nil", v, written, err)
	}
	// Any other error aborts, as is.
	errBoom := errors.New("boom")
	_, written, err = kv.Update(ctx, b, "k", func(v *rec, exists bool) error { v.N = 99; return errBoom })
	if !errors.Is(err, errBoom) || written {
		t.Fatalf("aborted Update = %v, %v; want errBoom, false", written, err)
	}
	if _, cur, _ := kv.Get[rec](ctx, b, "k"); cur != rev {
		t.Fatalf("revision moved from %d to %d without a write", rev, cur)
	}

	// On a missing key, no change leaves it missing.
	v, written, err = kv.Update(ctx, b, "missing", func(v *rec, exists bool) error { return kv.ErrNoChange })
	if err != nil || written || v.Name != "" {
		t.Fatalf("no-change Update of a missing key = %+v, %v, %v", v, written, err)
	}
	if _, _, err := kv.Get[rec](ctx, b, "missing"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("missing key after a no-change Update: %v", err)
	}
}

// TestUpdateRetryBound: a writer that loses every compare-and-set gives up
// after the configured attempts with ErrConflict, having written nothing.
func TestUpdateRetryBound(t *testing.T) {
	b, _ := bucket(t)
	ctx := testCtx(t)
	for _, start := range []string{"existing", "missing"} {
		t.Run(start, func(t *testing.T) {
			key := "race-" + start
			if start == "existing" {
				if _, err := kv.Put(ctx, b, key, rec{}); err != nil {
					t.Fatal(err)
				}
			}
			var calls int
			_, written, err := kv.Update(ctx, b, key, func(v *rec, exists bool) error {
				calls++
				// Another writer gets in between every read and write.
				if _, err := b.Put(ctx, key, []byte(`{"name":"rival"}`)); err != nil {
					return err
				}
				v.Name = "mine"
				return nil
			}, kv.WithRetry(kv.Retry{Attempts: 5, MinBackoff: time.Microsecond, MaxBackoff: time.Millisecond}))
			if !errors.Is(err, kv.ErrConflict) || written {
				t.Fatalf("Update = %v, %v; want ErrConflict", written, err)
			}
			if calls != 5 {
				t.Fatalf("fn ran %d times, want 5", calls)
			}
			if v, _, _ := kv.Get[rec](ctx, b, key); v.Name != "rival" {
				t.Fatalf("stored %+v, want the rival's value", v)
			}
		})
	}
}

// TestUpdateContextEnds: a writer waiting to retry stops when its context
// ends and reports the context's error.
func TestUpdateContextEnds(t *testing.T) {
	b, _ := bucket(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	if _, err := kv.Put(ctx, b, "k", rec{}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	lost := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		_, _, err := kv.Update(ctx, b, "k", func(v *rec, exists bool) error {
			if calls.Add(1) == 1 {
				defer close(lost)
			}
			_, err := b.Put(context.Background(), "k", []byte(`{"name":"rival"}`))
			return err
		}, kv.WithRetry(kv.Retry{Attempts: 1000, MinBackoff: time.Hour, MaxBackoff: time.Hour}))
		res <- err
	}()
	<-lost
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Update after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Update kept waiting after its context ended")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}

	// An ended context stops Update before it reads at all.
	n := 0
	_, _, err := kv.Update(ctx, b, "k", func(*rec, bool) error { n++; return nil })
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("Update with an ended context = %v after %d calls", err, n)
	}
}
