// Package kv is typed access to a JetStream key-value bucket of JSON values:
// get, list, put, create, delete, update by compare-and-set, and watch.
//
// It is the one place in the mesh that decides what a lost compare-and-set
// looks like (a create that finds the key, an update that finds a newer
// revision, on single-replica and replicated buckets alike) and how often
// it is retried: a bounded number of times, with jittered backoff, never
// past the caller's context.
package kv

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors callers match with errors.Is. Each is returned wrapped with the
// bucket and key it is about.
var (
	// ErrNotFound: the key does not exist (never written, deleted or purged).
	ErrNotFound = errors.New("kv: not found")
	// ErrExists: Create found the key already there.
	ErrExists = errors.New("kv: already exists")
	// ErrConflict: Update lost the compare-and-set on every attempt its
	// retry allowed; other writers kept changing the key.
	ErrConflict = errors.New("kv: compare-and-set conflict")
	// ErrNoChange is returned by an Update callback to leave the value as
	// it is: nothing is written and Update reports no error.
	ErrNoChange = errors.New("kv: no change")
)

// DecodeError is a stored value that is not the JSON of the type it is read
// as.
type DecodeError struct {
	Bucket   string
	Key      string
	Revision uint64
	Err      error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("kv: decode %s/%s (revision %d): %v", e.Bucket, e.Key, e.Revision, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Entry is one decoded value with its key and revision.
type Entry[T any] struct {
	Key      string
	Value    T
	Revision uint64
}

// Values returns the values of entries, in order.
func Values[T any](entries []Entry[T]) []T {
	out := make([]T, len(entries))
	for i, e := range entries {
		out[i] = e.Value
	}
	return out
}

func decode[T any](b jetstream.KeyValue, e jetstream.KeyValueEntry) (T, error) {
	var v T
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		var zero T
		return zero, &DecodeError{Bucket: b.Bucket(), Key: e.Key(), Revision: e.Revision(), Err: err}
	}
	return v, nil
}

func where(b jetstream.KeyValue, key string) string { return b.Bucket() + "/" + key }

// getRaw reads key; a missing, deleted or purged key is ErrNotFound.
func getRaw(ctx context.Context, b jetstream.KeyValue, key string) (jetstream.KeyValueEntry, error) {
	e, err := b.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, where(b, key))
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("kv: get %s: %w (no replica answers direct gets: its replicas are down, or the bucket was provisioned again as replicated, read through its leader, after this process bound it, and the process needs a restart)", where(b, key), err)
	}
	if err != nil {
		return nil, fmt.Errorf("kv: get %s: %w", where(b, key), err)
	}
	return e, nil
}

// Get returns the value under key and its revision. A missing key is
// ErrNotFound; a value that is not JSON of T is a *DecodeError.
func Get[T any](ctx context.Context, b jetstream.KeyValue, key string) (T, uint64, error) {
	var zero T
	e, err := getRaw(ctx, b, key)
	if err != nil {
		return zero, 0, err
	}
	v, err := decode[T](b, e)
	if err != nil {
		return zero, 0, err
	}
	return v, e.Revision(), nil
}

// List returns the current value of every key matching one of filters
// (NATS subject wildcards over keys, e.g. "t.acme.*"; none means every key),
// sorted by key. It reads the bucket in one pass as of about the moment of
// the call: a key deleted while the listing runs is either listed with its
// last value or absent, never an error.
//
// A value that does not decode does not vanish from the listing: List
// reads the whole pass and then fails with every *DecodeError joined (find
// them with errors.As), so a corrupt record is seen, not skipped. A failure
// to read the bucket, or the context ending before the pass completes,
// fails the List; it never returns a partial listing as if it were whole.
func List[T any](ctx context.Context, b jetstream.KeyValue, filters ...string) ([]Entry[T], error) {
	opts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
	var (
		w   jetstream.KeyWatcher
		err error
	)
	if len(filters) == 0 {
		w, err = b.WatchAll(ctx, opts...)
	} else {
		// WatchFiltered rewrites its slice in place; keep the caller's.
		w, err = b.WatchFiltered(ctx, append([]string(nil), filters...), opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("kv: list %s: %w", b.Bucket(), err)
	}
	defer stopWatcher(w)

	byKey := map[string]jetstream.KeyValueEntry{}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kv: list %s: %w", b.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				if err := ctx.Err(); err != nil {
					return nil, fmt.Errorf("kv: list %s: %w", b.Bucket(), err)
				}
				return nil, fmt.Errorf("kv: list %s: the watcher closed before the listing was complete", b.Bucket())
			case e == nil:
				done = true
			case e.Operation() == jetstream.KeyValuePut:
				// A key written during the pass may be delivered twice;
				// keep its newest value.
				if old, ok := byKey[e.Key()]; !ok || e.Revision() > old.Revision() {
					byKey[e.Key()] = e
				}
			}
		}
	}

	out := make([]Entry[T], 0, len(byKey))
	var errs []error
	for _, e := range byKey {
		v, err := decode[T](b, e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Entry[T]{Key: e.Key(), Value: v, Revision: e.Revision()})
	}
	if len(errs) > 0 {
		sortErrs(errs)
		return nil, errors.Join(errs...)
	}
	sortEntries(out)
	return out, nil
}

// Put stores v under key whatever is there, and returns its revision.
func Put[T any](ctx context.Context, b jetstream.KeyValue, key string, v T) (uint64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("kv: encode %s: %w", where(b, key), err)
	}
	var rev uint64
	if _, err := throughElection(ctx, func() (err error) { rev, err = b.Put(ctx, key, data); return err }); err != nil {
		return 0, fmt.Errorf("kv: put %s: %w", where(b, key), err)
	}
	return rev, nil
}

// throughElection runs a write, again while no stream leader answers it (a
// bucket electing a new leader after a NATS node is lost answers no write
// for seconds), bounded by ctx and leaderWait, and says whether it retried.
func throughElection(ctx context.Context, write func() error) (retried bool, err error) {
	backoff := 50 * time.Millisecond
	for waited := time.Duration(0); ; waited += backoff {
		err = write()
		if err == nil || !noLeader(err) || waited >= leaderWait || ctx.Err() != nil {
			return retried, err
		}
		retried = true
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return retried, err
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// leaderWait bounds how long a put waits for its bucket to have a leader:
// longer than a JetStream election after a node is lost.
const leaderWait = 20 * time.Second

// noLeader reports an error of a write that no stream leader answered.
func noLeader(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// Create stores v under key if the key does not exist (a deleted key does
// not), and returns its revision; ErrExists otherwise.
func Create[T any](ctx context.Context, b jetstream.KeyValue, key string, v T) (uint64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("kv: encode %s: %w", where(b, key), err)
	}
	var rev uint64
	retried, err := throughElection(ctx, func() (err error) { rev, err = b.Create(ctx, key, data); return err })
	switch {
	case err == nil:
		return rev, nil
	case isCASLoss(err):
		// After a write no leader answered, the key may be there because
		// that write was stored after all: it is ours when it holds
		// exactly our bytes.
		if retried {
			if e, gerr := b.Get(ctx, key); gerr == nil && bytes.Equal(e.Value(), data) {
				return e.Revision(), nil
			}
		}
		return 0, fmt.Errorf("%w: %s", ErrExists, where(b, key))
	}
	return 0, fmt.Errorf("kv: create %s: %w", where(b, key), err)
}

// Delete removes key; ErrNotFound when it does not exist. Watchers see a
// deletion.
func Delete(ctx context.Context, b jetstream.KeyValue, key string) error {
	if _, err := getRaw(ctx, b, key); err != nil {
		return err
	}
	if err := b.Delete(ctx, key); err != nil {
		return fmt.Errorf("kv: delete %s: %w", where(b, key), err)
	}
	return nil
}

// Retry bounds how often Update tries again after losing a compare-and-set
// and how long it waits between tries: attempt n waits a random duration
// in [0, min(MaxBackoff, MinBackoff·2ⁿ⁻¹)) ("full jitter"), so writers that
// collided do not collide again in lockstep.
type Retry struct {
	// Attempts is how many writes are tried in all before ErrConflict.
	Attempts   int
	MinBackoff time.Duration
	MaxBackoff time.Duration
}

// DefaultRetry is what Update uses unless told otherwise: enough for tens
// of writers racing on one key, and at most a few seconds of waiting.
func DefaultRetry() Retry {
	return Retry{Attempts: 32, MinBackoff: time.Millisecond, MaxBackoff: 100 * time.Millisecond}
}

func (r Retry) backoff(attempt int) time.Duration {
	ceil := r.MaxBackoff
	if attempt-1 < 30 {
		if d := r.MinBackoff << (attempt - 1); d > 0 && d < ceil {
			ceil = d
		}
	}
	if ceil <= 0 {
		return 0
	}
	return rand.N(ceil)
}

// Option changes how Update works.
type Option func(*options)

type options struct{ retry Retry }

// WithRetry replaces DefaultRetry. Attempts below 1 count as 1.
func WithRetry(r Retry) Option { return func(o *options) { o.retry = r } }

// Update changes the value under key by compare-and-set. It reads the value
// and calls fn with it (exists false and the zero value when the key does
// not exist); fn changes *v in place. The result is written only if nobody
// wrote the key since it was read; otherwise Update reads again and calls
// fn again, so fn may run several times and must not have side effects it
// cannot repeat.
//
// fn returning ErrNoChange (or an error wrapping it) writes nothing: Update
// returns the stored value (the zero value if none) with written false and
// a nil error. Any other error from fn aborts without writing and is
// returned as is. After Retry.Attempts lost writes Update returns
// ErrConflict; it stops waiting when ctx ends and returns ctx's error. A
// stored value that does not decode is a *DecodeError: Update never
// overwrites what it could not read.
//
// Update returns the value it wrote and written true on success.
func Update[T any](ctx context.Context, b jetstream.KeyValue, key string, fn func(v *T, exists bool) error, opts ...Option) (v T, written bool, err error) {
	o := options{retry: DefaultRetry()}
	for _, opt := range opts {
		opt(&o)
	}
	attempts := max(o.retry.Attempts, 1)
	var zero T
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return zero, false, fmt.Errorf("kv: update %s: %w", where(b, key), err)
		}
		e, err := getRaw(ctx, b, key)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return zero, false, err
		}
		var cur T
		var rev uint64
		if exists {
			if cur, err = decode[T](b, e); err != nil {
				return zero, false, err
			}
			rev = e.Revision()
		}
		if err := fn(&cur, exists); err != nil {
			if !errors.Is(err, ErrNoChange) {
				return zero, false, err
			}
			if !exists {
				return zero, false, nil
			}
			// fn may have changed cur before deciding; answer what is stored.
			stored, err := decode[T](b, e)
			return stored, false, err
		}
		data, err := json.Marshal(cur)
		if err != nil {
			return zero, false, fmt.Errorf("kv: encode %s: %w", where(b, key), err)
		}
		if exists {
			_, err = b.Update(ctx, key, data, rev)
		} else {
			_, err = b.Create(ctx, key, data)
		}
		if err == nil {
			return cur, true, nil
		}
		if !isCASLoss(err) {
			return zero, false, fmt.Errorf("kv: write %s: %w", where(b, key), err)
		}
		if attempt >= attempts {
			return zero, false, fmt.Errorf("%w: %s: lost %d times, last: %w", ErrConflict, where(b, key), attempts, err)
		}
		if d := o.retry.backoff(attempt); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return zero, false, fmt.Errorf("kv: update %s: %w", where(b, key), ctx.Err())
			case <-t.C:
			}
		}
	}
}

// isCASLoss reports whether a write failed only because the key's revision
// was not the one expected: a Create that found the key, an Update that
// found a newer revision. Single-replica streams answer with error code
// 10071, replicated ones with 10164; nats.go maps both to ErrKeyExists or
// ErrKeyRevisionMismatch depending on the call.
func isCASLoss(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func sortEntries[T any](s []Entry[T]) {
	slices.SortFunc(s, func(a, b Entry[T]) int { return cmp.Compare(a.Key, b.Key) })
}

func sortErrs(errs []error) {
	slices.SortFunc(errs, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
}
