package spend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
)

func buckets(t *testing.T) (budgets, rates jetstream.KeyValue) {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	budgets, _ = js.KeyValue(ctx, events.BucketBudgets)
	rates, _ = js.KeyValue(ctx, events.BucketRateLimits)
	return budgets, rates
}

func TestPeriods(t *testing.T) {
	at := time.Date(2026, 11, 29, 17, 5, 0, 0, time.UTC) // a Sunday
	cases := []struct {
		period, id string
		end        time.Time
	}{
		{PeriodDaily, "d20261129", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
		{PeriodWeekly, "w2026-48", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
		{PeriodMonthly, "m202611", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{PeriodTotal, "total", time.Time{}},
		{"", "total", time.Time{}},
	}
	for _, c := range cases {
		if got := PeriodID(c.period, at); got != c.id {
			t.Errorf("PeriodID(%q) = %q, want %q", c.period, got, c.id)
		}
		if got := PeriodEnd(c.period, at); !got.Equal(c.end) {
			t.Errorf("PeriodEnd(%q) = %v, want %v", c.period, got, c.end)
		}
	}
	if !ValidPeriod("weekly") || ValidPeriod("hourly") {
		t.Fatal("ValidPeriod")
	}
	if USDToNano(1.5) != 1_500_000_000 || NanoToUSD(250_000_000) != 0.25 {
		t.Fatal("money conversion")
	}
}

// TestReserveNeverOvercommits: many concurrent reservations against one
// budget admit exactly as many as fit.
func TestReserveNeverOvercommits(t *testing.T) {
	kv, _ := buckets(t)
	ctx := context.Background()
	const limit, amount = 1000, 30 // room for 33
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := Reserve(ctx, kv, []Limit{{Key: "k.a.total", LimitNano: limit}}, amount)
			switch {
			case err == nil:
				ok.Add(1)
			case !errors.Is(err, ErrBudgetExceeded):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	e, _ := Get(ctx, kv, "k.a.total")
	if ok.Load() != limit/amount || e.ReservedNano != ok.Load()*amount {
		t.Fatalf("admitted %d, reserved %d; want %d admitted", ok.Load(), e.ReservedNano, limit/amount)
	}
}

func TestReserveRollsBackWhenASecondBudgetRefuses(t *testing.T) {
	kv, _ := buckets(t)
	ctx := context.Background()
	err := Reserve(ctx, kv, []Limit{{Key: "k.a.total", LimitNano: 100}, {Key: "t.acme.total", LimitNano: 10}}, 50)
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("err = %v", err)
	}
	if e, _ := Get(ctx, kv, "k.a.total"); e.ReservedNano != 0 {
		t.Fatalf("first budget kept %d reserved", e.ReservedNano)
	}
}

func TestSettleOncePerSequence(t *testing.T) {
	kv, _ := buckets(t)
	ctx := context.Background()
	if err := Reserve(ctx, kv, []Limit{{Key: "k.a.total", LimitNano: 1000}}, 100); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // a replay settles the same sequence again
		if _, _, err := Settle(ctx, kv, "k.a.total", 7, 40, 100); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := Get(ctx, kv, "k.a.total")
	if e.SpentNano != 40 || e.ReservedNano != 0 || e.LastSeq != 7 {
		t.Fatalf("entry = %+v", e)
	}
	// Spent at the limit: nothing more is admitted, even at zero cost.
	if _, _, err := Settle(ctx, kv, "k.a.total", 8, 960, 0); err != nil {
		t.Fatal(err)
	}
	if err := Reserve(ctx, kv, []Limit{{Key: "k.a.total", LimitNano: 1000}}, 0); !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("reserve at the limit: %v", err)
	}
	first, _ := MarkAlerted(ctx, kv, "k.a.total")
	second, _ := MarkAlerted(ctx, kv, "k.a.total")
	if !first || second {
		t.Fatalf("MarkAlerted = %v, %v", first, second)
	}
}

// TestAdmitIsExactAcrossReplicas: concurrent admissions (as from several
// edges) never admit more than RPM in one window.
func TestAdmitIsExactAcrossReplicas(t *testing.T) {
	_, kv := buckets(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 17, 5, 10, 0, time.UTC)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := Admit(ctx, kv, "key_1", RateLimit{RPM: 20}, 10, now)
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				admitted.Add(1)
			} else if d.Exceeded != "requests" || d.RemainingRequests != 0 || d.Reset != 50*time.Second {
				t.Errorf("refusal = %+v", d)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 20 {
		t.Fatalf("admitted %d, want 20", admitted.Load())
	}
	// The next minute starts over; tokens per minute are enforced too.
	d, err := Admit(ctx, kv, "key_1", RateLimit{RPM: 20, TPM: 100}, 60, now.Add(time.Minute))
	if err != nil || !d.Allowed || d.RemainingRequests != 19 || d.RemainingTokens != 40 {
		t.Fatalf("new window: %+v %v", d, err)
	}
	d, _ = Admit(ctx, kv, "key_1", RateLimit{RPM: 20, TPM: 100}, 60, now.Add(time.Minute))
	if d.Allowed || d.Exceeded != "tokens" {
		t.Fatalf("tpm not enforced: %+v", d)
	}
}
