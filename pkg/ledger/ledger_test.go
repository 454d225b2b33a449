package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
)

var t0 = time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)

func book(discounts map[string]float64) *PriceBook {
	return NewPriceBook([]registry.PriceHistory{
		{Model: "m1", Prices: []registry.Price{
			{EffectiveFrom: t0.Add(-24 * time.Hour), InputPerMTokUSD: 2.5, CachedInputPerMTokUSD: 1.25, OutputPerMTokUSD: 10},
			{EffectiveFrom: t0.Add(12 * time.Hour), InputPerMTokUSD: 5, CachedInputPerMTokUSD: 2.5, OutputPerMTokUSD: 20},
		}},
		{Model: "emb", Prices: []registry.Price{{EffectiveFrom: t0.Add(-24 * time.Hour), InputPerMTokUSD: 0.02}}},
	}, discounts)
}

func rec(id, tenant, key, model, endpoint string, at time.Time, prompt, cached, completion int64, status string) *events.UsageRecordedV1 {
	return &events.UsageRecordedV1{
		RequestID: id, Tenant: tenant, KeyID: key, Model: model, Endpoint: endpoint,
		PromptTokens: prompt, CachedPromptTokens: cached, CompletionTokens: completion,
		Status: status, Reporter: "test", StartedAt: at, FinishedAt: at.Add(time.Second),
	}
}

func TestCostNano(t *testing.T) {
	pb := book(map[string]float64{"completions": 0.5})
	// 1000 uncached × 2500 + 200 cached × 1250 + 300 × 10000 nano-USD/token
	want := int64(800*2500 + 200*1250 + 300*10000)
	got, ok := pb.CostNano("m1", events.EndpointChatCompletions, t0, 1000, 200, 300)
	if !ok || got != want {
		t.Fatalf("cost = %d, %v; want %d", got, ok, want)
	}
	// discount per endpoint
	if got, _ := pb.CostNano("m1", events.EndpointCompletions, t0, 1000, 200, 300); got != want/2 {
		t.Fatalf("discounted cost = %d, want %d", got, want/2)
	}
	// the price change at t0+12h applies from then on only
	if got, _ := pb.CostNano("m1", events.EndpointChatCompletions, t0.Add(12*time.Hour-time.Nanosecond), 1000, 200, 300); got != want {
		t.Fatalf("cost just before the change = %d, want %d", got, want)
	}
	if got, _ := pb.CostNano("m1", events.EndpointChatCompletions, t0.Add(12*time.Hour), 1000, 200, 300); got != 2*want {
		t.Fatalf("cost at the change = %d, want %d", got, 2*want)
	}
	// no price in force: before the first price, or an unknown model
	if c, ok := pb.CostNano("m1", events.EndpointChatCompletions, t0.Add(-48*time.Hour), 1, 0, 1); ok || c != 0 {
		t.Fatalf("cost before any price = %d, %v", c, ok)
	}
	if _, ok := pb.CostNano("nope", events.EndpointChatCompletions, t0, 1, 0, 1); ok {
		t.Fatal("unknown model priced")
	}
	// rounding once per request: 3 tokens at 0.0001 $/Mtok = 0.3 nano → 0
	tiny := NewPriceBook([]registry.PriceHistory{{Model: "t", Prices: []registry.Price{{InputPerMTokUSD: 0.0001}}}}, nil)
	if c, _ := tiny.CostNano("t", "chat.completions", t0, 3, 0, 0); c != 0 {
		t.Fatalf("tiny cost = %d, want 0", c)
	}
	if c, _ := tiny.CostNano("t", "chat.completions", t0, 5, 0, 0); c != 1 {
		t.Fatalf("tiny cost = %d, want 1 (0.5 rounds away from zero)", c)
	}
}

func TestApplyFoldsOnceAndBuckets(t *testing.T) {
	pb := book(nil)
	l := New()
	at := t0.Add(90*time.Minute + 17*time.Second)
	v1 := rec("r1", "acme", "k1", "m1", events.EndpointChatCompletions, at, 100, 10, 50, events.UsageStatusOK)
	v2 := &events.UsageRecordedV2{UsageRecordedV1: *rec("r2", "acme", "k1", "m1", events.EndpointChatCompletions, at, 100, 10, 50, events.UsageStatusError),
		Reservations: []events.Reservation{{Key: "k.k1.total", NanoUSD: 5}}}
	if !l.Apply(1, "r1", v1, pb) || !l.Apply(2, "r2", v2, pb) {
		t.Fatal("first applications refused")
	}
	// same id at a later sequence (republished after the duplicate window)
	if l.Apply(3, "r1", v1, pb) {
		t.Fatal("duplicate id applied")
	}
	// an old sequence
	if l.Apply(2, "r9", rec("r9", "acme", "k1", "m1", events.EndpointChatCompletions, at, 1, 0, 1, "ok"), pb) {
		t.Fatal("sequence at or below LastSeq applied")
	}
	// unknown event type
	if l.Apply(4, "x", events.BudgetAlertV1{}, pb) {
		t.Fatal("unknown type applied")
	}
	if l.LastSeq() != 4 {
		t.Fatalf("LastSeq = %d, want 4", l.LastSeq())
	}
	bs := l.Buckets(time.Time{}, time.Time{}, "")
	if len(bs) != 1 {
		t.Fatalf("buckets = %+v", bs)
	}
	one, _ := pb.CostNano("m1", events.EndpointChatCompletions, at, 100, 10, 50)
	want := Counters{Requests: 2, InputTokens: 200, CachedInputTokens: 20, OutputTokens: 100, Errors: 1, CostNano: 2 * one}
	if bs[0].Counters != want || bs[0].Start != t0.Add(90*time.Minute).Unix() {
		t.Fatalf("bucket = %+v, want %+v at %d", bs[0], want, t0.Add(90*time.Minute).Unix())
	}

	// late event: its own minute; a correction changes only its original bucket
	late := rec("r3", "acme", "k1", "m1", events.EndpointChatCompletions, at.Add(-time.Hour), 10, 0, 10, "ok")
	l.Apply(5, "r3", late, pb)
	cor := &events.UsageCorrectedV1{CorrectionID: "c1", RequestID: "r3", Tenant: "acme", KeyID: "k1", Model: "m1",
		Endpoint: events.EndpointChatCompletions, At: late.StartedAt, DeltaPromptTokens: -5, DeltaCompletionTokens: 5, Reason: "engine recount"}
	if !l.Apply(6, "c1", cor, pb) || l.Apply(7, "c1", cor, pb) {
		t.Fatal("correction not applied exactly once")
	}
	bs = l.Buckets(time.Time{}, time.Time{}, "")
	if len(bs) != 2 {
		t.Fatalf("buckets = %+v", bs)
	}
	lc, _ := pb.CostNano("m1", events.EndpointChatCompletions, late.StartedAt, 5, 0, 15)
	if bs[0].Start != t0.Add(30*time.Minute).Unix() || bs[0].InputTokens != 5 || bs[0].OutputTokens != 15 || bs[0].CostNano != lc {
		t.Fatalf("late bucket = %+v (cost want %d)", bs[0], lc)
	}
	if bs[1].Counters != want {
		t.Fatalf("original bucket changed: %+v", bs[1])
	}

	// unpriced
	l.Apply(8, "r4", rec("r4", "acme", "k1", "free", events.EndpointChatCompletions, at, 10, 0, 10, "ok"), pb)
	tot := l.Totals(time.Time{}, time.Time{}, "")
	if tot.Unpriced != 1 || tot.Requests != 4 {
		t.Fatalf("totals = %+v", tot)
	}
}

func TestRollupsAndRanges(t *testing.T) {
	pb := book(nil)
	l := New()
	// one request per 7 minutes over two days, two tenants
	var seq uint64
	for m := 0; m < 2*24*60; m += 7 {
		seq++
		tenant := []string{"a", "b"}[m%2]
		l.Apply(seq, fmt.Sprint("r", seq), rec(fmt.Sprint("r", seq), tenant, "k-"+tenant, "m1", events.EndpointChatCompletions,
			t0.Add(time.Duration(m)*time.Minute+30*time.Second), 10, 0, 1, "ok"), pb)
	}
	all := l.Totals(time.Time{}, time.Time{}, "")
	for _, w := range []Width{Minute, Hour, Day} {
		var sum Counters
		rows := l.Rollup(w, time.Time{}, time.Time{}, "")
		for i, r := range rows {
			if r.Start%int64(w) != 0 {
				t.Fatalf("%d: row %d not aligned: %d", w, i, r.Start)
			}
			sum.Add(r.Counters)
		}
		if sum != all {
			t.Fatalf("width %d: rollup sum %+v != totals %+v", w, sum, all)
		}
	}
	days := l.Rollup(Day, time.Time{}, time.Time{}, "a")
	if len(days) != 2 || days[0].Start != t0.Unix() || days[1].Start != t0.Add(24*time.Hour).Unix() {
		t.Fatalf("day rollup for a = %+v", days)
	}
	// ranges are [from, to) on the minute start
	hour := l.Totals(t0, t0.Add(time.Hour), "")
	if hour.Requests != 9 { // minutes 0, 7, ... 56
		t.Fatalf("first hour requests = %d, want 9", hour.Requests)
	}
	if got := l.Totals(t0.Add(30*time.Second), t0.Add(time.Hour), ""); got.Requests != 8 {
		t.Fatalf("from mid-minute: %d requests, want 8 (minute 0 starts before from)", got.Requests)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	pb := book(nil)
	l := New()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 1; i <= 2000; i++ {
		at := t0.Add(time.Duration(r.IntN(3*24*60)) * time.Minute)
		l.Apply(uint64(i), fmt.Sprint("id-", r.IntN(1500)), rec("x", fmt.Sprint("t", r.IntN(3)), fmt.Sprint("k", r.IntN(4)),
			[]string{"m1", "emb", "free"}[r.IntN(3)], events.EndpointChatCompletions, at, 10, 1, 3, "ok"), pb)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	back := New()
	if err := json.Unmarshal(b, back); err != nil {
		t.Fatal(err)
	}
	if !Equal(l, back) {
		t.Fatal("round trip changed the ledger")
	}
	b2, _ := json.Marshal(back)
	if !bytes.Equal(b, b2) {
		t.Fatal("round trip changed the bytes")
	}
	// the seen ids survive: a duplicate is still refused
	if back.Apply(5000, "id-7", rec("x", "t0", "k0", "m1", events.EndpointChatCompletions, t0, 1, 0, 1, "ok"), pb) {
		t.Fatal("seen id forgotten by the round trip")
	}
	if err := json.Unmarshal([]byte(`{"version":9}`), New()); err == nil {
		t.Fatal("unknown version accepted")
	}
}

func TestDiff(t *testing.T) {
	pb := book(nil)
	a, b := New(), New()
	for i := 1; i <= 50; i++ {
		ev := rec(fmt.Sprint("r", i), "acme", "k1", "m1", events.EndpointChatCompletions, t0.Add(time.Duration(i)*time.Minute), 10, 0, 1, "ok")
		a.Apply(uint64(i), ev.RequestID, ev, pb)
		if i != 20 {
			b.Apply(uint64(i), ev.RequestID, ev, pb)
		}
	}
	if d := Diff(a, a.Clone(time.Time{}, time.Time{}, "", true), time.Time{}, time.Time{}); len(d) != 0 {
		t.Fatalf("clone differs: %+v", d)
	}
	d, n := Compare(a, b, t0, t0.Add(time.Hour))
	if len(d) != 1 || n != 50 || d[0].Start != t0.Add(20*time.Minute).Unix() || d[0].Stored.Requests != 1 || d[0].Recomputed.Requests != 0 {
		t.Fatalf("diff = %+v (compared %d)", d, n)
	}
	// out of range: not compared
	if d := Diff(a, b, t0.Add(21*time.Minute), t0.Add(time.Hour)); len(d) != 0 {
		t.Fatalf("diff outside range: %+v", d)
	}
}

// reportLedger has chat, completions and embeddings usage for two tenants
// over three days.
func reportLedger(t *testing.T) *Ledger {
	t.Helper()
	pb := book(nil)
	l := New()
	var seq uint64
	for m := 0; m < 3*24*60; m += 13 {
		for _, tenant := range []string{"a", "b"} {
			seq++
			ep := []string{events.EndpointChatCompletions, events.EndpointCompletions, events.EndpointEmbeddings}[seq%3]
			model := "m1"
			if ep == events.EndpointEmbeddings {
				model = "emb"
			} else if seq%5 == 0 {
				model = "m2"
			}
			id := fmt.Sprint("r", seq)
			l.Apply(seq, id, rec(id, tenant, fmt.Sprintf("k-%s-%d", tenant, seq%2), model, ep,
				t0.Add(time.Duration(m)*time.Minute), int64(seq%100), int64(seq%7), int64(seq%50), "ok"), pb)
		}
	}
	return l
}

func mustParse(t *testing.T, r Report, q string) Query {
	t.Helper()
	pq, err := ParseQuery(r, q, t0.Add(10*24*time.Hour))
	if err != nil {
		t.Fatalf("ParseQuery(%s, %q): %v", r, q, err)
	}
	return pq
}

func TestReportsSumsGroupsAndPages(t *testing.T) {
	l := reportLedger(t)
	start, end := t0.Unix(), t0.Add(3*24*time.Hour).Unix()
	comp := func(d Dims) bool {
		return d.Endpoint == events.EndpointChatCompletions || d.Endpoint == events.EndpointCompletions
	}
	var wantComp, wantEmb, wantCost Counters
	for _, b := range l.Buckets(time.Time{}, time.Time{}, "") {
		if comp(b.Dims) {
			wantComp.Add(b.Counters)
		} else {
			wantEmb.Add(b.Counters)
		}
		wantCost.Add(b.Counters)
	}
	for _, gb := range []string{"", "&group_by=model", "&group_by=api_key_id", "&group_by=project_id",
		"&group_by[]=project_id&group_by[]=model", "&group_by=project_id,api_key_id,model"} {
		for _, bw := range []string{"1d", "1h", "1m"} {
			base := fmt.Sprintf("start_time=%d&end_time=%d&bucket_width=%s%s", start, end, bw, gb)
			var got Counters
			var gotEmb int64
			buckets := 0
			page := ""
			for {
				q := mustParse(t, ReportCompletions, base+page)
				p := l.Completions(q, "")
				for _, tb := range p.Data {
					buckets++
					for _, r := range tb.Results {
						got.Requests += r.NumModelRequests
						got.InputTokens += r.InputTokens
						got.OutputTokens += r.OutputTokens
						got.CachedInputTokens += r.InputCachedTokens
						if (r.Model != nil) != (q.grouped(GroupModel)) || (r.ProjectID != nil) != q.grouped(GroupProjectID) ||
							(r.APIKeyID != nil) != q.grouped(GroupAPIKeyID) || r.UserID != nil || r.Batch != nil {
							t.Fatalf("%s: null fields wrong: %+v", base, r)
						}
					}
				}
				eq := mustParse(t, ReportEmbeddings, base+page)
				for _, tb := range l.Embeddings(eq, "").Data {
					for _, r := range tb.Results {
						gotEmb += r.InputTokens
					}
				}
				if !p.HasMore {
					if p.NextPage != nil {
						t.Fatal("next_page set without has_more")
					}
					break
				}
				page = "&page=" + url.QueryEscape(*p.NextPage)
			}
			wantBuckets := int((end - start) / int64(map[string]Width{"1d": Day, "1h": Hour, "1m": Minute}[bw]))
			if buckets != wantBuckets {
				t.Fatalf("%s: %d buckets over all pages, want %d", base, buckets, wantBuckets)
			}
			if got.Requests != wantComp.Requests || got.InputTokens != wantComp.InputTokens ||
				got.OutputTokens != wantComp.OutputTokens || got.CachedInputTokens != wantComp.CachedInputTokens {
				t.Fatalf("%s: completions sums %+v, want %+v", base, got, wantComp)
			}
			if gotEmb != wantEmb.InputTokens {
				t.Fatalf("%s: embeddings input %d, want %d", base, gotEmb, wantEmb.InputTokens)
			}
		}
	}
	for _, gb := range []string{"", "&group_by=line_item", "&group_by=project_id", "&group_by=project_id&group_by=line_item"} {
		q := mustParse(t, ReportCosts, fmt.Sprintf("start_time=%d&end_time=%d%s", start, end, gb))
		var nano float64
		for _, tb := range l.Costs(q, "").Data {
			for _, r := range tb.Results {
				nano += r.Amount.Value * 1e9
				if r.Amount.Currency != "usd" || (r.LineItem != nil) != q.grouped(GroupLineItem) || (r.ProjectID != nil) != q.grouped(GroupProjectID) {
					t.Fatalf("costs result %+v", r)
				}
			}
		}
		if int64(nano+0.5) != wantCost.CostNano {
			t.Fatalf("costs %s: %f nano, want %d", gb, nano, wantCost.CostNano)
		}
	}
}

func TestReportScopeFiltersAndEmptyBuckets(t *testing.T) {
	l := reportLedger(t)
	start := t0.Add(-2 * 24 * time.Hour).Unix() // two empty days first
	q := mustParse(t, ReportCompletions, fmt.Sprintf("start_time=%d&group_by=project_id&group_by=api_key_id", start))
	if q.Limit != 7 || q.Width != Day {
		t.Fatalf("defaults: %+v", q)
	}
	p := l.Completions(q, "a")
	if len(p.Data) != 7 || len(p.Data[0].Results) != 0 || len(p.Data[1].Results) != 0 || len(p.Data[2].Results) == 0 {
		t.Fatalf("empty buckets are not listed: %+v", p.Data[:3])
	}
	if !p.HasMore {
		t.Fatal("10 days from start, now at t0+10d: 13 buckets, limit 7: has_more")
	}
	for _, tb := range p.Data {
		for _, r := range tb.Results {
			if *r.ProjectID != "a" {
				t.Fatalf("scope a sees %s", *r.ProjectID)
			}
		}
	}
	// filters intersect the scope
	q = mustParse(t, ReportCompletions, fmt.Sprintf("start_time=%d&project_ids=b", t0.Unix()))
	for _, tb := range l.Completions(q, "a").Data {
		if len(tb.Results) != 0 {
			t.Fatalf("scope a with project_ids=b sees %+v", tb.Results)
		}
	}
	q = mustParse(t, ReportCompletions, fmt.Sprintf("start_time=%d&models=m2&group_by=model&api_key_ids=k-b-1", t0.Unix()))
	for _, tb := range l.Completions(q, "").Data {
		for _, r := range tb.Results {
			if *r.Model != "m2" {
				t.Fatalf("models filter: %s", *r.Model)
			}
		}
	}
	// batch=true: this ledger has no batch lines
	for _, tb := range l.Completions(mustParse(t, ReportCompletions, fmt.Sprintf("start_time=%d&batch=true", t0.Unix())), "").Data {
		if len(tb.Results) != 0 {
			t.Fatalf("batch=true: %+v", tb.Results)
		}
	}
	// without end_time the last bucket is whole; with it, cut at end_time
	oq, perr := ParseQuery(ReportCompletions, fmt.Sprintf("start_time=%d&bucket_width=1h&limit=168", t0.Add(9*24*time.Hour).Unix()),
		t0.Add(10*24*time.Hour+30*time.Minute))
	if perr != nil {
		t.Fatal(perr)
	}
	p = l.Completions(oq, "")
	if n := len(p.Data); n != 25 || p.Data[n-1].EndTime != t0.Add(10*24*time.Hour+time.Hour).Unix() || p.HasMore {
		t.Fatalf("open end: %d buckets, last ends %d", n, p.Data[n-1].EndTime)
	}
	p = l.Completions(mustParse(t, ReportCompletions, fmt.Sprintf("start_time=%d&end_time=%d&bucket_width=1h", t0.Unix()+1800, t0.Unix()+7200+600)), "")
	if len(p.Data) != 3 || p.Data[0].StartTime != t0.Unix()+1800 || p.Data[0].EndTime != t0.Unix()+3600 || p.Data[2].EndTime != t0.Unix()+7800 {
		t.Fatalf("clamped buckets: %+v", p.Data)
	}
	// JSON shape: nulls written, not omitted
	b, _ := l.ReportJSON(mustParse(t, ReportCompletions, fmt.Sprintf("start_time=%d&limit=1", t0.Unix())), "")
	for _, s := range []string{`"object":"page"`, `"object":"bucket"`, `"project_id":null`, `"user_id":null`, `"batch":null`,
		`"input_audio_tokens":0`, `"object":"organization.usage.completions.result"`, `"has_more":true`} {
		if !bytes.Contains(b, []byte(s)) {
			t.Fatalf("page JSON lacks %s: %s", s, b)
		}
	}
	b, _ = l.ReportJSON(mustParse(t, ReportCompletions, fmt.Sprintf("start_time=%d&end_time=%d", t0.Unix(), t0.Unix()+60)), "")
	if !bytes.Contains(b, []byte(`"next_page":null`)) {
		t.Fatalf("last page JSON: %s", b)
	}
}

func TestReportBadParams(t *testing.T) {
	cases := []struct {
		r            Report
		q, param     string
		code, status string
	}{
		{ReportCompletions, "bucket_width=1d", "start_time", contracts.CodeMissingParam, ""},
		{ReportCompletions, "start_time=abc", "start_time", contracts.CodeInvalidType, ""},
		{ReportCompletions, "start_time=100&bucket_width=2h", "bucket_width", contracts.CodeInvalidRequest, ""},
		{ReportCompletions, "start_time=100&limit=32", "limit", contracts.CodeInvalidRequest, ""},
		{ReportCompletions, "start_time=100&bucket_width=1h&limit=169", "limit", contracts.CodeInvalidRequest, ""},
		{ReportCompletions, "start_time=100&bucket_width=1m&limit=1441", "limit", contracts.CodeInvalidRequest, ""},
		{ReportCompletions, "start_time=100&limit=0", "limit", contracts.CodeInvalidRequest, ""},
		{ReportCompletions, "start_time=100&end_time=50", "end_time", contracts.CodeInvalidRequest, ""},
		{ReportCompletions, "start_time=100&group_by=user_id", "group_by", contracts.CodeInvalidRequest, ""},
		{ReportCompletions, "start_time=100&page=nonsense", "page", contracts.CodeInvalidRequest, ""},
		{ReportCosts, "start_time=100&bucket_width=1h", "bucket_width", contracts.CodeInvalidRequest, ""},
		{ReportCosts, "start_time=100&group_by=model", "group_by", contracts.CodeInvalidRequest, ""},
		{ReportCosts, "start_time=100&limit=181", "limit", contracts.CodeInvalidRequest, ""},
		{ReportCompletions, "start_time=100&user_ids=u1", "user_ids", contracts.CodeInvalidRequest, ""},
		{ReportCompletions, "start_time=100&batch=maybe", "batch", contracts.CodeInvalidType, ""},
	}
	for _, c := range cases {
		_, err := ParseQuery(c.r, c.q, t0)
		if err == nil || err.Status != 400 || err.Param != c.param || err.Code != c.code || err.Type != contracts.TypeInvalidRequest {
			t.Errorf("ParseQuery(%s, %q) = %+v; want 400 %s on %s", c.r, c.q, err, c.code, c.param)
		}
	}
	if q, err := ParseQuery(ReportCosts, "start_time=100&limit=180", t0); err != nil || q.Limit != 180 {
		t.Fatalf("costs limit 180: %+v %v", q, err)
	}
}

func BenchmarkApply(b *testing.B) {
	pb := book(nil)
	l := New()
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprint("req-", i)
	}
	ev := rec("x", "acme", "k1", "m1", events.EndpointChatCompletions, t0, 100, 10, 50, "ok")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev.StartedAt = t0.Add(time.Duration(i) * time.Millisecond)
		l.Apply(uint64(i+1), ids[i], ev, pb)
	}
}
