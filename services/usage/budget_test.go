package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/spend"
)

// hold is the reservation an edge makes for request id.
func hold(id string, nano int64) spend.Hold {
	return spend.Hold{ID: id, NanoUSD: nano, ExpiresUnixMS: time.Now().Add(spend.DefaultHoldTTL).UnixMilli()}
}

// Settlement: every V2 event's cost lands in its key's and tenant's budget
// entry of the period of its StartedAt and releases its reservations; a
// replay after a crash, or from the very start, settles nothing twice; the
// soft budget alert goes out once per entry and period.
func TestBudgetSettlement(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	ctx := context.Background()
	if _, err := h.store.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.UpdateTenantLimits(ctx, "acme", func(l *registry.Limits) {
		l.MaxBudgetUSD, l.BudgetPeriod, l.SoftBudgetUSD = 1000, spend.PeriodDaily, 1
	}); err != nil {
		t.Fatal(err)
	}
	k1, _, err := h.store.CreateKey(ctx, "acme", "budgeted", nil,
		registry.Limits{MaxBudgetUSD: 500, BudgetPeriod: spend.PeriodDaily, SoftBudgetUSD: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	k2, _, err := h.store.CreateKey(ctx, "acme", "unbudgeted", nil, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := h.js.KeyValue(ctx, events.BucketBudgets)
	if err != nil {
		t.Fatal(err)
	}

	day0, day1 := h.base, h.base.Add(24*time.Hour)
	keyEntry := func(key string, day time.Time) string {
		return spend.KeyEntry(key, spend.PeriodID(spend.PeriodDaily, day))
	}
	tenantEntry := func(day time.Time) string { return spend.TenantEntry("acme", spend.PeriodID(spend.PeriodDaily, day)) }
	const reserve = 20_000_000 // $0.02 set aside per request by the "edge"
	want := map[string]spend.Entry{}
	add := func(entry string, spent int64) {
		e := want[entry]
		e.SpentNano += spent
		want[entry] = e
	}

	var pubs []pub
	for i := range 400 {
		day := day0
		if i >= 200 {
			day = day1
		}
		key := k1.ID
		if i%2 == 1 {
			key = k2.ID
		}
		at := day.Add(time.Hour + time.Duration(i%200)*time.Minute)
		u := recorded(h, i, "acme", key, "m1", events.EndpointChatCompletions, at, 1000, 0, 500, "ok")
		var res []events.Reservation
		var limits []spend.Limit
		if key == k1.ID {
			res = append(res, events.Reservation{Key: keyEntry(key, day), NanoUSD: reserve})
			limits = append(limits, spend.Limit{Key: keyEntry(key, day), LimitNano: spend.USDToNano(500)})
			add(keyEntry(key, day), h.cost("m1", at, 1000, 0, 500, 1))
		}
		res = append(res, events.Reservation{Key: tenantEntry(day), NanoUSD: reserve})
		limits = append(limits, spend.Limit{Key: tenantEntry(day), LimitNano: spend.USDToNano(1000)})
		add(tenantEntry(day), h.cost("m1", at, 1000, 0, 500, 1))
		if _, err := spend.Reserve(ctx, kv, limits, hold(u.RequestID, reserve), reserve, time.Now()); err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, pub{ev: events.UsageRecordedV2{UsageRecordedV1: u, Reservations: res}, id: u.RequestID})
	}
	// A request admitted just before midnight (its reservations are in
	// day 0's entries) that started just after: its cost goes to day 1,
	// day 0's reservations are released.
	crossAt := day1.Add(500 * time.Millisecond)
	u := recorded(h, 999, "acme", k1.ID, "m1", events.EndpointChatCompletions, crossAt, 1000, 0, 500, "ok")
	res := []events.Reservation{{Key: keyEntry(k1.ID, day0), NanoUSD: reserve}, {Key: tenantEntry(day0), NanoUSD: reserve}}
	if _, err := spend.Reserve(ctx, kv, []spend.Limit{{Key: keyEntry(k1.ID, day0), LimitNano: spend.USDToNano(500)},
		{Key: tenantEntry(day0), LimitNano: spend.USDToNano(1000)}}, hold(u.RequestID, reserve), reserve, time.Now()); err != nil {
		t.Fatal(err)
	}
	add(keyEntry(k1.ID, day1), h.cost("m1", crossAt, 1000, 0, 500, 1))
	add(tenantEntry(day1), h.cost("m1", crossAt, 1000, 0, 500, 1))
	pubs = append(pubs, pub{ev: events.UsageRecordedV2{UsageRecordedV1: u, Reservations: res}, id: u.RequestID})
	// A V1 event costs money in the ledger but is not settled (SettleV1 off).
	v1 := recorded(h, 1000, "acme", k1.ID, "m1", events.EndpointChatCompletions, day0.Add(time.Hour), 1000, 0, 500, "ok")
	pubs = append(pubs, pub{ev: v1, id: v1.RequestID})
	h.publish(pubs)
	last := h.lastSeq()

	check := func(stage string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			diff := ""
			for entry, w := range want {
				e, err := spend.Get(ctx, kv, entry)
				if err != nil {
					t.Fatal(err)
				}
				if e.SpentNano != w.SpentNano || e.ReservedNano != 0 {
					diff += fmt.Sprintf("\n  %s: spent %d reserved %d, want spent %d reserved 0", entry, e.SpentNano, e.ReservedNano, w.SpentNano)
				}
			}
			if diff == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s:%s", stage, diff)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, day := range []time.Time{day0, day1} {
			if _, err := kv.Get(ctx, keyEntry(k2.ID, day)); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("%s: an entry was settled for a key without budget or reservation: %v", stage, err)
			}
		}
	}

	// Crash in the middle, after a few snapshots, with settlement ahead
	// of the last snapshot (the worst case: the replay must skip what was
	// settled after the checkpoint).
	var crashed sync.Once
	var snapAt, settledAt uint64
	r1 := h.start(Config{SnapshotEvery: 50, SnapshotInterval: time.Hour}, func(s *Service, cancel context.CancelFunc) {
		s.skipFinalSnapshot = true
		s.foldedHook = func(seq uint64) {
			if seq >= 230 {
				crashed.Do(func() {
					if err := s.flushSettlement(ctx); err != nil {
						t.Error(err)
					}
					if err := s.settler.barrier(ctx); err != nil {
						t.Error(err)
					}
					snapAt, settledAt = s.snapSeq, s.settler.settledSeq()
					cancel()
				})
			}
		}
	})
	r1.wait(t)
	if snapAt == 0 || settledAt <= snapAt {
		t.Fatalf("crash setup: snapshot at %d, settled to %d", snapAt, settledAt)
	}
	// Restart from the snapshot.
	r2 := h.start(Config{}, nil)
	waitFolded(t, r2.svc, last)
	check("after restart")
	r2.stop(t)

	// Replay everything from the start (snapshot deleted): Settle skips
	// every sequence it saw.
	if err := r2.svc.obs.Delete(ctx, DefaultSnapshotObject); err != nil {
		t.Fatal(err)
	}
	r3 := h.start(Config{}, nil)
	waitFolded(t, r3.svc, last)
	r3.stop(t) // final barrier: all settled
	check("after a full replay")

	// One alert per soft budget and day: key day 0, key day 1, tenant
	// day 0, tenant day 1.
	st, err := h.js.Stream(ctx, events.StreamBudget)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var a events.BudgetAlertV1
		if err := json.Unmarshal(m.Data, &a); err != nil {
			t.Fatal(err)
		}
		if m.Subject != events.Subject(events.TypeBudgetAlertV1, "acme") || m.Header.Get(events.HeaderType) != events.TypeBudgetAlertV1 || a.SpentUSD < a.SoftBudgetUSD {
			t.Fatalf("alert %s %+v", m.Subject, a)
		}
		alerts[a.Scope+"/"+a.ID+"/"+a.PeriodID]++
	}
	wantAlerts := map[string]int{
		"key/" + k1.ID + "/" + spend.PeriodID(spend.PeriodDaily, day0): 1,
		"key/" + k1.ID + "/" + spend.PeriodID(spend.PeriodDaily, day1): 1,
		"tenant/acme/" + spend.PeriodID(spend.PeriodDaily, day0):       1,
		"tenant/acme/" + spend.PeriodID(spend.PeriodDaily, day1):       1,
	}
	if fmt.Sprint(alerts) != fmt.Sprint(wantAlerts) {
		t.Fatalf("alerts %v, want %v", alerts, wantAlerts)
	}
	for entry := range want {
		if e, _ := spend.Get(ctx, kv, entry); !e.SoftAlerted {
			t.Fatalf("%s: soft alert not marked", entry)
		}
	}
}
