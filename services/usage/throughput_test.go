package usage

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/spend"
)

// figures are the throughput of one run.
type figures struct {
	events                          int
	publishPerSec                   float64
	foldPerSec, foldBudgetPerSec    float64
	settledPerSec                   float64 // folded and every settlement written
	auditPerSec                     float64
	auditDifferences, auditReplayed int64
}

func (f figures) String() string {
	return fmt.Sprintf("%d events (GOMAXPROCS from the environment; race detector %v):\n"+
		"  publish (async, acked)        %10.0f events/s\n"+
		"  fold, no budgets              %10.0f events/s   (target 50000)\n"+
		"  fold, budgets + reservations  %10.0f events/s   ratio to no budgets %.2f\n"+
		"    ... and settlement written  %10.0f events/s   ratio to no budgets %.2f\n"+
		"  audit replay                  %10.0f events/s   (target 100000) ratio to fold %.2f; %d replayed, %d differences",
		f.events, raceEnabled, f.publishPerSec, f.foldPerSec, f.foldBudgetPerSec, f.foldBudgetPerSec/f.foldPerSec,
		f.settledPerSec, f.settledPerSec/f.foldPerSec, f.auditPerSec, f.auditPerSec/f.foldPerSec, f.auditReplayed, f.auditDifferences)
}

// measure publishes n usage events (every one a V2 with reservations on
// its key's and tenant's budget entries) and times folding them without
// and with budgets, and an audit replaying them.
func measure(t testing.TB, n int) figures {
	h := newHarness(t)
	h.setPrices()
	ctx := context.Background()
	h.keyIDs = map[string][2]string{}
	for _, tenant := range []string{"alpha", "beta", "gamma"} {
		if _, err := h.store.CreateTenant(ctx, tenant); err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.UpdateTenantLimits(ctx, tenant, func(l *registry.Limits) {
			l.MaxBudgetUSD, l.BudgetPeriod, l.SoftBudgetUSD = 1e6, spend.PeriodDaily, 10
		}); err != nil {
			t.Fatal(err)
		}
		var ids [2]string
		for i := range ids {
			k, _, err := h.store.CreateKey(ctx, tenant, fmt.Sprint("k", i), nil,
				registry.Limits{MaxBudgetUSD: 1e5, BudgetPeriod: spend.PeriodDaily, SoftBudgetUSD: 5})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = k.ID
		}
		h.keyIDs[tenant] = ids
	}
	pubs := h.mixed(n)
	for i, p := range pubs {
		var u events.UsageRecordedV1
		switch e := p.ev.(type) {
		case events.UsageRecordedV1:
			u = e
		case events.UsageRecordedV2:
			u = e.UsageRecordedV1
		}
		day := spend.PeriodID(spend.PeriodDaily, u.StartedAt)
		pubs[i].ev = events.UsageRecordedV2{UsageRecordedV1: u, Reservations: []events.Reservation{
			{Key: spend.KeyEntry(u.KeyID, day), NanoUSD: 1_000_000}, {Key: spend.TenantEntry(u.Tenant, day), NanoUSD: 1_000_000}}}
	}
	var f figures
	f.events = n
	t0 := time.Now()
	h.publish(pubs)
	f.publishPerSec = float64(n) / time.Since(t0).Seconds()
	last := h.lastSeq()

	// Warm up (the store's caches, the heap) with one unmeasured replay,
	// so the first measured fold is not penalised by coming first.
	if _, err := replay(ctx, h.js, time.Time{}, last, DefaultFetchBatch, time.Minute, func(uint64, string, events.Event) {}); err != nil {
		t.Fatal(err)
	}

	// Without budgets.
	a := h.start(Config{DisableSettlement: true, SnapshotBucket: "bench_plain"}, nil)
	t0 = time.Now()
	waitFolded(t, a.svc, last)
	f.foldPerSec = float64(n) / time.Since(t0).Seconds()
	rep, err := a.svc.Audit(ctx, h.base, h.base.Add(48*time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	f.auditPerSec, f.auditReplayed, f.auditDifferences = rep.EventsPerSecond, rep.EventsReplayed, int64(len(rep.Differences))
	a.stop(t)

	// With budgets: every event settles two entries and releases two
	// reservations.
	b := h.start(Config{SnapshotBucket: "bench_budgets"}, nil)
	t0 = time.Now()
	waitFolded(t, b.svc, last)
	f.foldBudgetPerSec = float64(n) / time.Since(t0).Seconds()
	deadline := time.Now().Add(2 * time.Minute)
	for b.svc.settler.settledSeq() < last {
		if time.Now().After(deadline) {
			t.Fatalf("settled %d of %d", b.svc.settler.settledSeq(), last)
		}
		time.Sleep(time.Millisecond)
	}
	f.settledPerSec = float64(n) / time.Since(t0).Seconds()
	b.stop(t)

	// Settlement is complete and exact: the tenants' entries hold the
	// ledger's cost, nothing stays reserved.
	kv, err := h.js.KeyValue(ctx, events.BucketBudgets)
	if err != nil {
		t.Fatal(err)
	}
	var spent, reserved int64
	for _, tenant := range []string{"alpha", "beta", "gamma"} {
		for _, day := range []time.Time{h.base, h.base.Add(24 * time.Hour)} {
			e, err := spend.Get(ctx, kv, spend.TenantEntry(tenant, spend.PeriodID(spend.PeriodDaily, day)))
			if err != nil {
				t.Fatal(err)
			}
			spent += e.SpentNano
			reserved += e.ReservedNano
		}
	}
	if want := h.expected(pubs, nil).CostNano; spent != want || reserved != 0 {
		t.Fatalf("tenant entries: spent %d reserved %d, want spent %d reserved 0", spent, reserved, want)
	}
	return f
}

// TestThroughput prints the figures (go test -v -run Throughput): 100,000
// events, 10,000 under the race detector. It asserts correctness only,
// never timing.
func TestThroughput(t *testing.T) {
	n := 100_000
	if raceEnabled || testing.Short() {
		n = 10_000
	}
	f := measure(t, n)
	if f.auditDifferences != 0 || f.auditReplayed < int64(n) {
		t.Fatalf("audit: %d replayed, %d differences", f.auditReplayed, f.auditDifferences)
	}
	t.Log(f)
}

// BenchmarkThroughput is TestThroughput as a benchmark:
// go test -run '^$' -bench Throughput -benchtime 1x ./services/usage/
func BenchmarkThroughput(b *testing.B) {
	for range b.N {
		f := measure(b, 100_000)
		b.ReportMetric(f.foldPerSec, "fold-events/s")
		b.ReportMetric(f.foldBudgetPerSec, "fold-budget-events/s")
		b.ReportMetric(f.settledPerSec, "settled-events/s")
		b.ReportMetric(f.auditPerSec, "audit-events/s")
		b.Log(f)
	}
}
