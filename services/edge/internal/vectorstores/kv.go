package vectorstores

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/registry"
)

func kvGet[T any](ctx context.Context, kv jetstream.KeyValue, key string) (T, uint64, error) {
	var v T
	e, err := kv.Get(ctx, key)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return v, 0, registry.ErrNotFound
		}
		return v, 0, err
	}
	return v, e.Revision(), json.Unmarshal(e.Value(), &v)
}

func kvPut(ctx context.Context, kv jetstream.KeyValue, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, key, b)
	return err
}

// kvList returns every value whose key matches the filter.
func kvList[T any](ctx context.Context, kv jetstream.KeyValue, filter string) ([]T, error) {
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, err
	}
	var out []T
	for key := range lister.Keys() {
		v, _, err := kvGet[T](ctx, kv, key)
		if err == nil {
			out = append(out, v)
		}
	}
	return out, nil
}

// countFiles tallies files by status.

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// searchRequest is OpenAI's vector store search body.
