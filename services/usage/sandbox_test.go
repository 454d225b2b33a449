package usage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/query"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/spend"
)

func sandboxExec(i int, tenant, key string, at time.Time, wallMS, cpuMS, mib int64, errCode string) events.SandboxUsageV1 {
	u := events.SandboxUsageV1{
		ID: fmt.Sprintf("sbx-%06d", i), Tenant: tenant, KeyID: key, ContainerID: "cntr_" + tenant, Kind: events.SandboxUsageExec,
		Language: "python", Status: events.UsageStatusOK, WallMS: wallMS, CPUMS: cpuMS, MemoryLimitBytes: mib << 20,
		MemoryPeakBytes: mib << 18, GBSeconds: float64(mib) / 1024 * float64(wallMS) / 1000, Warm: i%2 == 0, Node: "n1",
		StartedAt: at, FinishedAt: at.Add(time.Duration(wallMS) * time.Millisecond),
	}
	if errCode != "" {
		u.Status, u.ErrorCode, u.ExitCode = events.UsageStatusError, errCode, -1
	}
	return u
}

// Sandbox usage (SandboxUsageV1) folds exactly once by event id into the
// tenant's and key's sandbox buckets, costed at the sandbox price and
// settled into budgets; the code_interpreter_sessions report and the costs'
// code interpreter line item show it; other unknown types stay ignored and
// an invalid sandbox event is counted as invalid; a restart from the
// (version 4) snapshot gives the same ledger, and the audit's replay agrees.
func TestSandboxUsage(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	ctx := context.Background()
	price := registry.Price{EffectiveFrom: h.base.Add(-24 * time.Hour), PerGBSecondUSD: 0.0001, PerSessionUSD: 0.01}
	if _, err := h.store.SetPrice(ctx, registry.SandboxPriceModel, price); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.UpdateTenantLimits(ctx, "acme", func(l *registry.Limits) {
		l.MaxBudgetUSD, l.BudgetPeriod = 1e6, spend.PeriodMonthly
	}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{SnapshotEvery: 50, SnapshotInterval: time.Hour}

	var pubs []pub
	want := map[string]ledger.Counters{} // tenant → sandbox totals
	spent := map[string]int64{}          // budget entry → nano
	at0 := h.base.Add(30 * time.Hour)
	for i := range 300 {
		tenant, key := "acme", "key_a"
		if i%3 == 2 {
			tenant, key = "beta", "key_b"
		}
		at := at0.Add(time.Duration(i) * 11 * time.Second)
		var u events.SandboxUsageV1
		var c ledger.Counters
		if i%25 == 24 {
			// a container that ended: its whole life since at0
			end := at.Add(time.Second)
			u = events.SandboxUsageV1{ID: fmt.Sprintf("sbx-%06d", i), Tenant: tenant, KeyID: key, ContainerID: fmt.Sprintf("cntr_%d", i),
				Kind: events.SandboxUsageContainer, Status: events.UsageStatusOK, WallMS: end.Sub(at0).Milliseconds(), MemoryLimitBytes: 1 << 30,
				GBSeconds: end.Sub(at0).Seconds(), Node: "n1", StartedAt: at0, FinishedAt: end}
			gb := int64(math.Round(u.GBSeconds * 1e6))
			c = ledger.Counters{SandboxSessions: 1, SandboxSessionMS: u.WallMS, SandboxSessionMicroGBSeconds: gb, CostNano: 10_000_000}
		} else {
			errCode := ""
			if i%10 == 3 {
				errCode = "exec_timeout"
			}
			u = sandboxExec(i, tenant, key, at, int64(100+i*7), int64(50+i), int64(256<<(i%3)), errCode)
			gb := int64(math.Round(u.GBSeconds * 1e6))
			c = ledger.Counters{SandboxExecs: 1, SandboxWallMS: u.WallMS, SandboxCPUMS: u.CPUMS, SandboxMicroGBSeconds: gb,
				CostNano: int64(math.Round(float64(gb) * price.PerGBSecondUSD * 1e3))}
			if errCode != "" {
				c.SandboxErrors = 1
			}
		}
		w := want[tenant]
		w.Add(c)
		want[tenant] = w
		if tenant == "acme" {
			spent[spend.TenantEntry("acme", spend.PeriodID(spend.PeriodMonthly, ledger.SandboxTime(&u)))] += c.CostNano
		}
		pubs = append(pubs, pub{ev: u, id: u.ID})
		// republished by a sandbox replica that retried past JetStream's
		// duplicate window: another Nats-Msg-Id, the same event id
		if i%7 == 0 {
			pubs = append(pubs, pub{ev: u, id: u.ID, msgID: u.ID + "-retry"})
		}
	}
	// token usage beside it
	tok := recorded(h, 1, "acme", "key_a", "m1", events.EndpointChatCompletions, at0, 1000, 0, 100, events.UsageStatusOK)
	pubs = append(pubs, pub{ev: events.UsageRecordedV2{UsageRecordedV1: tok}, id: tok.RequestID})
	if n := h.publish(pubs); n != len(pubs) {
		t.Fatalf("stored %d of %d", n, len(pubs))
	}
	// An event type this service does not know, and a sandbox event that
	// does not validate, on the USAGE stream.
	for _, raw := range []struct{ subject, typ, id, body string }{
		{"aiforge.usage.future.v1.acme", "aiforge.usage.future.v1", "fut-1", `{"anything":1}`},
		{"aiforge.usage.sandbox.v1.acme", events.TypeSandboxUsageV1, "bad-1", `{"id":"bad-1","tenant":"acme","kind":"bogus"}`},
	} {
		m := nats.NewMsg(raw.subject)
		m.Header.Set(events.HeaderType, raw.typ)
		m.Header.Set(events.HeaderID, raw.id)
		m.Header.Set(nats.MsgIdHdr, raw.id)
		m.Data = []byte(raw.body)
		if _, err := h.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	last := h.lastSeq()

	r := h.start(cfg, nil)
	waitFolded(t, r.svc, last)
	got := map[string]ledger.Counters{}
	var snap []byte
	r.svc.Ledger(func(l *ledger.Ledger) {
		for _, b := range l.Buckets(time.Time{}, time.Time{}, "") {
			if b.Endpoint != ledger.EndpointSandbox {
				continue
			}
			c := got[b.Tenant]
			c.Add(b.Counters)
			got[b.Tenant] = c
		}
		snap, _ = l.MarshalJSON()
	})
	for tenant, w := range want {
		if got[tenant] != w {
			t.Fatalf("%s folded %+v,\nwant %+v", tenant, got[tenant], w)
		}
	}
	if !bytes.HasPrefix(snap, []byte(`{"version":4,`)) {
		t.Fatalf("a ledger with sandbox buckets writes %.20s", snap)
	}
	dups := 0
	for i := range 300 {
		if i%7 == 0 {
			dups++
		}
	}
	if ig, inv, dup := testutil.ToFloat64(r.svc.m.ignored), testutil.ToFloat64(r.svc.m.invalid), testutil.ToFloat64(r.svc.m.duplicate); ig != 1 || inv != 1 || dup != float64(dups) {
		t.Fatalf("ignored %v, invalid %v, duplicates %v; want 1, 1, %d", ig, inv, dup, dups)
	}

	// The report over the bus.
	page := func(op, q string) []byte {
		b := h.query(query.UsageRequest{Op: op, Query: q})
		if _, _, failed := query.UsageFailure(b); failed {
			t.Fatalf("%s %s: %s", op, q, b)
		}
		return b
	}
	var ci ledger.Page[ledger.CodeInterpreterSessionsResult]
	if err := json.Unmarshal(page(query.OpCodeInterpreterSessions, fmt.Sprintf("start_time=%d&group_by=project_id", h.base.Unix())), &ci); err != nil {
		t.Fatal(err)
	}
	rep := map[string]ledger.CodeInterpreterSessionsResult{}
	for _, tb := range ci.Data {
		for _, res := range tb.Results {
			if res.Object != "organization.usage.code_interpreter_sessions.result" || res.ProjectID == nil || res.APIKeyID != nil {
				t.Fatalf("result %+v", res)
			}
			s := rep[*res.ProjectID]
			s.NumSessions += res.NumSessions
			s.NumExecs += res.NumExecs
			s.NumExecErrors += res.NumExecErrors
			s.GBSeconds += res.GBSeconds
			rep[*res.ProjectID] = s
		}
	}
	for tenant, w := range want {
		s := rep[tenant]
		if s.NumSessions != w.SandboxSessions || s.NumExecs != w.SandboxExecs || s.NumExecErrors != w.SandboxErrors ||
			math.Abs(s.GBSeconds-float64(w.SandboxMicroGBSeconds)/1e6) > 1e-6 {
			t.Fatalf("%s report %+v, want %+v", tenant, s, w)
		}
	}
	var costs ledger.Page[ledger.CostsResult]
	if err := json.Unmarshal(page(query.OpCosts, fmt.Sprintf("start_time=%d&group_by=line_item&project_ids=acme", h.base.Unix())), &costs); err != nil {
		t.Fatal(err)
	}
	var ciCost float64
	for _, tb := range costs.Data {
		for _, res := range tb.Results {
			if *res.LineItem == ledger.SandboxLineItem {
				ciCost += res.Amount.Value
			}
		}
	}
	if d := ciCost - float64(want["acme"].CostNano)/1e9; math.Abs(d) > 1e-9 || ciCost == 0 {
		t.Fatalf("code interpreter cost %v, want %v", ciCost, float64(want["acme"].CostNano)/1e9)
	}

	// The audit replays the stream, copies and strangers included, and agrees.
	audit := h.audit(h.base, h.base.Add(72*time.Hour))
	if len(audit.Differences) != 0 || audit.EventsReplayed != int64(last) || audit.BucketsCompared == 0 {
		t.Fatalf("audit: %d differences over %d buckets, %d events replayed (want %d)", len(audit.Differences), audit.BucketsCompared, audit.EventsReplayed, last)
	}

	// Stopping settles everything folded: the sandbox spend is in the
	// tenant's budget (with the one request's).
	r.stop(t)
	kv, err := h.js.KeyValue(ctx, events.BucketBudgets)
	if err != nil {
		t.Fatal(err)
	}
	spent[spend.TenantEntry("acme", spend.PeriodID(spend.PeriodMonthly, at0))] += h.cost("m1", at0, 1000, 0, 100, 1)
	for entry, w := range spent {
		e, err := spend.Get(ctx, kv, entry)
		if err != nil {
			t.Fatal(err)
		}
		if e.SpentNano != w {
			t.Fatalf("%s: spent %d, want %d", entry, e.SpentNano, w)
		}
	}

	// A restart from the snapshot gives the same ledger.
	var before *ledger.Ledger
	r.svc.Ledger(func(l *ledger.Ledger) { before = l.Clone(time.Time{}, time.Time{}, "", true) })
	r2 := h.start(cfg, nil)
	var same bool
	r2.svc.Ledger(func(l *ledger.Ledger) { same = ledger.Equal(before, l) })
	if !same {
		t.Fatal("the ledger loaded from the snapshot differs from the one saved")
	}
}
