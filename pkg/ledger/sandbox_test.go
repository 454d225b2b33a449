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

// sbxExec is one exec: wall ms at a memory limit of mib MiB.
func sbxExec(id, tenant, key string, at time.Time, wallMS, cpuMS, mib int64, errCode string) *events.SandboxUsageV1 {
	u := &events.SandboxUsageV1{
		ID: id, Tenant: tenant, KeyID: key, ContainerID: "cntr_" + tenant, Kind: events.SandboxUsageExec, Language: "python",
		Status: events.UsageStatusOK, WallMS: wallMS, CPUMS: cpuMS, MemoryLimitBytes: mib << 20, MemoryPeakBytes: mib << 19,
		GBSeconds: float64(mib) / 1024 * float64(wallMS) / 1000, Node: "n1",
		StartedAt: at, FinishedAt: at.Add(time.Duration(wallMS) * time.Millisecond),
	}
	if errCode != "" {
		u.Status, u.ErrorCode, u.ExitCode = events.UsageStatusError, errCode, -1
	}
	return u
}

// sbxContainer is one container's life, from start to end.
func sbxContainer(id, tenant, key string, start, end time.Time, mib int64) *events.SandboxUsageV1 {
	wall := end.Sub(start).Milliseconds()
	return &events.SandboxUsageV1{
		ID: id, Tenant: tenant, KeyID: key, ContainerID: "cntr_" + id, Kind: events.SandboxUsageContainer,
		Status: events.UsageStatusOK, WallMS: wall, MemoryLimitBytes: mib << 20,
		GBSeconds: float64(mib) / 1024 * float64(wall) / 1000, Node: "n1", StartedAt: start, FinishedAt: end,
	}
}

// sbxBook prices m1 and, from t0+1h, the sandboxes: 0.00002 USD a
// GB-second and 0.03 USD a session.
func sbxBook() *PriceBook {
	return NewPriceBook([]registry.PriceHistory{
		{Model: "m1", Prices: []registry.Price{{EffectiveFrom: t0.Add(-time.Hour), InputPerMTokUSD: 2, OutputPerMTokUSD: 8}}},
		{Model: registry.SandboxPriceModel, Prices: []registry.Price{{EffectiveFrom: t0.Add(time.Hour), PerGBSecondUSD: 0.00002, PerSessionUSD: 0.03}}},
	}, map[string]float64{EndpointSandbox: 0.5}) // endpoint discounts do not apply to sandboxes
}

func TestSandboxUsageFolds(t *testing.T) {
	pb := sbxBook()
	l := New()
	free := t0.Add(10 * time.Minute) // before the sandbox price
	paid := t0.Add(2 * time.Hour)
	// 512 MiB × 2 s = 1 GB-second; 1 GiB × 1.5 s = 1.5 GB-seconds
	steps := []struct {
		ev   events.Event
		cost int64
	}{
		{sbxExec("x1", "acme", "k1", free, 2000, 1500, 512, ""), 0},
		{*sbxExec("x2", "acme", "k1", free.Add(time.Second), 1500, 10, 1024, "exec_timeout"), 0}, // by value
		{sbxExec("x3", "acme", "k1", paid, 2000, 1500, 512, ""), 20000},                          // 1 GB-s × 2e-5 USD
		{sbxExec("x4", "acme", "k2", paid, 1500, 700, 1024, ""), 30000},
		// a container that lived across the price change is billed when it
		// ended, in its end minute
		{sbxContainer("c1", "acme", "k1", free, paid.Add(30*time.Second), 1024), 30_000_000},
	}
	for i, s := range steps {
		applied, cost := l.ApplyCost(uint64(i+1), "", s.ev, pb)
		if !applied || cost != s.cost {
			t.Fatalf("step %d: applied %v, cost %d; want %d", i, applied, cost, s.cost)
		}
	}
	if l.BeyondHorizon() != 0 {
		t.Fatalf("beyond the horizon %d: a container is counted when it ends, not when it started", l.BeyondHorizon())
	}
	bs := l.Buckets(time.Time{}, time.Time{}, "")
	if len(bs) != 3 {
		t.Fatalf("buckets %+v: want acme/k1 at %s, acme/k1 and acme/k2 at %s", bs, free, paid)
	}
	for _, b := range bs {
		if b.Endpoint != EndpointSandbox || b.Model != "" || b.Requests != 0 || b.InputTokens != 0 || b.Unpriced != 0 {
			t.Fatalf("a sandbox bucket %+v", b)
		}
	}
	want := Counters{SandboxExecs: 2, SandboxErrors: 1, SandboxWallMS: 3500, SandboxCPUMS: 1510, SandboxMicroGBSeconds: 2_500_000}
	if bs[0].Time() != free || bs[0].KeyID != "k1" || bs[0].Counters != want {
		t.Fatalf("the unpriced minute %+v,\nwant %+v", bs[0], want)
	}
	life := paid.Add(30 * time.Second).Sub(free).Milliseconds()
	want = Counters{SandboxExecs: 1, SandboxWallMS: 2000, SandboxCPUMS: 1500, SandboxMicroGBSeconds: 1_000_000,
		SandboxSessions: 1, SandboxSessionMS: life, SandboxSessionMicroGBSeconds: life * 1000, CostNano: 20000 + 30_000_000}
	if bs[1].Time() != paid || bs[1].KeyID != "k1" || bs[1].Counters != want {
		t.Fatalf("the priced minute %+v,\nwant %+v", bs[1], want)
	}
	if !l.HasSeen("x3") || !l.HasSeen("c1") || l.HasSeen("x1") {
		t.Fatal("the ids remembered are not those within the dedup horizon")
	}

	// Exactly once by event id: a republished copy, the same event under
	// its envelope id, or with another id in the body, are skipped.
	if l.Apply(10, "x3", steps[2].ev, pb) || l.Apply(11, "", steps[4].ev, pb) {
		t.Fatal("a copy was folded")
	}
	again := *sbxExec("x3", "acme", "k1", paid, 9999, 1, 512, "")
	if l.Apply(12, "x3", &again, pb) {
		t.Fatal("an event with a seen envelope id was folded")
	}
	var nilEv *events.SandboxUsageV1
	if l.Apply(13, "nil", nilEv, pb) {
		t.Fatal("a nil event was folded")
	}
	if got := l.Totals(time.Time{}, time.Time{}, ""); got.SandboxExecs != 4 || got.SandboxSessions != 1 || l.Applied() != 5 || l.LastSeq() != 13 {
		t.Fatalf("after the copies: totals %+v, applied %d, last seq %d", got, l.Applied(), l.LastSeq())
	}
}

func TestSandboxCostNano(t *testing.T) {
	pb := sbxBook()
	at := t0.Add(2 * time.Hour)
	if c := pb.SandboxCostNano(at, 2_500_000, 2); c != 50000+60_000_000 {
		t.Fatalf("2.5 GB-s and 2 sessions: %d nano", c)
	}
	if c := pb.SandboxCostNano(t0, 2_500_000, 2); c != 0 {
		t.Fatalf("before the price: %d", c)
	}
	if c := NewPriceBook(nil, nil).SandboxCostNano(at, 1e6, 1); c != 0 {
		t.Fatalf("no sandbox price: %d", c)
	}
	var nilBook *PriceBook
	if c := nilBook.SandboxCostNano(at, 1e6, 1); c != 0 {
		t.Fatalf("nil book: %d", c)
	}
}

func TestSnapshotVersionFollowsSandboxBuckets(t *testing.T) {
	pb := sbxBook()
	l := New()
	l.Apply(1, "r1", rec("r1", "acme", "k1", "m1", events.EndpointChatCompletions, t0, 10, 0, 10, events.UsageStatusOK), pb)
	l.Apply(2, "b1", batchLine("b1", "batch_1", "acme", "m1", t0, 10, 0, 10), pb)
	b3, err := l.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b3, []byte(`{"version":3,`)) || bytes.Contains(b3, []byte(`sandbox`)) {
		t.Fatalf("a ledger without sandbox buckets wrote %s", b3)
	}
	l.Apply(3, "x1", sbxExec("x1", "acme", "k1", t0.Add(2*time.Hour), 2000, 1500, 512, ""), pb)
	l.Apply(4, "c1", sbxContainer("c1", "acme", "k1", t0, t0.Add(2*time.Hour), 256), pb)
	b4, err := l.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b4, []byte(`{"version":4,`)) || !bytes.Contains(b4, []byte(`"endpoint":"sandbox"`)) ||
		!bytes.Contains(b4, []byte(`"sandbox_micro_gb_seconds":1000000`)) {
		t.Fatalf("a ledger with a sandbox bucket wrote %s", b4)
	}
	back := New()
	if err := back.UnmarshalJSON(b4); err != nil {
		t.Fatal(err)
	}
	if !Equal(l, back) {
		t.Fatal("version 4 round trip changed the ledger")
	}
	if again, _ := back.MarshalJSON(); !bytes.Equal(again, b4) {
		t.Fatal("version 4 round trip changed the bytes")
	}
	viaJSON := New()
	if err := json.Unmarshal(b4, viaJSON); err != nil || !Equal(l, viaJSON) {
		t.Fatalf("version 4 through json.Unmarshal: %v", err)
	}
	// the older versions still load
	old := New()
	if err := old.UnmarshalJSON(b3); err != nil || old.Len() != 2 || !old.HasSeen("b1") {
		t.Fatalf("version 3: %v", err)
	}
	// sandbox buckets cannot be in a version 2 or 3 snapshot: a binary
	// that wrote one would have to know them
	for _, v := range []string{`{"version":3,`, `{"version":2,`} {
		bad := bytes.Replace(b4, []byte(`{"version":4,`), []byte(v), 1)
		if v == `{"version":2,` {
			bad = bytes.ReplaceAll(bad, []byte(`,"batch":true`), nil)
		}
		if err := New().UnmarshalJSON(bad); err == nil || !strings.Contains(err.Error(), "sandbox bucket") {
			t.Fatalf("a sandbox bucket in %s: %v", v, err)
		}
	}
	if err := New().UnmarshalJSON([]byte(`{"version":5}`)); err == nil {
		t.Fatal("version 5 accepted")
	}
}

func TestAuditComparesSandboxBuckets(t *testing.T) {
	pb := sbxBook()
	at := t0.Add(2 * time.Hour)
	stream := []events.Event{
		sbxExec("x1", "acme", "k1", at, 2000, 1500, 512, ""),
		rec("r1", "acme", "k1", "m1", events.EndpointChatCompletions, at, 10, 0, 10, events.UsageStatusOK),
		sbxContainer("c1", "acme", "k1", t0, at, 256),
	}
	stored, re := New(), New()
	for i, ev := range stream {
		stored.Apply(uint64(i+1), "", ev, pb)
		re.Apply(uint64(i+1), "", ev, pb)
	}
	if d, n := Compare(stored, re, time.Time{}, time.Time{}); len(d) != 0 || n != 2 {
		t.Fatalf("same stream: %d differences over %d buckets", len(d), n)
	}
	// a replay that lost the container's event differs in the sandbox bucket
	lost := New()
	lost.Apply(1, "", stream[0], pb)
	lost.Apply(2, "", stream[1], pb)
	d, _ := Compare(stored, lost, time.Time{}, time.Time{})
	if len(d) != 1 || d[0].Endpoint != EndpointSandbox || d[0].Stored.SandboxSessions != 1 || d[0].Recomputed.SandboxSessions != 0 {
		t.Fatalf("differences %+v", d)
	}
}

func TestCodeInterpreterSessionsReport(t *testing.T) {
	pb := sbxBook()
	l := New()
	day := t0.Add(24 * time.Hour)
	l.Apply(1, "", sbxExec("x1", "acme", "k1", day.Add(time.Minute), 2000, 1500, 512, ""), pb)
	l.Apply(2, "", sbxExec("x2", "acme", "k2", day.Add(2*time.Minute), 1000, 250, 1024, "memory_limit_exceeded"), pb)
	l.Apply(3, "", sbxContainer("c1", "acme", "k1", day, day.Add(3*time.Minute), 512), pb)
	l.Apply(4, "", sbxExec("x3", "beta", "k9", day.Add(4*time.Minute), 500, 100, 512, ""), pb)
	l.Apply(5, "", rec("r1", "acme", "k1", "m1", events.EndpointChatCompletions, day, 100, 0, 10, events.UsageStatusOK), pb)

	q := mustParse(t, ReportCodeInterpreterSessions, fmt.Sprintf("start_time=%d&end_time=%d", day.Unix(), day.Add(24*time.Hour).Unix()))
	body, err := l.ReportJSON(q, "")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"object":"page","data":[{"object":"bucket","start_time":%d,"end_time":%d,"results":[`+
		`{"object":"organization.usage.code_interpreter_sessions.result","num_sessions":1,"project_id":null,"api_key_id":null,`+
		`"num_execs":3,"num_exec_errors":1,"wall_seconds":3.5,"cpu_seconds":1.85,"gb_seconds":2.25,"session_seconds":180,"session_gb_seconds":90}]}],`+
		`"has_more":false,"next_page":null}`, day.Unix(), day.Add(24*time.Hour).Unix())
	if string(body) != want {
		t.Fatalf("report\n%s\nwant\n%s", body, want)
	}

	rows := func(query, scope string) []CodeInterpreterSessionsResult {
		var out []CodeInterpreterSessionsResult
		for _, tb := range l.CodeInterpreterSessions(mustParse(t, ReportCodeInterpreterSessions, fmt.Sprintf("start_time=%d%s", day.Unix(), query)), scope).Data {
			out = append(out, tb.Results...)
		}
		return out
	}
	g := rows("&group_by=project_id,api_key_id", "")
	if len(g) != 3 || *g[0].ProjectID != "acme" || *g[0].APIKeyID != "k1" || g[0].NumSessions != 1 || g[0].NumExecs != 1 ||
		*g[1].APIKeyID != "k2" || g[1].NumExecErrors != 1 || *g[2].ProjectID != "beta" || g[2].NumExecs != 1 {
		t.Fatalf("group_by=project_id,api_key_id: %+v", g)
	}
	if g := rows("&api_key_ids=k2", ""); len(g) != 1 || g[0].NumExecs != 1 || g[0].NumSessions != 0 || g[0].APIKeyID != nil {
		t.Fatalf("api_key_ids=k2: %+v", g)
	}
	if g := rows("&project_ids=beta", ""); len(g) != 1 || g[0].NumExecs != 1 {
		t.Fatalf("project_ids=beta: %+v", g)
	}
	if g := rows("", "beta"); len(g) != 1 || g[0].NumExecs != 1 || g[0].NumSessions != 0 {
		t.Fatalf("scope beta: %+v", g)
	}
	if g := rows("&bucket_width=1m", ""); len(g) != 4 {
		t.Fatalf("by minute: %+v", g) // minutes 1, 2, 3 and 4 (minute 0 has only tokens)
	}
	for _, bad := range []string{"&group_by=model", "&group_by=line_item", "&group_by=batch"} {
		if _, perr := ParseQuery(ReportCodeInterpreterSessions, fmt.Sprintf("start_time=%d%s", day.Unix(), bad), day); perr == nil || perr.Param != "group_by" {
			t.Fatalf("%s: %v", bad, perr)
		}
	}
	// the token reports do not see the sandboxes
	if tb := l.Completions(mustParse(t, ReportCompletions, fmt.Sprintf("start_time=%d", day.Unix())), "").Data[0]; len(tb.Results) != 1 ||
		tb.Results[0].NumModelRequests != 1 || tb.Results[0].InputTokens != 100 {
		t.Fatalf("completions %+v", tb.Results)
	}

	// Costs: the code interpreter is a line item, exec GB-seconds and
	// sessions at the sandbox price.
	items := map[string]float64{}
	for _, tb := range l.Costs(mustParse(t, ReportCosts, fmt.Sprintf("start_time=%d&group_by=line_item", day.Unix())), "").Data {
		for _, r := range tb.Results {
			items[*r.LineItem] += r.Amount.Value
		}
	}
	sbx := float64(pb.SandboxCostNano(day, 2_250_000, 1)) / 1e9
	if len(items) != 2 || items[SandboxLineItem] != sbx || items["m1"] == 0 {
		t.Fatalf("cost line items %v, want m1 and %q %v", items, SandboxLineItem, sbx)
	}
	var only float64
	for _, tb := range l.Costs(mustParse(t, ReportCosts, fmt.Sprintf("start_time=%d&line_items=code%%20interpreter", day.Unix())), "").Data {
		for _, r := range tb.Results {
			only += r.Amount.Value
		}
	}
	if only != sbx {
		t.Fatalf("line_items=code interpreter: %v, want %v", only, sbx)
	}

	// Without a sandbox price there is no code interpreter line item.
	unpriced := New()
	unpriced.Apply(1, "", sbxExec("x1", "acme", "k1", day.Add(time.Minute), 2000, 1500, 512, ""), NewPriceBook(nil, nil))
	for _, tb := range unpriced.Costs(mustParse(t, ReportCosts, fmt.Sprintf("start_time=%d&group_by=line_item", day.Unix())), "").Data {
		if len(tb.Results) != 0 {
			t.Fatalf("unpriced sandboxes in the costs: %+v", tb.Results)
		}
	}
}
