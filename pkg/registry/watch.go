package registry

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/kv"
)

// Change is one update seen by a watcher (kv.Change). Deleted changes carry
// only the KV key; Value is the zero value. The registry's watchers never
// deliver a change whose Err is set.
type Change[T any] = kv.Change[T]

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

func watch[T any](ctx context.Context, b jetstream.KeyValue, fn func(Change[T], bool)) error {
	err := kv.Watch(ctx, b, func(c kv.Change[T], initialDone bool) {
		if c.Err != nil {
			return
		}
		fn(c, initialDone)
	})
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}
