package usage

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
)

// UsageRecordedV4 (admission verdicts, route classes, cache hits) folds
// exactly as the V3 it extends: real-time requests at their price, batch
// lines into batch buckets, cached tokens as cached; an invalid V4 is
// skipped; the audit's replay agrees.
func TestUsageV4FoldsLikeV3(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	at0 := h.base.Add(30 * time.Hour)
	var pubs []pub
	var wantRT, wantBatch ledger.Counters
	for i := range 60 {
		at := at0.Add(time.Duration(i) * 11 * time.Second)
		u := recorded(h, i, "acme", "key_a", "m1", events.EndpointChatCompletions, at, int64(100+i), int64(i%7), int64(20+i), events.UsageStatusOK)
		v4 := events.UsageRecordedV4{UsageRecordedV3: events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: u}}}
		switch i % 4 {
		case 0:
			v4.AdmissionAction, v4.AdmissionCategory, v4.AdmissionScore = events.AdmissionFlagged, "injection", 0.93
		case 1:
			v4.Router, v4.RouteClass = "auto", "iac_devops"
		case 2: // a cache hit: every prompt token cached, nothing generated
			v4.Cache = events.CacheExact
			v4.CachedPromptTokens, v4.CompletionTokens = v4.PromptTokens, 0
		case 3:
			v4.Batch, v4.BatchID = true, "batch_1"
			v4.AdmissionAction = events.AdmissionAllowed
		}
		factor, w := 1.0, &wantRT
		if v4.Batch {
			factor, w = 0.5, &wantBatch // m1 has no batch discount: the default, half
		}
		w.Add(ledger.Counters{Requests: 1, InputTokens: v4.PromptTokens, CachedInputTokens: v4.CachedPromptTokens, OutputTokens: v4.CompletionTokens,
			CostNano: h.cost("m1", at, v4.PromptTokens, v4.CachedPromptTokens, v4.CompletionTokens, factor)})
		pubs = append(pubs, pub{ev: v4, id: u.RequestID})
	}
	// Blocked requests never reach a worker: a V4 saying so is invalid.
	bad := recorded(h, 999, "acme", "key_a", "m1", events.EndpointChatCompletions, at0, 10, 0, 1, events.UsageStatusOK)
	raw, _ := json.Marshal(events.UsageRecordedV4{UsageRecordedV3: events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: bad}}})
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	m["admission_action"] = events.AdmissionBlocked
	pubs = append(pubs, pub{ev: rawEvent{typ: events.TypeUsageRecordedV4, tenant: "acme", body: m}, id: bad.RequestID})
	if n := h.publish(pubs); n != len(pubs) {
		t.Fatalf("stored %d of %d", n, len(pubs))
	}
	r := h.start(Config{SnapshotEvery: 1000, SnapshotInterval: time.Hour}, nil)
	waitFolded(t, r.svc, h.lastSeq())
	var gotRT, gotBatch ledger.Counters
	r.svc.Ledger(func(l *ledger.Ledger) {
		for _, b := range l.Buckets(time.Time{}, time.Time{}, "") {
			if b.Batch {
				gotBatch.Add(b.Counters)
			} else {
				gotRT.Add(b.Counters)
			}
		}
	})
	if gotRT != wantRT || gotBatch != wantBatch {
		t.Fatalf("folded real-time %+v, batch %+v;\nwant %+v, %+v", gotRT, gotBatch, wantRT, wantBatch)
	}
	rep := h.audit(h.base, h.base.Add(72*time.Hour))
	if len(rep.Differences) != 0 || rep.BucketsCompared == 0 {
		t.Fatalf("audit: %d differences over %d buckets", len(rep.Differences), rep.BucketsCompared)
	}
}

// rawEvent publishes a body as it is, under a usage type.
type rawEvent struct {
	typ, tenant string
	body        map[string]any
}

func (e rawEvent) EventType() string { return e.typ }
func (e rawEvent) Subject() string   { return events.Subject(e.typ, e.tenant) }
func (e rawEvent) Validate() error   { return nil }
func (e rawEvent) MarshalJSON() ([]byte, error) {
	return json.Marshal(e.body)
}

// The fast path reads V4 as encoding/json does, and only as version 4.
func TestFastDecodeV4(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 0, 123, time.UTC)
	u := events.UsageRecordedV1{RequestID: "req_1", Tenant: "acme", KeyID: "key_a", Model: "m1", Endpoint: events.EndpointChatCompletions,
		PromptTokens: 10, CachedPromptTokens: 10, Status: events.UsageStatusOK, Reporter: "w", StartedAt: at, FinishedAt: at.Add(time.Second)}
	v4 := events.UsageRecordedV4{UsageRecordedV3: events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: u,
		Reservations: []events.Reservation{{Key: "t.acme.2026-03", NanoUSD: 5}}}},
		AdmissionAction: events.AdmissionFlagged, AdmissionCategory: "jailbreak", AdmissionScore: 0.875, Router: "auto", RouteClass: "c", Cache: events.CacheSimilar}
	body, err := json.Marshal(v4)
	if err != nil {
		t.Fatal(err)
	}
	var in interner
	var got events.UsageRecordedV3
	var x v4Fields
	if !fastDecodeRecorded(body, &got, 4, &in, &x) {
		t.Fatalf("fast path refused %s", body)
	}
	if d := x.v4(got); d.AdmissionAction != v4.AdmissionAction || d.AdmissionScore != v4.AdmissionScore || d.Cache != v4.Cache ||
		d.Router != v4.Router || d.RouteClass != v4.RouteClass || d.AdmissionCategory != v4.AdmissionCategory ||
		d.PromptTokens != 10 || d.CachedPromptTokens != 10 || len(d.Reservations) != 1 || !d.StartedAt.Equal(at) {
		t.Fatalf("fast path decoded %+v", d)
	}
	got = events.UsageRecordedV3{}
	if fastDecodeRecorded(body, &got, 3, &in, &x) {
		t.Fatal("V4 fields accepted as a V3 body")
	}
	var dec decoder
	hdr := map[string][]string{events.HeaderType: {events.TypeUsageRecordedV4}, events.HeaderID: {"req_1"}}
	_, ev, kind, err := dec.decode(hdr, body)
	if kind != decodedEvent || err != nil {
		t.Fatalf("decode: %v %v", kind, err)
	}
	if v3, ok := ev.(*events.UsageRecordedV3); !ok || v3.RequestID != "req_1" {
		t.Fatalf("decoded %T %+v, want the V3 it extends", ev, ev)
	}
}
