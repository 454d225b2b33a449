package kv

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Change is one update seen by a watcher.
type Change[T any] struct {
	Key string
	// Value is the new value; the zero value for a deletion or a value that
	// did not decode.
	Value T
	// Revision is the bucket revision of the change.
	Revision uint64
	// Deleted: the key was deleted or purged.
	Deleted bool
	// Err is a *DecodeError when the stored value is not JSON of T. The
	// change is still delivered, so a watcher can tell a corrupt record
	// from a missing one; a watcher that ignores Err must skip such a
	// change rather than store the zero Value.
	Err error
}

// Watch calls fn for every key of the bucket: first the current ones, then
// once with initialDone true (and a zero Change), then each change as it
// happens, until ctx ends. fn runs on the calling goroutine, one change at a
// time; a slow fn holds back the changes after it, none is dropped.
//
// The initial state lists what exists: keys deleted before the watch
// started are not reported. Watch returns nil when ctx ends, and an error
// when the watch cannot start or the server side of it ends first (the
// connection closed), so a caller's cache never silently stops following
// the bucket.
func Watch[T any](ctx context.Context, b jetstream.KeyValue, fn func(c Change[T], initialDone bool)) error {
	w, err := b.WatchAll(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kv: watch %s: %w", b.Bucket(), err)
	}
	defer stopWatcher(w)
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("kv: watch %s: %w", b.Bucket(), errWatchClosed)
			}
			if e == nil {
				initial = false
				fn(Change[T]{}, true)
				continue
			}
			c := Change[T]{Key: e.Key(), Revision: e.Revision()}
			if e.Operation() != jetstream.KeyValuePut {
				if initial {
					// Deletion markers of keys removed before the watch
					// started are history, not state.
					continue
				}
				c.Deleted = true
			} else {
				c.Value, c.Err = decode[T](b, e)
			}
			fn(c, false)
		}
	}
}

var errWatchClosed = errors.New("the watcher closed while its context was live")

// stopWatcher stops w and drains what it still delivers, so the client's
// delivery goroutine, which blocks on a full updates channel, can finish.
func stopWatcher(w jetstream.KeyWatcher) {
	_ = w.Stop()
	go func() {
		for range w.Updates() {
		}
	}()
}
