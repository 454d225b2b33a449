package usage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/query"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/spend"
)

// Batch lines (UsageRecordedV3 with batch) fold exactly once by request id
// into batch buckets priced at the model's batch discount (not the
// endpoint discount), settle into the tenant's budget, show in the
// reports' batch filter and group, survive a restart from the snapshot,
// and the audit's replay recomputes them the same.
func TestBatchUsage(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	ctx := context.Background()
	quarter := 0.25
	mb := registry.Price{EffectiveFrom: h.base.Add(-24 * time.Hour), InputPerMTokUSD: 3, CachedInputPerMTokUSD: 1, OutputPerMTokUSD: 12, BatchDiscount: &quarter}
	if _, err := h.store.SetPrice(ctx, "mb", mb); err != nil {
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
	const rtDiscount = 0.8 // the endpoint discount: real-time requests only
	cfg := Config{Discounts: map[string]float64{events.EndpointChatCompletions: rtDiscount}, SnapshotEvery: 100, SnapshotInterval: time.Hour}

	costOf := func(model string, at time.Time, p, c, o int64, factor float64) int64 {
		if model == "mb" {
			return int64(math.Round((float64(p-c)*mb.InputPerMTokUSD*1000 + float64(c)*mb.CachedInputPerMTokUSD*1000 + float64(o)*mb.OutputPerMTokUSD*1000) * factor))
		}
		return h.cost(model, at, p, c, o, factor)
	}
	var pubs []pub
	var wantBatch, wantRT ledger.Counters
	spent := map[string]int64{} // tenant budget entry → nano
	at0 := h.base.Add(36 * time.Hour)
	for i := range 400 {
		model := "m1"
		factor := 0.5 // m1 has no BatchDiscount: the default, half price
		if i%3 == 0 {
			model, factor = "mb", 1-quarter
		}
		at := at0.Add(time.Duration(i) * 7 * time.Second)
		u := recorded(h, i, "acme", "key_a", model, events.EndpointChatCompletions, at, int64(100+i), int64(i%20), int64(30+i%50), events.UsageStatusOK)
		batch := i%4 != 0 // a quarter real-time, the rest batch lines
		var ev events.Event
		if batch {
			ev = events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: u}, Batch: true, BatchID: fmt.Sprintf("batch_%d", i%5)}
		} else {
			ev = events.UsageRecordedV2{UsageRecordedV1: u}
			factor = rtDiscount
		}
		c := costOf(model, at, u.PromptTokens, u.CachedPromptTokens, u.CompletionTokens, factor)
		w := &wantRT
		if batch {
			w = &wantBatch
		}
		w.Add(ledger.Counters{Requests: 1, InputTokens: u.PromptTokens, CachedInputTokens: u.CachedPromptTokens, OutputTokens: u.CompletionTokens, CostNano: c})
		spent[spend.TenantEntry("acme", spend.PeriodID(spend.PeriodMonthly, at))] += c
		pubs = append(pubs, pub{ev: ev, id: u.RequestID})
		// A line retried after a kill -9 of its worker: the same line
		// published again, past JetStream's duplicate window (another
		// Nats-Msg-Id); its ce-id is still the request id.
		if batch && i%10 == 1 {
			pubs = append(pubs, pub{ev: ev, id: u.RequestID, msgID: u.RequestID + "-retry"})
		}
	}
	if n := h.publish(pubs); n != len(pubs) {
		t.Fatalf("stored %d of %d", n, len(pubs))
	}
	last := h.lastSeq()

	r := h.start(cfg, nil)
	waitFolded(t, r.svc, last)
	var gotBatch, gotRT ledger.Counters
	var snap []byte
	r.svc.Ledger(func(l *ledger.Ledger) {
		for _, b := range l.Buckets(time.Time{}, time.Time{}, "") {
			if b.Batch {
				gotBatch.Add(b.Counters)
			} else {
				gotRT.Add(b.Counters)
			}
		}
		snap, _ = l.MarshalJSON()
	})
	if gotBatch != wantBatch || gotRT != wantRT {
		t.Fatalf("folded batch %+v, real-time %+v;\nwant batch %+v, real-time %+v", gotBatch, gotRT, wantBatch, wantRT)
	}
	if !bytes.HasPrefix(snap, []byte(`{"version":3,`)) {
		t.Fatalf("a ledger with batch buckets writes %.20s", snap)
	}

	// The reports: batch=true is the batch lines, group_by=batch splits.
	page := func(op, q string) []byte {
		b := h.query(query.UsageRequest{Op: op, Query: q})
		if _, _, failed := query.UsageFailure(b); failed {
			t.Fatalf("%s %s: %s", op, q, b)
		}
		return b
	}
	var comp ledger.Page[ledger.CompletionsResult]
	if err := json.Unmarshal(page(query.OpCompletions, fmt.Sprintf("start_time=%d&batch=true&bucket_width=1d", h.base.Unix())), &comp); err != nil {
		t.Fatal(err)
	}
	var n, in int64
	for _, tb := range comp.Data {
		for _, res := range tb.Results {
			n += res.NumModelRequests
			in += res.InputTokens
		}
	}
	if n != wantBatch.Requests || in != wantBatch.InputTokens {
		t.Fatalf("batch=true: %d requests, %d input tokens; want %d, %d", n, in, wantBatch.Requests, wantBatch.InputTokens)
	}
	comp = ledger.Page[ledger.CompletionsResult]{}
	if err := json.Unmarshal(page(query.OpCompletions, fmt.Sprintf("start_time=%d&group_by=batch&bucket_width=1d", h.base.Unix())), &comp); err != nil {
		t.Fatal(err)
	}
	split := map[bool]int64{}
	for _, tb := range comp.Data {
		for _, res := range tb.Results {
			if res.Batch == nil {
				t.Fatalf("group_by=batch: batch is null: %+v", res)
			}
			split[*res.Batch] += res.NumModelRequests
		}
	}
	if split[true] != wantBatch.Requests || split[false] != wantRT.Requests {
		t.Fatalf("group_by=batch: %v", split)
	}
	var costs ledger.Page[ledger.CostsResult]
	if err := json.Unmarshal(page(query.OpCosts, fmt.Sprintf("start_time=%d&group_by=line_item", h.base.Unix())), &costs); err != nil {
		t.Fatal(err)
	}
	items := map[string]float64{}
	for _, tb := range costs.Data {
		for _, res := range tb.Results {
			items[*res.LineItem] += res.Amount.Value
		}
	}
	if _, ok := items["mb, batch"]; !ok || len(items) != 4 {
		t.Fatalf("cost line items %v, want m1, mb and their batch items", items)
	}

	// Settlement: batch spend counts against the tenant's budget.
	kv, err := h.js.KeyValue(ctx, events.BucketBudgets)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for entry, want := range spent {
		for {
			e, err := spend.Get(ctx, kv, entry)
			if err != nil {
				t.Fatal(err)
			}
			if e.SpentNano == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: spent %d, want %d", entry, e.SpentNano, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The audit replays the stream, copies included, and agrees.
	rep := h.audit(h.base, h.base.Add(72*time.Hour))
	if len(rep.Differences) != 0 || rep.EventsReplayed != int64(len(pubs)) || rep.BucketsCompared == 0 {
		t.Fatalf("audit: %d differences over %d buckets, %d events replayed (want %d)", len(rep.Differences), rep.BucketsCompared, rep.EventsReplayed, len(pubs))
	}

	// A restart from the (version 3) snapshot gives the same ledger.
	r.stop(t)
	var before *ledger.Ledger
	r.svc.Ledger(func(l *ledger.Ledger) { before = l.Clone(time.Time{}, time.Time{}, "", true) })
	r2 := h.start(cfg, nil)
	var same bool
	r2.svc.Ledger(func(l *ledger.Ledger) { same = ledger.Equal(before, l) })
	if !same {
		t.Fatal("the ledger loaded from the snapshot differs from the one saved")
	}
}
