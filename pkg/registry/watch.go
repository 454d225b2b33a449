package registry

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Change is one update seen by a watcher. Deleted changes carry only the
// KV key; Value is the zero value.
type Change[T any] struct {
	Key     string
	Value   T
	Deleted bool
}

// WatchKeys calls fn for every key, first the current ones (then once with
// initial=true when they are all delivered), then each change, until ctx
// ends. fn runs on one goroutine.
func (s *Store) WatchKeys(ctx context.Context, fn func(c Change[Key], initialDone bool)) error {
	return watch(ctx, s.keys, fn)
}

// WatchModels is WatchKeys for model bindings.
func (s *Store) WatchModels(ctx context.Context, fn func(c Change[Model], initialDone bool)) error {
	return watch(ctx, s.models, fn)
}

// WatchBucket is the watcher behind WatchKeys and WatchModels for any
// bucket of JSON values of type T (the catalog uses it too): values that
// do not decode are skipped.
func WatchBucket[T any](ctx context.Context, kv jetstream.KeyValue, fn func(c Change[T], initialDone bool)) error {
	return watch(ctx, kv, fn)
}

func watch[T any](ctx context.Context, kv jetstream.KeyValue, fn func(Change[T], bool)) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("registry: watch %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				initial = false
				fn(Change[T]{}, true)
				continue
			}
			c := Change[T]{Key: e.Key()}
			if e.Operation() != jetstream.KeyValuePut {
				if initial {
					// The initial state lists what exists; deletion markers
					// of keys removed before the watch started are history.
					continue
				}
				c.Deleted = true
			} else if err := json.Unmarshal(e.Value(), &c.Value); err != nil {
				continue
			}
			fn(c, false)
		}
	}
}
