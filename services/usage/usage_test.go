package usage

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
	"github.com/aiforge/aiforge/pkg/query"
	"github.com/aiforge/aiforge/pkg/registry"
)

func TestConfigValidate(t *testing.T) {
	err := Config{SnapshotEvery: -1, LateMargin: -time.Second, Discounts: map[string]float64{"batch": -0.5}}.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, s := range []string{"SnapshotEvery", "LateMargin", "Discounts"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	if _, err := New(Config{}, Deps{}); err == nil || !strings.Contains(err.Error(), "Deps.NC") || !strings.Contains(err.Error(), "Deps.Registerer") {
		t.Fatalf("missing deps: %v", err)
	}
}

// A crash between folding and snapshotting re-folds from the checkpoint:
// every event is counted exactly once, and the audit agrees.
func TestCrashAndRestartCountsEveryEventOnce(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	pubs := h.mixed(10_000)
	if n := h.publish(pubs); n != len(pubs) {
		t.Fatalf("stored %d of %d", n, len(pubs))
	}
	last := h.lastSeq()

	// First run: snapshots every 1500 messages, then "crashes" (no final
	// settlement or snapshot) once about half the stream is folded.
	var crashedAt uint64
	cfg := Config{SnapshotEvery: 1500, SnapshotInterval: time.Hour}
	r1 := h.start(cfg, func(s *Service, cancel context.CancelFunc) {
		s.skipFinalSnapshot = true
		var once sync.Once
		s.foldedHook = func(seq uint64) {
			if seq >= last/2 {
				once.Do(func() { crashedAt = seq; cancel() })
			}
		}
	})
	r1.wait(t)
	if crashedAt == 0 {
		t.Fatal("the first run did not reach the crash point")
	}
	snap := ledger.New()
	b, err := r1.svc.obs.GetBytes(context.Background(), DefaultSnapshotObject)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, snap); err != nil {
		t.Fatal(err)
	}
	if snap.LastSeq() == 0 || snap.LastSeq() >= r1.svc.FoldedSeq() {
		t.Fatalf("snapshot at %d, folded %d at the crash: the crash must fall between them", snap.LastSeq(), r1.svc.FoldedSeq())
	}

	// Second run: loads the snapshot and replays the rest.
	r2 := h.start(Config{}, nil)
	waitFolded(t, r2.svc, last)
	want := h.expected(pubs, nil)
	var got ledger.Counters
	r2.svc.Ledger(func(l *ledger.Ledger) { got = l.Totals(time.Time{}, time.Time{}, "") })
	if got != want {
		t.Fatalf("after restart: %+v\nwant %+v", got, want)
	}
	if folded := testutil.ToFloat64(r2.svc.m.folded.WithLabelValues("applied")); uint64(folded) != last-snap.LastSeq() {
		t.Fatalf("second run applied %v events, want %d (replayed from the snapshot at %d)", folded, last-snap.LastSeq(), snap.LastSeq())
	}
	if lag := testutil.ToFloat64(r2.svc.m.lag); lag != 0 {
		t.Fatalf("fold lag %v after catching up", lag)
	}

	// The ledger dump over the bus says the same.
	d := h.ledgerDump(h.base, h.base.Add(48*time.Hour), "")
	if s := sum(d.Data); s != want || d.LastSeq < last {
		t.Fatalf("dump sums %+v at %d, want %+v at %d", s, d.LastSeq, want, last)
	}
	// And the audit recomputes the same buckets from the raw stream.
	rep := h.audit(h.base, h.base.Add(48*time.Hour))
	// (The stream also holds the queries themselves, stored because
	// events.UsageQuery lies under the USAGE stream's subjects.)
	if len(rep.Differences) != 0 || rep.LastSeq < last || rep.EventsReplayed != int64(rep.LastSeq) || rep.BucketsCompared != len(d.Data) {
		t.Fatalf("audit: %d differences, %d replayed up to %d (want all of at least %d), %d buckets compared (want %d)",
			len(rep.Differences), rep.EventsReplayed, rep.LastSeq, last, rep.BucketsCompared, len(d.Data))
	}
	t.Logf("crash at seq %d, snapshot at %d; audit replayed %d events in %.3fs (%.0f/s)",
		crashedAt, snap.LastSeq(), rep.EventsReplayed, rep.ReplaySeconds, rep.EventsPerSecond)

	// A clean stop saves a final snapshot; the next start folds nothing
	// again.
	r2.stop(t)
	r3 := h.start(Config{}, nil)
	waitFolded(t, r3.svc, r2.svc.FoldedSeq())
	r3.svc.Ledger(func(l *ledger.Ledger) { got = l.Totals(time.Time{}, time.Time{}, "") })
	if applied := testutil.ToFloat64(r3.svc.m.applied); got != want || applied != 0 {
		t.Fatalf("after a clean restart: %+v (applied %v again), want %+v", got, applied, want)
	}
}

// Snapshots are also saved every SnapshotInterval while folding.
func TestSnapshotOnInterval(t *testing.T) {
	h := newHarness(t)
	r := h.start(Config{SnapshotEvery: 1 << 30, SnapshotInterval: 50 * time.Millisecond}, nil)
	h.publish(h.mixed(200))
	last := h.lastSeq()
	waitFolded(t, r.svc, last)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := r.svc.obs.GetBytes(context.Background(), DefaultSnapshotObject)
		if err == nil {
			l := ledger.New()
			if err := json.Unmarshal(b, l); err != nil {
				t.Fatal(err)
			}
			if l.LastSeq() >= last {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot at %d: %v", last, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := testutil.CollectAndCount(r.reg, "aiforge_usage_snapshot_duration_seconds"); n != 1 {
		t.Fatalf("snapshot duration metric: %d series", n)
	}
}

// An event published again within the duplicate window is dropped by
// JetStream; one republished with a new Nats-Msg-Id but the same event id
// is stored and skipped by the ledger.
func TestDuplicatesAreCountedOnce(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	pubs := h.mixed(1000)
	var all []pub
	for _, p := range pubs {
		all = append(all, p, p) // the same Nats-Msg-Id: dropped
	}
	for _, p := range pubs {
		p.msgID = p.id + "-after-the-window"
		all = append(all, p) // a new Nats-Msg-Id, the same ce-id: stored
	}
	if stored := h.publish(all); stored != 2*len(pubs) {
		t.Fatalf("stored %d messages, want %d", stored, 2*len(pubs))
	}
	// The copies come after every original, up to 17 hours of event time
	// later: inside a horizon that long (the default hour is covered by
	// TestDedupHorizonBoundsMemory).
	r := h.start(Config{DedupHorizon: 48 * time.Hour}, nil)
	waitFolded(t, r.svc, h.lastSeq())
	var got ledger.Counters
	r.svc.Ledger(func(l *ledger.Ledger) { got = l.Totals(time.Time{}, time.Time{}, "") })
	if want := h.expected(pubs, nil); got != want {
		t.Fatalf("folded %+v, want %+v", got, want)
	}
	if dup := testutil.ToFloat64(r.svc.m.duplicate); dup != float64(len(pubs)) {
		t.Fatalf("duplicates skipped: %v, want %d", dup, len(pubs))
	}
	rep := h.audit(h.base, h.base.Add(48*time.Hour))
	if len(rep.Differences) != 0 || rep.LastSeq < uint64(2*len(pubs)) || rep.EventsReplayed != int64(rep.LastSeq) {
		t.Fatalf("audit: %+v", rep)
	}
}

// A late event lands in its own (past) minute; a correction changes only
// the bucket of the request it corrects.
func TestLateEventAndCorrection(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	r := h.start(Config{}, nil)
	now := time.Now().UTC()
	at := now.Truncate(time.Minute)
	var pubs []pub
	for i := range 20 {
		u := recorded(h, i, "acme", "key_1", "m2", events.EndpointChatCompletions, at.Add(time.Duration(i)*time.Second), 100, 0, 10, "ok")
		pubs = append(pubs, pub{ev: u, id: u.RequestID})
	}
	lateAt := at.Add(-time.Hour).Add(17 * time.Second)
	late := recorded(h, 100, "acme", "key_1", "m2", events.EndpointChatCompletions, lateAt, 1000, 100, 500, "ok")
	pubs = append(pubs, pub{ev: late, id: late.RequestID})
	h.publish(pubs)
	waitFolded(t, r.svc, h.lastSeq())

	from, to := at.Add(-2*time.Hour), at.Add(time.Hour)
	before := h.ledgerDump(from, to, "")
	if len(before.Data) != 2 {
		t.Fatalf("buckets: %+v", before.Data)
	}
	lb := before.Data[0]
	wantLate := ledger.Counters{Requests: 1, InputTokens: 1000, CachedInputTokens: 100, OutputTokens: 500,
		CostNano: h.cost("m2", lateAt, 1000, 100, 500, 1)}
	if lb.Start != lateAt.Truncate(time.Minute).Unix() || lb.Counters != wantLate {
		t.Fatalf("late bucket %+v, want %+v at %d", lb, wantLate, lateAt.Truncate(time.Minute).Unix())
	}
	if before.Data[1].Start != at.Unix() || before.Data[1].Requests != 20 {
		t.Fatalf("current bucket %+v", before.Data[1])
	}

	cor := events.UsageCorrectedV1{CorrectionID: "cor-1", RequestID: late.RequestID, Tenant: "acme", KeyID: "key_1", Model: "m2",
		Endpoint: events.EndpointChatCompletions, At: lateAt, DeltaPromptTokens: -200, DeltaCompletionTokens: 100, DeltaErrors: 1,
		Reason: "engine recount"}
	h.publish([]pub{{ev: cor, id: cor.CorrectionID}})
	waitFolded(t, r.svc, h.lastSeq())
	after := h.ledgerDump(from, to, "")
	if len(after.Data) != 2 || after.Data[1] != before.Data[1] {
		t.Fatalf("a correction changed another bucket: %+v -> %+v", before.Data, after.Data)
	}
	want := wantLate
	want.InputTokens, want.OutputTokens, want.Errors = 800, 600, 1
	want.CostNano += h.cost("m2", lateAt, -200, 0, 100, 1)
	if after.Data[0].Counters != want {
		t.Fatalf("corrected bucket %+v, want %+v", after.Data[0].Counters, want)
	}
	if rep := h.audit(from, to); len(rep.Differences) != 0 {
		t.Fatalf("audit: %+v", rep.Differences)
	}
}

// A price change at T applies to requests started at or after T only; the
// discount factor of an endpoint applies to its requests.
func TestPricesAndDiscounts(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	discounts := map[string]float64{events.EndpointCompletions: 0.5}
	r := h.start(Config{Discounts: discounts}, nil)
	T := h.base.Add(24 * time.Hour)
	evs := []events.UsageRecordedV1{
		recorded(h, 1, "acme", "k", "m1", events.EndpointChatCompletions, T.Add(-time.Minute), 1000, 200, 300, "ok"),
		recorded(h, 2, "acme", "k", "m1", events.EndpointChatCompletions, T.Add(time.Minute), 1000, 200, 300, "ok"),
		recorded(h, 3, "acme", "k", "m1", events.EndpointCompletions, T.Add(time.Minute), 1000, 200, 300, "ok"),
		recorded(h, 4, "acme", "k", "free", events.EndpointChatCompletions, T.Add(time.Minute), 1000, 200, 300, "ok"),
	}
	var pubs []pub
	for _, u := range evs {
		pubs = append(pubs, pub{ev: u, id: u.RequestID})
	}
	h.publish(pubs)
	waitFolded(t, r.svc, h.lastSeq())
	d := h.ledgerDump(h.base, h.base.Add(48*time.Hour), "")
	old := int64(800*2500 + 200*1250 + 300*10000) // $2.5/$1.25/$10 per Mtok → nano per token ×1000
	wantCost := map[string]int64{
		"m1/chat.completions@-1":   old,
		"m1/chat.completions@+1":   2 * old,
		"m1/completions@+1":        old, // doubled price, half price endpoint
		"free/chat.completions@+1": 0,
	}
	if len(d.Data) != 4 {
		t.Fatalf("buckets %+v", d.Data)
	}
	for _, b := range d.Data {
		side := "+1"
		if b.Start < T.Unix() {
			side = "-1"
		}
		k := b.Model + "/" + b.Endpoint + "@" + side
		if w, ok := wantCost[k]; !ok || b.CostNano != w {
			t.Errorf("%s: cost %d, want %d", k, b.CostNano, w)
		}
		if (b.Model == "free") != (b.Unpriced == 1) {
			t.Errorf("%s: unpriced %d", k, b.Unpriced)
		}
	}
	// prices op: histories and discounts in force
	var pr query.PricesReply
	if err := json.Unmarshal(h.query(query.UsageRequest{Op: query.OpPrices}), &pr); err != nil {
		t.Fatal(err)
	}
	if len(pr.Data) != 3 || pr.Discounts[events.EndpointCompletions] != 0.5 {
		t.Fatalf("prices reply %+v", pr)
	}
	// a price set while running reaches the folder
	if _, err := h.store.SetPrice(context.Background(), "free", registry.Price{EffectiveFrom: h.base, InputPerMTokUSD: 1}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := json.Unmarshal(h.query(query.UsageRequest{Op: query.OpPrices}), &pr); err != nil {
			t.Fatal(err)
		}
		if len(pr.Data) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("new price not watched")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The query subject lies under the USAGE stream's subjects: JetStream also
// stores queries and acknowledges them. Request must skip that ack, and the
// folder must ignore the stored query.
func TestQueryBesideStreamAck(t *testing.T) {
	h := newHarness(t)
	r := h.start(Config{}, nil)
	b := h.query(query.UsageRequest{Op: query.OpPrices})
	var pr query.PricesReply
	if err := json.Unmarshal(b, &pr); err != nil || pr.Object != "list" {
		t.Fatalf("reply %s", b)
	}
	b = h.query(query.UsageRequest{Op: "nope"})
	var er query.ErrorReply
	if err := json.Unmarshal(b, &er); err != nil || er.Status != 400 || er.Error.Param == nil || *er.Error.Param != "op" {
		t.Fatalf("bad op reply %s", b)
	}
	// Queries are not usage: the USAGE stream must not have captured them.
	if last := h.lastSeq(); last != 0 {
		t.Fatalf("the USAGE stream stored %d query messages", last)
	}
	_ = r
}

// An audit of a window nothing was stored in (yet) answers at once.
func TestAuditOfAnEmptyWindow(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	pubs := h.mixed(100)
	h.publish(pubs)
	r := h.start(Config{}, nil)
	waitFolded(t, r.svc, h.lastSeq())
	future := time.Now().Add(24 * time.Hour)
	rep := h.audit(future, future.Add(time.Hour))
	if rep.EventsReplayed != 0 || rep.BucketsCompared != 0 || len(rep.Differences) != 0 {
		t.Fatalf("audit of the future: %+v", rep)
	}
	// from is required; to must follow from
	for _, req := range []query.UsageRequest{{Op: query.OpAudit}, {Op: query.OpAudit, From: 100, To: 50}, {Op: query.OpLedger, From: 100, To: 100}} {
		var er query.ErrorReply
		if err := json.Unmarshal(h.query(req), &er); err != nil || er.Status != 400 || er.Error.Param == nil {
			t.Fatalf("%+v: %+v", req, er)
		}
	}
	// the ledger dump of one tenant
	d := h.ledgerDump(h.base, h.base.Add(48*time.Hour), "beta")
	var scoped []pub
	for _, p := range pubs {
		if p.ev.Subject() == events.Subject(p.ev.EventType(), "beta") {
			scoped = append(scoped, p)
		}
	}
	if got, want := sum(d.Data), h.expected(scoped, nil); got != want {
		t.Fatalf("beta's dump %+v, want %+v", got, want)
	}
}

// A LoRA adapter without a price of its own is billed at its base model's
// price; one with its own price pays that.
func TestAdapterBilledAtBasePrice(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	ctx := context.Background()
	cat, err := catalog.Open(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"m1-support", "m1-priced"} {
		if _, err := cat.AddVersion(ctx, name, events.ModelKindAdapter, "m1", catalog.Version{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.store.SetPrice(ctx, "m1-priced", registry.Price{EffectiveFrom: h.base.Add(-30 * 24 * time.Hour), InputPerMTokUSD: 1}); err != nil {
		t.Fatal(err)
	}
	r := h.start(Config{}, nil)
	T := h.base.Add(time.Hour)
	var pubs []pub
	for i, m := range []string{"m1", "m1-support", "m1-priced"} {
		u := recorded(h, i+1, "acme", "k", m, events.EndpointChatCompletions, T, 1000, 0, 300, "ok")
		pubs = append(pubs, pub{ev: u, id: u.RequestID})
	}
	h.publish(pubs)
	waitFolded(t, r.svc, h.lastSeq())
	cost := map[string]int64{}
	for _, b := range h.ledgerDump(h.base, h.base.Add(48*time.Hour), "").Data {
		cost[b.Model] += b.CostNano
	}
	if cost["m1"] == 0 || cost["m1-support"] != cost["m1"] {
		t.Errorf("adapter cost %d, base cost %d: want equal and non-zero", cost["m1-support"], cost["m1"])
	}
	if want := int64(1000 * 1000); cost["m1-priced"] != want {
		t.Errorf("priced adapter cost %d, want %d (its own price)", cost["m1-priced"], want)
	}
}
