package kv

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestThroughElectionRetriesOnlyLeaderless: a write no leader answered is
// tried again until it is answered; any other error ends it at once.
func TestThroughElectionRetriesOnlyLeaderless(t *testing.T) {
	calls := 0
	retried, err := throughElection(context.Background(), func() error {
		calls++
		if calls < 3 {
			return jetstream.ErrNoStreamResponse
		}
		return nil
	})
	if err != nil || !retried || calls != 3 {
		t.Fatalf("leaderless twice: retried %v, err %v, %d calls", retried, err, calls)
	}
	other := errors.New("wrong last sequence")
	calls = 0
	retried, err = throughElection(context.Background(), func() error { calls++; return other })
	if !errors.Is(err, other) || retried || calls != 1 {
		t.Fatalf("another error: retried %v, err %v, %d calls", retried, err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	_, err = throughElection(ctx, func() error {
		calls++
		cancel()
		return jetstream.ErrNoStreamResponse
	})
	if !errors.Is(err, jetstream.ErrNoStreamResponse) || calls != 1 {
		t.Fatalf("cancelled: err %v, %d calls", err, calls)
	}
}
