package spend

import (
	"context"
	"errors"
	"fmt"
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

// t0 is the clock of the reservation tests; holds expire a minute after.
var t0 = time.Date(2026, 11, 29, 17, 5, 0, 0, time.UTC)

func hold(id string, nano int64) Hold {
	return Hold{ID: id, NanoUSD: nano, ExpiresUnixMS: t0.Add(time.Minute).UnixMilli()}
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
			_, err := Reserve(ctx, kv, []Limit{{Key: "k.a.total", LimitNano: limit}}, hold(fmt.Sprint(i), amount), amount, t0)
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
	_, err := Reserve(ctx, kv, []Limit{{Key: "k.a.total", LimitNano: 100}, {Key: "t.acme.total", LimitNano: 10}}, hold("r1", 50), 50, t0)
	var be *BudgetError
	if !errors.Is(err, ErrBudgetExceeded) || !errors.As(err, &be) || be.Key != "t.acme.total" || be.RemainingNano != 10 {
		t.Fatalf("err = %v", err)
	}
	if e, _ := Get(ctx, kv, "k.a.total"); e.ReservedNano != 0 || len(e.Holds) != 0 {
		t.Fatalf("first budget kept %d reserved", e.ReservedNano)
	}
}

func TestSettleOncePerSequence(t *testing.T) {
	kv, _ := buckets(t)
	ctx := context.Background()
	if _, err := Reserve(ctx, kv, []Limit{{Key: "k.a.total", LimitNano: 1000}}, hold("r1", 100), 100, t0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // a replay settles the same sequence again
		if _, _, err := Settle(ctx, kv, "k.a.total", 7, 40, []string{"r1"}, t0); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := Get(ctx, kv, "k.a.total")
	if e.SpentNano != 40 || e.ReservedNano != 0 || e.LastSeq != 7 {
		t.Fatalf("entry = %+v", e)
	}
	// Spent at the limit: nothing more is admitted, even at zero cost.
	if _, _, err := Settle(ctx, kv, "k.a.total", 8, 960, nil, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := Reserve(ctx, kv, []Limit{{Key: "k.a.total", LimitNano: 1000}}, hold("r2", 0), 0, t0); !errors.Is(err, ErrBudgetExceeded) {
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

// TestReserveGrantsWhatIsLeft: a request that wants more than the budget
// has left is granted the rest when that covers its least; the grant is the
// same in every entry (the smaller budget decides), and a request whose
// least is not covered is refused with what was left.
func TestReserveGrantsWhatIsLeft(t *testing.T) {
	kv, _ := buckets(t)
	ctx := context.Background()
	limits := []Limit{{Key: "k.a.total", LimitNano: 1000}, {Key: "t.acme.total", LimitNano: 300}}
	got, err := Reserve(ctx, kv, limits, hold("r1", 5000), 100, t0)
	if err != nil || got != 300 {
		t.Fatalf("grant %d, %v; want 300", got, err)
	}
	for _, l := range limits {
		if e, _ := Get(ctx, kv, l.Key); e.ReservedNano != 300 || len(e.Holds) != 1 || e.Holds[0].NanoUSD != 300 {
			t.Fatalf("%s = %+v", l.Key, e)
		}
	}
	_, err = Reserve(ctx, kv, limits, hold("r2", 5000), 1, t0)
	var be *BudgetError
	if !errors.As(err, &be) || be.RemainingNano != 0 || be.Key != "t.acme.total" {
		t.Fatalf("second reservation: %v", err)
	}
	if e, _ := Get(ctx, kv, "k.a.total"); e.ReservedNano != 300 {
		t.Fatalf("refusal kept a hold: %+v", e)
	}
	// Settling r1 at 120 leaves 180 for the next.
	for i, l := range limits {
		if _, _, err := Settle(ctx, kv, l.Key, uint64(i+1), 120, []string{"r1"}, t0); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := Reserve(ctx, kv, limits, hold("r3", 5000), 100, t0); err != nil || got != 180 {
		t.Fatalf("after settling: grant %d, %v", got, err)
	}
}

// TestHoldsExpire: holds of requests whose usage never arrives (their edge
// or worker was killed) stop counting at their deadline: the next
// admission after it is served. The clock is injected.
func TestHoldsExpire(t *testing.T) {
	kv, _ := buckets(t)
	ctx := context.Background()
	limits := []Limit{{Key: "k.a.total", LimitNano: 100}}
	for i := range 4 {
		if _, err := Reserve(ctx, kv, limits, hold(fmt.Sprint("crashed", i), 25), 25, t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Reserve(ctx, kv, limits, hold("next", 25), 1, t0.Add(59*time.Second)); !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("before expiry: %v", err)
	}
	if e, _ := Get(ctx, kv, limits[0].Key); e.Live(t0.Add(time.Minute)).ReservedNano != 0 || e.ReservedNano != 100 {
		t.Fatalf("Live = %+v of %+v", e.Live(t0.Add(time.Minute)), e)
	}
	later := t0.Add(time.Minute)
	h := Hold{ID: "next", NanoUSD: 25, ExpiresUnixMS: later.Add(time.Minute).UnixMilli()}
	if got, err := Reserve(ctx, kv, limits, h, 25, later); err != nil || got != 25 {
		t.Fatalf("after expiry: %d, %v", got, err)
	}
	e, _ := Get(ctx, kv, limits[0].Key)
	if e.ReservedNano != 25 || len(e.Holds) != 1 || e.Holds[0].ID != "next" {
		t.Fatalf("entry = %+v", e)
	}
	// A late usage event of an expired hold still counts its spend.
	if _, _, err := Settle(ctx, kv, limits[0].Key, 1, 10, []string{"crashed0"}, later); err != nil {
		t.Fatal(err)
	}
	if e, _ = Get(ctx, kv, limits[0].Key); e.SpentNano != 10 || e.ReservedNano != 25 {
		t.Fatalf("late settle: %+v", e)
	}
	if err := Release(ctx, kv, limits[0].Key, "next", later); err != nil {
		t.Fatal(err)
	}
	if e, _ = Get(ctx, kv, limits[0].Key); e.ReservedNano != 0 || e.Holds != nil {
		t.Fatalf("release: %+v", e)
	}
}

// TestConcurrentGrantsStayWithinBudget: 50 concurrent clients, each
// wanting more than the budget and settling less than it was granted,
// never take spend plus holds past the limit, and final spend stays within
// it.
func TestConcurrentGrantsStayWithinBudget(t *testing.T) {
	kv, _ := buckets(t)
	ctx := context.Background()
	const limit = 10_000
	limits := []Limit{{Key: "k.a.total", LimitNano: limit}}
	// The usage service settles in stream order: one settler, sequences
	// increasing.
	var settleMu sync.Mutex
	var seq uint64
	var served atomic.Int64
	var wg sync.WaitGroup
	for c := range 50 {
		wg.Go(func() {
			for r := 0; ; r++ {
				id := fmt.Sprintf("c%d-%d", c, r)
				got, err := Reserve(ctx, kv, limits, hold(id, 700), 50, t0)
				if errors.Is(err, ErrBudgetExceeded) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				served.Add(1)
				cost := got * 3 / 4 // the answer used three quarters of its cap
				settleMu.Lock()
				seq++
				_, _, err = Settle(ctx, kv, limits[0].Key, seq, cost, []string{id}, t0)
				settleMu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				e, _ := Get(ctx, kv, limits[0].Key)
				if AddSat(e.SpentNano, e.ReservedNano) > limit {
					t.Errorf("spent %d + reserved %d > %d", e.SpentNano, e.ReservedNano, limit)
				}
			}
		})
	}
	wg.Wait()
	e, _ := Get(ctx, kv, limits[0].Key)
	t.Logf("served %d, spent %d of %d", served.Load(), e.SpentNano, limit)
	if e.SpentNano > limit || e.ReservedNano != 0 || limit-e.SpentNano >= 50 {
		t.Fatalf("entry %+v after the clients were refused", e)
	}
}
