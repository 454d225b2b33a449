package kv

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestBackoffBounds(t *testing.T) {
	r := Retry{Attempts: 100, MinBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	for attempt := 1; attempt <= 100; attempt++ {
		ceil := min(r.MaxBackoff, r.MinBackoff<<min(attempt-1, 20))
		for range 20 {
			if d := r.backoff(attempt); d < 0 || d >= ceil {
				t.Fatalf("backoff(%d) = %v, want in [0, %v)", attempt, d, ceil)
			}
		}
	}
	if d := (Retry{}).backoff(3); d != 0 {
		t.Fatalf("zero Retry backs off %v", d)
	}
}

func TestIsCASLoss(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{jetstream.ErrKeyExists, true},
		{fmt.Errorf("update: %w", jetstream.ErrKeyRevisionMismatch), true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Code: 400}, true},
		// What a replicated (R3) bucket answers.
		{fmt.Errorf("x: %w", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Code: 400}), true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamNotFound, Code: 404}, false},
		{errors.New("timeout"), false},
		{jetstream.ErrKeyNotFound, false},
	} {
		if got := isCASLoss(tc.err); got != tc.want {
			t.Errorf("isCASLoss(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
