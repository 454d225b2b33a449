package events

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestConsumerMetrics(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	reg := prometheus.NewRegistry()
	m, err := NewConsumerMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// A second service of the process gets the same metrics.
	if again, err := NewConsumerMetrics(reg); err != nil || again.messages != m.messages || again.lag != m.lag {
		t.Fatalf("second NewConsumerMetrics: %v", err)
	}
	c := newConsumer(t, js, ConsumerConfig{Durable: "usage-ledger", MaxDeliver: 2, Metrics: m},
		func(_ context.Context, env Envelope, _ Event) error {
			if env.ID == "bad" {
				return errors.New("always fails")
			}
			return nil
		})
	for _, id := range []string{"ok-1", "ok-2", "bad"} {
		if _, err := Publish(ctx, js, usage(len(id)), Envelope{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	start(t, c)
	eventually(t, "dead-lettered", func() bool {
		return testutil.ToFloat64(m.messages.WithLabelValues("usage-ledger", OutcomeDeadLettered)) == 1
	})
	if h := testutil.ToFloat64(m.messages.WithLabelValues("usage-ledger", OutcomeHandled)); h != 2 {
		t.Errorf("handled %v, want 2", h)
	}
	if r := testutil.ToFloat64(m.messages.WithLabelValues("usage-ledger", OutcomeRetried)); r != 1 {
		t.Errorf("retried %v, want 1", r)
	}
	if n := testutil.CollectAndCount(m.lag, "aiforge_consumer_lag_seconds"); n != 1 {
		t.Errorf("lag series %d", n)
	}
	// The last delivery (the bad one's redelivery) had nothing behind it.
	if p := testutil.ToFloat64(m.pending.WithLabelValues("usage-ledger")); p != 0 {
		t.Errorf("pending %v", p)
	}
}
