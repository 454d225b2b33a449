package usage

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/aiforge/aiforge/pkg/ledger"
)

// The ledger remembers the ids of DedupHorizon of event time only; events
// older than that are still applied (and counted), the audit's replay
// decides the same, and a restart from the snapshot gives the same ledger.
func TestDedupHorizonBoundsMemory(t *testing.T) {
	h := newHarness(t)
	h.setPrices()
	// one event a minute over 48h (minutes 0..2879), then 120 more at
	// minutes 0..119 again: new ids, but 46h older than the newest event
	pubs := h.mixed(3000)
	if n := h.publish(pubs); n != len(pubs) {
		t.Fatalf("stored %d of %d", n, len(pubs))
	}
	cfg := Config{DedupHorizon: time.Hour, SnapshotInterval: time.Hour}
	r := h.start(cfg, nil)
	waitFolded(t, r.svc, h.lastSeq())
	var got ledger.Counters
	var seen int
	r.svc.Ledger(func(l *ledger.Ledger) { got, seen = l.Totals(time.Time{}, time.Time{}, ""), l.Seen() })
	if want := h.expected(pubs, nil); got != want {
		t.Fatalf("folded %+v, want %+v", got, want)
	}
	// minutes 2819..2879, plus the 120 late ones remembered at the clock
	if want := 61 + 120; seen != want || testutil.ToFloat64(r.svc.m.dedupIDs) != float64(want) {
		t.Fatalf("remembers %d ids (gauge %v), want %d", seen, testutil.ToFloat64(r.svc.m.dedupIDs), want)
	}
	if b := testutil.ToFloat64(r.svc.m.beyondHorizon); b != 120 {
		t.Fatalf("beyond the horizon: %v, want 120", b)
	}
	rep := h.audit(h.base, h.base.Add(48*time.Hour))
	if len(rep.Differences) != 0 {
		t.Fatalf("audit: %d differences", len(rep.Differences))
	}
	waitFolded(t, r.svc, h.lastSeq())
	r.stop(t)
	var before *ledger.Ledger
	r.svc.Ledger(func(l *ledger.Ledger) { before = l.Clone(time.Time{}, time.Time{}, "", true) })

	r2 := h.start(cfg, nil)
	var same bool
	r2.svc.Ledger(func(l *ledger.Ledger) { same = ledger.Equal(before, l) && l.DedupHorizon() == time.Hour })
	if !same {
		t.Fatal("the ledger loaded from the snapshot differs from the one saved")
	}
}
