package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/kv"
)

func TestStoreError(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want int
	}{
		{"no stream leader", live, fmt.Errorf("kv: put files/a: %w", jetstream.ErrNoStreamResponse), http.StatusServiceUnavailable},
		{"no responders", live, fmt.Errorf("kv: get files/a: %w", nats.ErrNoResponders), http.StatusServiceUnavailable},
		{"a JetStream call past its bound", live, fmt.Errorf("kv: get files/a: %w", context.DeadlineExceeded), http.StatusServiceUnavailable},
		{"reconnecting", live, nats.ErrConnectionReconnecting, http.StatusServiceUnavailable},
		{"the request's own deadline", ended, fmt.Errorf("kv: get files/a: %w", context.DeadlineExceeded), http.StatusInternalServerError},
		{"a corrupt record", live, &kv.DecodeError{Bucket: "files", Key: "a", Err: errors.New("bad")}, http.StatusInternalServerError},
		{"a conflict", live, kv.ErrConflict, http.StatusInternalServerError},
		{"anything else", live, errors.New("disk on fire"), http.StatusInternalServerError},
	} {
		e := StoreError(tc.ctx, tc.err, "file store", "The file could not be recorded.")
		rec := httptest.NewRecorder()
		contracts.Write(rec, e)
		var body struct {
			Error struct {
				Message, Type, Code string
			}
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rec.Code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body, tc.want)
			continue
		}
		if strings.Contains(rec.Body.String(), tc.err.Error()) {
			t.Errorf("%s: the answer shows the error: %s", tc.name, rec.Body)
		}
		switch tc.want {
		case http.StatusServiceUnavailable:
			if body.Error.Code != contracts.CodeServiceUnavailable || body.Error.Type != contracts.TypeServer ||
				!strings.HasPrefix(body.Error.Message, "The file store is unavailable for a moment") || rec.Header().Get("Retry-After") != "2" {
				t.Errorf("%s: %s Retry-After %q", tc.name, rec.Body, rec.Header().Get("Retry-After"))
			}
		default:
			if body.Error.Code != contracts.CodeInternal || body.Error.Message != "The file could not be recorded." || rec.Header().Get("Retry-After") != "" {
				t.Errorf("%s: %s Retry-After %q", tc.name, rec.Body, rec.Header().Get("Retry-After"))
			}
		}
	}
}
