package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
)

// at is minute m after t0, plus s seconds.
func at(m, s int) time.Time {
	return t0.Add(time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
}

func recAt(id string, m int) *events.UsageRecordedV1 {
	return rec(id, "acme", "k1", "m1", events.EndpointChatCompletions, at(m, 7), 10, 0, 5, events.UsageStatusOK)
}

// A ledger folding more than H of event time remembers only the ids of the
// last H (plus the clock's own minute), however many it applied.
func TestDedupHorizonBoundsTheIDsRemembered(t *testing.T) {
	pb := book(nil)
	const perMinute, minutes, horizon = 10, 6 * 60, 60
	l := New(WithDedupHorizon(horizon * time.Minute))
	var seq uint64
	maxSeen := 0
	for m := range minutes {
		for i := range perMinute {
			seq++
			id := fmt.Sprintf("r-%d-%d", m, i)
			if !l.Apply(seq, id, recAt(id, m), pb) {
				t.Fatalf("event %s refused", id)
			}
			maxSeen = max(maxSeen, l.Seen())
		}
	}
	if want := perMinute * (horizon + 1); l.Seen() != want || maxSeen != want {
		t.Fatalf("remembers %d ids (at most %d), want %d: the minutes [clock-H, clock]", l.Seen(), maxSeen, want)
	}
	if l.Applied() != perMinute*minutes || l.BeyondHorizon() != 0 {
		t.Fatalf("applied %d, beyond horizon %d", l.Applied(), l.BeyondHorizon())
	}
	if !l.Clock().Equal(at(minutes-1, 0)) {
		t.Fatalf("clock %v, want %v", l.Clock(), at(minutes-1, 0))
	}
	// the oldest remembered minute is clock − H; the one before is forgotten
	if !l.HasSeen(fmt.Sprintf("r-%d-0", minutes-1-horizon)) || l.HasSeen(fmt.Sprintf("r-%d-9", minutes-2-horizon)) {
		t.Fatal("the horizon is not [clock-H, clock]")
	}
	if got := l.Totals(time.Time{}, time.Time{}, ""); got.Requests != perMinute*minutes {
		t.Fatalf("buckets lost requests: %+v", got)
	}

	// for ever: nothing is forgotten
	f := New(WithDedupHorizon(0))
	for m := range minutes {
		id := fmt.Sprint("r-", m)
		f.Apply(uint64(m+1), id, recAt(id, m), pb)
	}
	if f.Seen() != minutes || f.DedupHorizon() != 0 || f.BeyondHorizon() != 0 {
		t.Fatalf("for ever: %d ids, horizon %v, beyond %d", f.Seen(), f.DedupHorizon(), f.BeyondHorizon())
	}
	if New().DedupHorizon() != DefaultDedupHorizon || New(WithDedupHorizon(90*time.Second)).DedupHorizon() != 2*time.Minute {
		t.Fatal("horizon default or rounding wrong")
	}
}

// Duplicates whose minute is within H of the clock are dropped; one older
// is applied (its original may have been forgotten) and counted.
func TestDedupWithinAndBeyondHorizon(t *testing.T) {
	pb := book(nil)
	l := New(WithDedupHorizon(time.Hour))
	seq := uint64(0)
	apply := func(id string, m int) bool {
		seq++
		return l.Apply(seq, id, recAt(id, m), pb)
	}
	for m := range 200 {
		if !apply(fmt.Sprint("r", m), m) {
			t.Fatalf("r%d refused", m)
		}
		// a retried publish of an event of H ago, and one of a minute ago
		if m >= 60 && apply(fmt.Sprint("r", m-60), m-60) {
			t.Fatalf("at minute %d: the duplicate of minute %d (within H) was applied", m, m-60)
		}
		if m >= 1 && apply(fmt.Sprint("r", m-1), m-1) {
			t.Fatalf("at minute %d: the duplicate of minute %d was applied", m, m-1)
		}
	}
	if l.Applied() != 200 || l.BeyondHorizon() != 0 {
		t.Fatalf("applied %d, beyond %d; want 200, 0", l.Applied(), l.BeyondHorizon())
	}
	// clock 199: minute 138 is beyond H; its id was forgotten, so a copy
	// counts again, flagged
	if !apply("r138", 138) || l.BeyondHorizon() != 1 {
		t.Fatalf("a copy beyond the horizon: applied %d, beyond %d", l.Applied(), l.BeyondHorizon())
	}
	// ... and is remembered from then on at the clock: its retry is dropped
	if apply("r138", 138) {
		t.Fatal("the retry of an event applied beyond the horizon was applied")
	}

	// A late correction of an old request (beyond H) is applied once, and
	// its retry is dropped until the clock moved H past its folding.
	cor := &events.UsageCorrectedV1{CorrectionID: "c1", RequestID: "r3", Tenant: "acme", KeyID: "k1", Model: "m1",
		Endpoint: events.EndpointChatCompletions, At: at(3, 7), DeltaPromptTokens: 5, Reason: "recount"}
	seq++
	if !l.Apply(seq, "c1", cor, pb) || l.BeyondHorizon() != 2 {
		t.Fatalf("late correction: beyond %d", l.BeyondHorizon())
	}
	for m := 200; m < 259; m++ {
		apply(fmt.Sprint("r", m), m)
	}
	seq++
	if l.Apply(seq, "c1", cor, pb) {
		t.Fatal("a correction retried within H of its folding was applied twice")
	}
	if b := l.Buckets(at(3, 0), at(4, 0), ""); len(b) != 1 || b[0].InputTokens != 10+5 {
		t.Fatalf("corrected bucket %+v", b)
	}

	// A late event within the horizon is remembered at the clock, so a
	// copy is still dropped after its own minute left the horizon.
	if !apply("late", 230) {
		t.Fatal("late event refused")
	}
	for m := 259; m < 300; m++ {
		apply(fmt.Sprint("r", m), m)
	}
	if l.Clock().Sub(at(230, 0)) <= time.Hour {
		t.Fatal("the test must move minute 230 beyond the horizon")
	}
	before := l.BeyondHorizon()
	if apply("late", 230) || l.BeyondHorizon() != before {
		t.Fatal("the copy of a late event, folded less than H ago, was applied")
	}
}

// stream is a random usage stream over 8h of event time: mostly in order,
// with late events, corrections of old requests and duplicates (near and
// far).
func stream(n int) []func(l *Ledger, pb *PriceBook) {
	r := rand.New(rand.NewPCG(7, 11))
	var out []func(l *Ledger, pb *PriceBook)
	var ids []string
	clock := 0
	for i := range n {
		seq := uint64(i + 1)
		switch x := r.IntN(100); {
		case x < 8 && len(ids) > 0: // a duplicate, near or far
			j := len(ids) - 1 - r.IntN(min(len(ids), 1+r.IntN(4)*400))
			id := ids[j]
			m := mustMinute(id)
			out = append(out, func(l *Ledger, pb *PriceBook) { l.Apply(seq, id, recAt(id, m), pb) })
		case x < 10: // a correction of an older request
			m := max(0, clock-r.IntN(300))
			id := fmt.Sprintf("c-%d-%d", i, m)
			cor := &events.UsageCorrectedV1{CorrectionID: id, RequestID: "r", Tenant: "acme", KeyID: "k1", Model: "m1",
				Endpoint: events.EndpointChatCompletions, At: at(m, 1), DeltaPromptTokens: 1, Reason: "x"}
			out = append(out, func(l *Ledger, pb *PriceBook) { l.Apply(seq, id, cor, pb) })
		default:
			if r.IntN(4) == 0 {
				clock++
			}
			m := clock
			if x < 15 {
				m = max(0, clock-r.IntN(120)) // late
			}
			id := fmt.Sprintf("r-%d-%d", i, m)
			ids = append(ids, id)
			ev := rec(id, fmt.Sprint("t", r.IntN(3)), "k1", "m1", events.EndpointChatCompletions, at(m, r.IntN(60)), 10, 1, 3, "ok")
			out = append(out, func(l *Ledger, pb *PriceBook) { l.Apply(seq, id, ev, pb) })
		}
	}
	return out
}

func mustMinute(id string) int {
	var i, m int
	if _, err := fmt.Sscanf(strings.ReplaceAll(id, "-", " "), "r %d %d", &i, &m); err != nil {
		panic(id)
	}
	return m
}

// Folding the same stream gives Equal ledgers (and equal snapshots) whether
// from scratch or from a snapshot taken midway, forgotten ids included.
func TestReplayIsDeterministic(t *testing.T) {
	pb := book(nil)
	evs := stream(4000)
	opt := WithDedupHorizon(30 * time.Minute)
	fold := func(l *Ledger, evs []func(*Ledger, *PriceBook)) *Ledger {
		for _, f := range evs {
			f(l, pb)
		}
		return l
	}
	a := fold(New(opt), evs)
	b := fold(New(opt), evs)
	if !Equal(a, b) {
		t.Fatal("two folds of the same stream differ")
	}
	if a.BeyondHorizon() == 0 || a.Applied() == uint64(len(evs)) || a.Seen() >= int(a.Applied()) {
		t.Fatalf("the stream must exercise the horizon: applied %d of %d, beyond %d, remembered %d",
			a.Applied(), len(evs), a.BeyondHorizon(), a.Seen())
	}
	for _, cut := range []int{1, 1000, 2345, 3999} {
		mid := fold(New(opt), evs[:cut])
		snap, err := mid.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		c := New(opt)
		if err := json.Unmarshal(snap, c); err != nil {
			t.Fatal(err)
		}
		if !Equal(mid, c) {
			t.Fatalf("cut %d: the snapshot changed the ledger", cut)
		}
		fold(c, evs[cut:])
		if !Equal(a, c) {
			t.Fatalf("cut %d: folding on from a snapshot differs from folding from scratch", cut)
		}
		// and a clone with its ids folds on the same way
		d := fold(mid.Clone(time.Time{}, time.Time{}, "", true), evs[cut:])
		if !Equal(a, d) {
			t.Fatalf("cut %d: folding on from a clone differs", cut)
		}
	}
	sa, _ := a.MarshalJSON()
	sb, _ := json.Marshal(b)
	if !bytes.Equal(sa, sb) {
		t.Fatal("equal ledgers gave different snapshots")
	}
	// a different horizon is a different ledger
	if Equal(a, fold(New(WithDedupHorizon(2*time.Hour)), evs)) {
		t.Fatal("ledgers folded with different horizons are Equal")
	}
}

// marshalV1 writes a ledger the way version 1 did.
func marshalV1(l *Ledger) ([]byte, error) {
	type wireV1 struct {
		Version int      `json:"version"`
		LastSeq uint64   `json:"last_seq"`
		Applied uint64   `json:"applied"`
		Buckets []Bucket `json:"buckets"`
		Seen    []byte   `json:"seen"`
	}
	w := wireV1{Version: 1, LastSeq: l.lastSeq, Applied: l.applied, Buckets: make([]Bucket, 0, l.nb)}
	l.Range(time.Time{}, time.Time{}, func(b Bucket) bool {
		w.Buckets = append(w.Buckets, b)
		return true
	})
	ids := make([]ID, 0, l.seen.len())
	l.seen.each(func(id ID) { ids = append(ids, id) })
	slices.SortFunc(ids, func(a, b ID) int { return bytes.Compare(a[:], b[:]) })
	w.Seen = make([]byte, 0, len(ids)*len(ID{}))
	for _, id := range ids {
		w.Seen = append(w.Seen, id[:]...)
	}
	return json.Marshal(w)
}

// v1 is the pre-horizon ledger type, for comparing snapshot costs.
type v1 struct{ *Ledger }

func (l v1) MarshalJSON() ([]byte, error) { return marshalV1(l.Ledger) }

// A version 1 snapshot decodes: its ids are remembered at its newest
// minute, kept for H from then, then forgotten.
func TestSnapshotV1Decodes(t *testing.T) {
	pb := book(nil)
	old := New(WithDedupHorizon(0)) // as before: every id
	for m := range 100 {
		id := fmt.Sprint("r", m)
		old.Apply(uint64(m+1), id, recAt(id, m), pb)
	}
	b, err := marshalV1(old)
	if err != nil {
		t.Fatal(err)
	}
	l := New(WithDedupHorizon(time.Hour))
	if err := json.Unmarshal(b, l); err != nil {
		t.Fatal(err)
	}
	if l.Seen() != 100 || l.LastSeq() != 100 || l.Applied() != 100 || l.Len() != 100 || !l.Clock().Equal(at(99, 0)) ||
		l.DedupHorizon() != time.Hour {
		t.Fatalf("v1 decoded: %d ids, seq %d, applied %d, %d buckets, clock %v, horizon %v",
			l.Seen(), l.LastSeq(), l.Applied(), l.Len(), l.Clock(), l.DedupHorizon())
	}
	if d := Diff(old, l, time.Time{}, time.Time{}); len(d) != 0 {
		t.Fatalf("buckets differ: %+v", d)
	}
	// every old id is kept for H from the newest minute, even minute 0's
	for m := 100; m <= 159; m++ {
		id := fmt.Sprint("r", m)
		l.Apply(uint64(m+1), id, recAt(id, m), pb)
	}
	if l.Apply(1000, "r0", recAt("r0", 0), pb) || l.Seen() != 160 {
		t.Fatalf("an id of the v1 snapshot was forgotten within H of it: %d ids", l.Seen())
	}
	l.Apply(1001, "r160", recAt("r160", 160), pb)
	if l.Seen() != 61 || l.HasSeen("r99") || !l.HasSeen("r100") {
		t.Fatalf("H after the v1 snapshot its ids are forgotten: %d ids remembered", l.Seen())
	}
	// and the ledger now writes version 2
	b2, _ := l.MarshalJSON()
	if !bytes.HasPrefix(b2, []byte(`{"version":2,`)) {
		t.Fatalf("snapshot %.40s", b2)
	}

	// an empty v1 ledger
	e, _ := marshalV1(New())
	if err := json.Unmarshal(e, New()); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotV2DecodingChecks(t *testing.T) {
	pb := book(nil)
	l := New(WithDedupHorizon(10 * time.Minute))
	for m := range 30 {
		id := fmt.Sprint("r", m)
		l.Apply(uint64(m+1), id, recAt(id, m), pb)
	}
	b, _ := l.MarshalJSON()
	// a smaller horizon forgets at once what is older than it
	s := New(WithDedupHorizon(5 * time.Minute))
	if err := json.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	if l.Seen() != 11 || s.Seen() != 6 || !s.HasSeen("r24") || s.HasSeen("r23") {
		t.Fatalf("seen %d, with a smaller horizon %d", l.Seen(), s.Seen())
	}
	// JSON through encoding/json's escapes still decodes
	var generic map[string]any
	_ = json.Unmarshal(b, &generic)
	re, _ := json.Marshal(generic)
	back := New(WithDedupHorizon(10 * time.Minute))
	if err := json.Unmarshal(re, back); err != nil || !Equal(l, back) {
		t.Fatalf("re-encoded snapshot: %v", err)
	}
	esc := New()
	if err := json.Unmarshal([]byte(`{"version":2,"clock":5,"seen":[{"minute":5,"ids":"AAAAAAAAAAAAAAAAAAAAAA\u003d\u003d"}]}`), esc); err != nil ||
		esc.Seen() != 1 || !esc.hasClock || esc.clock != 5 {
		t.Fatalf("escaped ids: %v, %d ids", err, esc.Seen())
	}
	// whitespace and another key order take encoding/json's way
	spaced := New()
	if err := spaced.UnmarshalJSON([]byte(` { "seen" : [ { "ids" : "AAAAAAAAAAAAAAAAAAAAAQ==" , "minute" : 5 } ] , "clock" : 5 , "version" : 2 } `)); err != nil ||
		spaced.Seen() != 1 {
		t.Fatalf("spaced snapshot: %v, %d ids", err, spaced.Seen())
	}
	for name, bad := range map[string]string{
		"descending":   `{"version":2,"clock":5,"seen":[{"minute":4,"ids":""},{"minute":3,"ids":""}]}`,
		"after clock":  `{"version":2,"clock":5,"seen":[{"minute":6,"ids":""}]}`,
		"no clock":     `{"version":2,"seen":[{"minute":6,"ids":""}]}`,
		"short id":     `{"version":2,"clock":5,"seen":[{"minute":5,"ids":"AAAA"}]}`,
		"not base64":   `{"version":2,"clock":5,"seen":[{"minute":5,"ids":"!!!!"}]}`,
		"twice":        `{"version":2,"clock":5,"seen":[{"minute":4,"ids":"AAAAAAAAAAAAAAAAAAAAAA=="},{"minute":5,"ids":"AAAAAAAAAAAAAAAAAAAAAA=="}]}`,
		"v1 short ids": `{"version":1,"seen":"AAAA"}`,
		"v1 groups":    `{"version":1,"seen":[]}`,
		"v2 string":    `{"version":2,"seen":""}`,
		"v2 bad group": `{"version":2,"clock":5,"seen":[{"minute":"5","ids":""}]}`,
	} {
		if err := json.Unmarshal([]byte(bad), New()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// BenchmarkSnapshot compares the snapshot of a ledger remembering 1M ids:
// v1 as the usage service wrote it (json.Marshal of the version 1 form)
// against v2 (MarshalJSON called directly), and decoding both (v1 through
// this version's decoder).
func BenchmarkSnapshot(b *testing.B) {
	pb := book(nil)
	l := New(WithDedupHorizon(0))
	ev := rec("x", "acme", "k1", "m1", events.EndpointChatCompletions, t0, 100, 10, 50, "ok")
	const n = 1_000_000
	for i := range n {
		ev.StartedAt = t0.Add(time.Duration(i) * 100 * time.Millisecond) // 600 per minute
		l.Apply(uint64(i+1), fmt.Sprint("req-", i), ev, pb)
	}
	var v1b, v2b []byte
	b.Run("marshal/v1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v1b, _ = json.Marshal(v1{l})
		}
		b.ReportMetric(float64(len(v1b)), "bytes")
	})
	b.Run("marshal/v2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v2b, _ = l.MarshalJSON()
		}
		b.ReportMetric(float64(len(v2b)), "bytes")
	})
	// v1 as the usage service read it (json.Unmarshal), v2 as it does now
	b.Run("unmarshal/v1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = json.Unmarshal(v1b, New(WithDedupHorizon(0)))
		}
	})
	b.Run("unmarshal/v2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = New(WithDedupHorizon(0)).UnmarshalJSON(v2b)
		}
	})
}
