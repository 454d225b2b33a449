package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

func batchLine(id, batchID, tenant, model string, at time.Time, prompt, cached, completion int64) *events.UsageRecordedV3 {
	return &events.UsageRecordedV3{
		UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: *rec(id, tenant, "k1", model, events.EndpointChatCompletions, at, prompt, cached, completion, events.UsageStatusOK)},
		Batch:           true, BatchID: batchID,
	}
}

func discount(f float64) *float64 { return &f }

func batchBook() *PriceBook {
	return NewPriceBook([]registry.PriceHistory{
		// default batch discount: half price
		{Model: "m1", Prices: []registry.Price{{EffectiveFrom: t0.Add(-time.Hour), InputPerMTokUSD: 2, CachedInputPerMTokUSD: 1, OutputPerMTokUSD: 8}}},
		// a model's own discount: 30% off, changed to none from t0+1h
		{Model: "m2", Prices: []registry.Price{
			{EffectiveFrom: t0.Add(-time.Hour), InputPerMTokUSD: 1, OutputPerMTokUSD: 4, BatchDiscount: discount(0.3)},
			{EffectiveFrom: t0.Add(time.Hour), InputPerMTokUSD: 1, OutputPerMTokUSD: 4, BatchDiscount: discount(0)},
		}},
	}, map[string]float64{events.EndpointChatCompletions: 0.9}) // the endpoint discount: not for batch lines
}

func TestBatchLinesArePricedAtTheModelsBatchDiscount(t *testing.T) {
	pb := batchBook()
	full := int64(900*2000 + 100*1000 + 50*8000) // m1, 1000 prompt (100 cached), 50 completion
	if c, ok := pb.BatchCostNano("m1", t0, 1000, 100, 50); !ok || c != full/2 {
		t.Fatalf("m1 batch cost %d, %v; want %d", c, ok, full/2)
	}
	if c, _ := pb.CostNano("m1", events.EndpointChatCompletions, t0, 1000, 100, 50); c != full*9/10 {
		t.Fatalf("m1 real-time cost %d, want %d (the endpoint discount)", c, full*9/10)
	}
	m2 := int64(1000*1000 + 50*4000)
	if c, _ := pb.BatchCostNano("m2", t0, 1000, 0, 50); c != m2*7/10 {
		t.Fatalf("m2 batch cost %d, want %d (30%% off)", c, m2*7/10)
	}
	if c, _ := pb.BatchCostNano("m2", t0.Add(time.Hour), 1000, 0, 50); c != m2 {
		t.Fatalf("m2 batch cost after the price change %d, want %d (no discount)", c, m2)
	}
	if _, ok := pb.BatchCostNano("nope", t0, 1, 0, 1); ok {
		t.Fatal("unknown model priced")
	}
	var nilBook *PriceBook
	if _, ok := nilBook.BatchCostNano("m1", t0, 1, 0, 1); ok {
		t.Fatal("nil book priced")
	}

	l := New()
	at := t0.Add(10*time.Minute + 5*time.Second)
	// a real-time request and a batch line with the same dimensions, and a
	// V3 that is not a batch line (priced like V2)
	rt := &events.UsageRecordedV2{UsageRecordedV1: *rec("rt", "acme", "k1", "m1", events.EndpointChatCompletions, at, 1000, 100, 50, events.UsageStatusOK)}
	notBatch := &events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: *rec("nb", "acme", "k1", "m1", events.EndpointChatCompletions, at, 1000, 100, 50, events.UsageStatusOK)}}
	applied, cost := l.ApplyCost(1, "rt", rt, pb)
	if !applied || cost != full*9/10 {
		t.Fatalf("real-time: %v, cost %d", applied, cost)
	}
	applied, cost = l.ApplyCost(2, "b1", batchLine("b1", "batch_1", "acme", "m1", at, 1000, 100, 50), pb)
	if !applied || cost != full/2 {
		t.Fatalf("batch line: %v, cost %d, want %d", applied, cost, full/2)
	}
	// by value too
	if applied, cost = l.ApplyCost(3, "b2", *batchLine("b2", "batch_1", "acme", "m1", at, 1000, 100, 50), pb); !applied || cost != full/2 {
		t.Fatalf("batch line by value: %v, cost %d", applied, cost)
	}
	if applied, cost = l.ApplyCost(4, "nb", notBatch, pb); !applied || cost != full*9/10 {
		t.Fatalf("V3 without batch: %v, cost %d", applied, cost)
	}
	bs := l.Buckets(time.Time{}, time.Time{}, "")
	if len(bs) != 2 || bs[0].Batch || !bs[1].Batch {
		t.Fatalf("buckets %+v: want a real-time one, then a batch one", bs)
	}
	if bs[0].Requests != 2 || bs[0].CostNano != 2*(full*9/10) || bs[1].Requests != 2 || bs[1].CostNano != full {
		t.Fatalf("buckets %+v", bs)
	}
	if tot := l.Totals(time.Time{}, time.Time{}, "acme"); tot.Requests != 4 || tot.CostNano != 2*(full*9/10)+full {
		t.Fatalf("totals %+v", tot)
	}
}

func TestBatchLinesFoldOnceByRequestID(t *testing.T) {
	pb := batchBook()
	l := New()
	line := batchLine("req-1", "batch_1", "acme", "m1", t0, 10, 0, 10)
	if !l.Apply(1, "req-1", line, pb) {
		t.Fatal("first copy refused")
	}
	// republished, and published again as a V2 by a confused producer: the
	// request id is the event id, so the request is folded once
	if l.Apply(2, "req-1", line, pb) || l.Apply(3, "req-1", &line.UsageRecordedV2, pb) {
		t.Fatal("a second copy was folded")
	}
	// no envelope id: the request id is used
	if l.Apply(4, "", line, pb) {
		t.Fatal("a copy without envelope id was folded")
	}
	var nilV3 *events.UsageRecordedV3
	if l.Apply(5, "x", nilV3, pb) {
		t.Fatal("a nil event was folded")
	}
	if tot := l.Totals(time.Time{}, time.Time{}, ""); tot.Requests != 1 {
		t.Fatalf("totals %+v", tot)
	}
}

func TestSnapshotVersionFollowsBatchBuckets(t *testing.T) {
	pb := batchBook()
	l := New()
	l.Apply(1, "r1", rec("r1", "acme", "k1", "m1", events.EndpointChatCompletions, t0, 10, 0, 10, events.UsageStatusOK), pb)
	b2, err := l.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	// Without batch usage: version 2, no batch field, as before batches.
	if !bytes.HasPrefix(b2, []byte(`{"version":2,`)) || bytes.Contains(b2, []byte(`"batch"`)) {
		t.Fatalf("a ledger without batch buckets wrote %s", b2)
	}
	l.Apply(2, "b1", batchLine("b1", "batch_1", "acme", "m1", t0, 10, 0, 10), pb)
	b3, err := l.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b3, []byte(`{"version":3,`)) || bytes.Count(b3, []byte(`"batch":true`)) != 1 {
		t.Fatalf("a ledger with a batch bucket wrote %s", b3)
	}
	back := New()
	if err := back.UnmarshalJSON(b3); err != nil {
		t.Fatal(err)
	}
	if !Equal(l, back) {
		t.Fatal("version 3 round trip changed the ledger")
	}
	if again, _ := back.MarshalJSON(); !bytes.Equal(again, b3) {
		t.Fatal("version 3 round trip changed the bytes")
	}
	// json.Unmarshal path and the old versions still decode
	v2 := New()
	if err := json.Unmarshal(b2, v2); err != nil || v2.Len() != 1 || !v2.HasSeen("r1") {
		t.Fatalf("version 2: %v", err)
	}
	// a batch bucket cannot be in a version 2 snapshot
	bad := bytes.Replace(b3, []byte(`{"version":3,`), []byte(`{"version":2,`), 1)
	if err := New().UnmarshalJSON(bad); err == nil || !strings.Contains(err.Error(), "batch bucket") {
		t.Fatalf("a batch bucket in version 2: %v", err)
	}
	if err := New().UnmarshalJSON([]byte(`{"version":5}`)); err == nil {
		t.Fatal("version 5 accepted")
	}
}

func TestAuditComparesBatchBuckets(t *testing.T) {
	pb := batchBook()
	stored, re := New(), New()
	line := batchLine("b1", "batch_1", "acme", "m1", t0, 10, 0, 10)
	rt := rec("b1-rt", "acme", "k1", "m1", events.EndpointChatCompletions, t0, 10, 0, 10, events.UsageStatusOK)
	stored.Apply(1, "b1", line, pb)
	stored.Apply(2, "b1-rt", rt, pb)
	re.Apply(1, "b1", line, pb)
	re.Apply(2, "b1-rt", rt, pb)
	if d, n := Compare(stored, re, time.Time{}, time.Time{}); len(d) != 0 || n != 2 {
		t.Fatalf("same stream: %d differences over %d buckets", len(d), n)
	}
	// the replay priced the line as real-time (or lost its batch flag): the
	// batch bucket and the real-time bucket differ
	wrong := New()
	wrong.Apply(1, "b1", &line.UsageRecordedV2, pb)
	wrong.Apply(2, "b1-rt", rt, pb)
	d, _ := Compare(stored, wrong, time.Time{}, time.Time{})
	if len(d) != 2 || d[0].Batch || !d[1].Batch || d[1].Recomputed.Requests != 0 {
		t.Fatalf("differences %+v", d)
	}
}

func TestBatchReports(t *testing.T) {
	pb := batchBook()
	l := New()
	at := t0.Add(5 * time.Minute)
	l.Apply(1, "rt", rec("rt", "acme", "k1", "m1", events.EndpointChatCompletions, at, 100, 0, 10, events.UsageStatusOK), pb)
	l.Apply(2, "b1", batchLine("b1", "batch_1", "acme", "m1", at, 200, 0, 20), pb)
	l.Apply(3, "b2", batchLine("b2", "batch_1", "acme", "m1", at, 300, 0, 30), pb)
	emb := batchLine("e1", "batch_2", "acme", "m1", at, 50, 0, 0)
	emb.Endpoint = events.EndpointEmbeddings
	l.Apply(4, "e1", emb, pb)

	sum := func(r Report, query string) (reqs, in int64, rows []CompletionsResult) {
		q := mustParse(t, r, fmt.Sprintf("start_time=%d%s", t0.Unix(), query))
		switch r {
		case ReportCompletions:
			for _, tb := range l.Completions(q, "").Data {
				for _, r := range tb.Results {
					reqs += r.NumModelRequests
					in += r.InputTokens
					rows = append(rows, r)
				}
			}
		case ReportEmbeddings:
			for _, tb := range l.Embeddings(q, "").Data {
				for _, r := range tb.Results {
					reqs += r.NumModelRequests
					in += r.InputTokens
				}
			}
		}
		return
	}
	for _, c := range []struct {
		r        Report
		query    string
		reqs, in int64
	}{
		{ReportCompletions, "", 3, 600},
		{ReportCompletions, "&batch=true", 2, 500},
		{ReportCompletions, "&batch=false", 1, 100},
		{ReportEmbeddings, "", 1, 50},
		{ReportEmbeddings, "&batch=true", 1, 50},
		{ReportEmbeddings, "&batch=false", 0, 0},
	} {
		if reqs, in, _ := sum(c.r, c.query); reqs != c.reqs || in != c.in {
			t.Errorf("%s%s: %d requests, %d input tokens; want %d, %d", c.r, c.query, reqs, in, c.reqs, c.in)
		}
	}
	_, _, rows := sum(ReportCompletions, "&group_by=batch,model")
	if len(rows) != 2 || rows[0].Batch == nil || *rows[0].Batch || !*rows[1].Batch ||
		rows[0].NumModelRequests != 1 || rows[1].NumModelRequests != 2 || *rows[1].Model != "m1" {
		t.Fatalf("group_by=batch: %+v", rows)
	}
	_, _, rows = sum(ReportCompletions, "")
	if len(rows) != 1 || rows[0].Batch != nil {
		t.Fatalf("not grouped by batch: batch must be null: %+v", rows)
	}
	if _, perr := ParseQuery(ReportEmbeddings, fmt.Sprintf("start_time=%d&group_by=batch", t0.Unix()), t0); perr == nil || perr.Param != "group_by" {
		t.Fatalf("embeddings group_by=batch: %v", perr)
	}

	// Costs: a model's batch spend is its own line item.
	rtCost, _ := pb.CostNano("m1", events.EndpointChatCompletions, at, 100, 0, 10)
	bCost, _ := pb.BatchCostNano("m1", at, 500, 0, 50)
	eCost, _ := pb.BatchCostNano("m1", at, 50, 0, 0)
	items := map[string]float64{}
	for _, tb := range l.Costs(mustParse(t, ReportCosts, fmt.Sprintf("start_time=%d&group_by=line_item", t0.Unix())), "").Data {
		for _, r := range tb.Results {
			items[*r.LineItem] += r.Amount.Value
		}
	}
	if len(items) != 2 || items["m1"] != float64(rtCost)/1e9 || items["m1, batch"] != float64(bCost+eCost)/1e9 {
		t.Fatalf("cost line items %v, want m1 %d and m1, batch %d nano", items, rtCost, bCost+eCost)
	}
	var only float64
	for _, tb := range l.Costs(mustParse(t, ReportCosts, fmt.Sprintf("start_time=%d&line_items=m1,%%20batch", t0.Unix())), "").Data {
		for _, r := range tb.Results {
			only += r.Amount.Value
		}
	}
	if only != float64(bCost+eCost)/1e9 {
		t.Fatalf("line_items=m1, batch: %v", only)
	}
}
