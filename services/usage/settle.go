package usage

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/spend"
)

// limitsView is the budget limits of every key and tenant, replaced whole
// when the registry changes (copy on write: the folder reads it lock-free).
type limitsView struct {
	keys    map[string]registry.Limits // key id → limits
	tenants map[string]registry.Limits // tenant id → limits
}

func hasBudget(l registry.Limits) bool { return l.MaxBudgetUSD > 0 || l.SoftBudgetUSD > 0 }

// settleItem is one event's share of one budget entry.
type settleItem struct {
	seq   uint64
	spent int64
	// release is the hold the event releases ("" for none): the edge
	// reserves under the request id.
	release string
}

// entryWork is what one budget entry gets from one batch of events, in
// stream order.
type entryWork struct {
	key   string
	items []settleItem
	// Soft budget alerting; softNano 0 means none.
	softNano int64
	alert    events.BudgetAlertV1
}

// settleBatch is the settlement of a run of consecutive stream messages.
// A batch with done set is a barrier: done is closed once every batch
// before it is settled.
type settleBatch struct {
	entries map[string]*entryWork
	order   []string // entry keys in first-seen order (deterministic work)
	events  int
	maxSeq  uint64
	done    chan struct{}
}

func newSettleBatch() *settleBatch { return &settleBatch{entries: map[string]*entryWork{}} }

func (b *settleBatch) add(key string, seq uint64, spent int64, release string) *entryWork {
	w, ok := b.entries[key]
	if !ok {
		w = &entryWork{key: key}
		b.entries[key] = w
		b.order = append(b.order, key)
	}
	w.items = append(w.items, settleItem{seq: seq, spent: spent, release: release})
	return w
}

// spender is who spent a folded event's cost, and when: a request's
// tenant, key, id and StartedAt (FinishedAt for alerts), or a sandbox
// exec's or session's (ledger.SandboxTime).
type spender struct {
	tenant, keyID, requestID string
	at, finished             time.Time
}

func requestSpender(u *events.UsageRecordedV1) spender {
	return spender{tenant: u.Tenant, keyID: u.KeyID, requestID: u.RequestID, at: u.StartedAt, finished: u.FinishedAt}
}

// plan adds one usage event's settlements to b: the key's and the
// tenant's entry of the period containing u.at (when they have a
// budget or a reservation), and the release of any other reservation (a
// request that crossed a period boundary).
func (b *settleBatch) plan(seq uint64, u spender, res []events.Reservation, cost int64, lv *limitsView) {
	var keyEntry, tenantEntry string
	var kl, tl registry.Limits
	if u.keyID != "" {
		kl = lv.keys[u.keyID]
		keyEntry = spend.KeyEntry(u.keyID, spend.PeriodID(kl.Period(), u.at))
	}
	tl = lv.tenants[u.tenant]
	tenantEntry = spend.TenantEntry(u.tenant, spend.PeriodID(tl.Period(), u.at))

	// reserved is the hold the event releases in key: the request's, when
	// the edge reserved there.
	reserved := func(key string) (string, bool) {
		for _, r := range res {
			if r.Key == key {
				return u.requestID, true
			}
		}
		return "", false
	}
	one := func(entry, scope, id string, l registry.Limits) {
		rel, hasRes := reserved(entry)
		if !hasBudget(l) && !hasRes {
			return
		}
		w := b.add(entry, seq, cost, rel)
		if l.SoftBudgetUSD > 0 {
			w.softNano = spend.USDToNano(l.SoftBudgetUSD)
			w.alert = events.BudgetAlertV1{Scope: scope, ID: id, Tenant: u.tenant, Period: l.Period(),
				PeriodID: spend.PeriodID(l.Period(), u.at), SoftBudgetUSD: l.SoftBudgetUSD, At: u.finished}
		}
	}
	if keyEntry != "" {
		one(keyEntry, "key", u.keyID, kl)
	}
	one(tenantEntry, "tenant", u.tenant, tl)
	for i, r := range res {
		if r.Key == keyEntry || r.Key == tenantEntry {
			continue
		}
		dup := false
		for _, p := range res[:i] {
			if p.Key == r.Key {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		rel, _ := reserved(r.Key)
		b.add(r.Key, seq, 0, rel)
	}
	b.events++
	b.maxSeq = seq
}

// settler settles batches in order, the entries of one batch
// concurrently; so every entry sees its events in stream order.
type settler struct {
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	log     *slog.Logger
	m       *metrics
	source  string
	workers int
	in      chan *settleBatch

	mu sync.Mutex
	// known is each entry's LastSeq as this settler last wrote or read it:
	// a batch starting after it is settled in one Settle call without
	// reading the entry first.
	known map[string]uint64
	// settled is the highest sequence whose settlement is complete.
	settled uint64
}

func newSettler(kv jetstream.KeyValue, js jetstream.JetStream, log *slog.Logger, m *metrics, source string, workers int) *settler {
	return &settler{kv: kv, js: js, log: log, m: m, source: source, workers: workers,
		in: make(chan *settleBatch, 4), known: map[string]uint64{}}
}

// run settles until ctx ends; a batch being settled when ctx ends is left
// unfinished (a later run re-settles it: Settle is idempotent).
func (st *settler) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-st.in:
			if b.done != nil {
				close(b.done)
				continue
			}
			if err := st.settle(ctx, b); err != nil {
				return
			}
			st.mu.Lock()
			st.settled = max(st.settled, b.maxSeq)
			st.mu.Unlock()
		}
	}
}

// submit hands b over; it blocks while the settler is behind.
func (st *settler) submit(ctx context.Context, b *settleBatch) error {
	select {
	case st.in <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// barrier waits until everything submitted before it is settled.
func (st *settler) barrier(ctx context.Context) error {
	done := make(chan struct{})
	if err := st.submit(ctx, &settleBatch{done: done}); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (st *settler) settle(ctx context.Context, b *settleBatch) error {
	sem := make(chan struct{}, st.workers)
	var wg sync.WaitGroup
	for _, key := range b.order {
		w := b.entries[key]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			st.retry(ctx, w)
		})
	}
	wg.Wait()
	return ctx.Err()
}

// retry settles one entry until it succeeds or ctx ends.
func (st *settler) retry(ctx context.Context, w *entryWork) {
	backoff := 50 * time.Millisecond
	for {
		err := st.settleEntry(ctx, w)
		if err == nil || ctx.Err() != nil {
			return
		}
		st.m.settleErr.Inc()
		st.log.Warn("budget settlement failed; retrying", "entry", w.key, "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (st *settler) settleEntry(ctx context.Context, w *entryWork) error {
	items := w.items
	st.mu.Lock()
	known, ok := st.known[w.key]
	st.mu.Unlock()
	if len(items) > 1 && (!ok || known >= items[0].seq) {
		// Not known to be before this batch (first batch after a start, or
		// a replay): read the entry and keep only what it has not seen.
		e, err := spend.Get(ctx, st.kv, w.key)
		if err != nil {
			return err
		}
		i := 0
		for i < len(items) && items[i].seq <= e.LastSeq {
			i++
		}
		items = items[i:]
		if len(items) == 0 {
			st.m.settleSkip.Inc()
			st.remember(w.key, e.LastSeq)
			return st.alert(ctx, w, e)
		}
	}
	var spent int64
	var release []string
	for _, it := range items {
		spent = spend.AddSat(spent, it.spent)
		if it.release != "" {
			release = append(release, it.release)
		}
	}
	// Holds carry wall-clock deadlines set by the edges: expired ones are
	// dropped by the wall clock, whatever clock reports use.
	e, changed, err := spend.Settle(ctx, st.kv, w.key, items[len(items)-1].seq, spent, release, time.Now())
	if err != nil {
		return err
	}
	if changed {
		st.m.settleOK.Inc()
	} else {
		st.m.settleSkip.Inc()
	}
	st.remember(w.key, e.LastSeq)
	return st.alert(ctx, w, e)
}

func (st *settler) remember(key string, seq uint64) {
	st.mu.Lock()
	st.known[key] = seq
	st.mu.Unlock()
}

// alert publishes the soft budget alert of an entry whose spend reached
// its soft budget, once per entry (that is, per period): the alert's id is
// derived from the entry key, so a replay inside the duplicate window is
// dropped by JetStream, and SoftAlerted is set only after the publish
// succeeded, so a crash in between cannot lose the alert.
func (st *settler) alert(ctx context.Context, w *entryWork, e spend.Entry) error {
	if w.softNano <= 0 || e.SoftAlerted || e.SpentNano < w.softNano {
		return nil
	}
	a := w.alert
	a.SpentUSD = spend.NanoToUSD(e.SpentNano)
	ack, err := events.Publish(ctx, st.js, a, events.Envelope{ID: "alert-" + w.key, Source: st.source, Tenant: a.Tenant, Time: a.At})
	if err != nil {
		return err
	}
	if _, err := spend.MarkAlerted(ctx, st.kv, w.key); err != nil {
		return err
	}
	if ack != nil && !ack.Duplicate {
		st.m.alerts.Inc()
		st.log.Info("soft budget reached", "scope", a.Scope, "id", a.ID, "tenant", a.Tenant, "period", a.PeriodID,
			"soft_budget_usd", a.SoftBudgetUSD, "spent_usd", a.SpentUSD)
	}
	return nil
}

// settledSeq is the highest sequence whose settlement is complete.
func (st *settler) settledSeq() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.settled
}
