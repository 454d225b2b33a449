// Package spend keeps the shared counters that admission reads across every
// edge replica: budget entries (spend settled by the usage service plus money
// reserved by edges for requests in flight) and rate-limit windows. Both live
// in JetStream KV and change only by compare-and-set, so concurrent edges
// never overshoot what they reserved.
//
// Money is int64 nano-USD (1e-9 USD): exact, and the same whichever order
// the events are summed in. Sums and products saturate (AddSat, MulSat,
// CostNano): no request can wrap a counter round.
//
// # Reservations and the budget bound
//
// Admission reserves, in the entry of every hard budget that applies (the
// key's and the tenant's), a Hold of what the request can cost at most,
// capped by what the budget has left: Reserve grants min(wanted, room) as
// long as the room is at least the least the request needs (its input and
// one output token). The edge then caps the request's max_tokens at what
// the grant pays for, so the engine cannot generate more than was
// reserved. The usage service releases the hold by request id when it
// settles the request's usage event.
//
// Each entry changes only by compare-and-set and a grant never exceeds the
// room, so at every moment, for each entry with limit L,
//
//	spent + Σ live holds ≤ L
//
// and, once nothing is in flight, the spend S of the period is bounded by
//
//	S ≤ L + Σ over settled requests of max(0, cost − hold) + Σ cost of requests settled after their hold expired
//
// Both sums are zero when the engine honours max_tokens, a request's
// prompt has no more tokens than bytes (the reservation counts bytes) and
// the hold outlives the request plus the settlement lag (HoldTTL). So with
// the defaults a hard budget is never overshot, even by 50 concurrent
// clients: the tests in this package and e2e assert S ≤ L.
//
// A hold carries a deadline (ExpiresUnixMS). An edge or worker killed with
// -9 never publishes the usage event that would release its holds; every
// later Reserve, Release and Settle on the entry drops expired holds, so
// the budget they held serves again once they expire, with no sweeper to
// run. Readers use Entry.Live to leave expired holds out.
package spend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/kv"
)

// NanoPerUSD converts USD to nano-USD.
const NanoPerUSD = 1e9

// USDToNano converts dollars to nano-dollars, rounding to the nearest.
func USDToNano(usd float64) int64 { return int64(math.Round(usd * NanoPerUSD)) }

// NanoToUSD converts nano-dollars to dollars.
func NanoToUSD(n int64) float64 { return float64(n) / NanoPerUSD }

// DefaultHoldTTL is how long a reservation counts when its request's usage
// never settles. It must exceed the longest a request can run plus the
// usage service's settlement lag, or the bound in the package doc grows by
// the cost of the requests that outlive it.
const DefaultHoldTTL = 15 * time.Minute

// Budget periods.
const (
	PeriodDaily   = "daily"
	PeriodWeekly  = "weekly"
	PeriodMonthly = "monthly"
	PeriodTotal   = "total"
)

// PeriodID names the period that contains t, in UTC: "total", "d20261129",
// "w2026-48" (ISO week), "m202611".
func PeriodID(period string, t time.Time) string {
	t = t.UTC()
	switch period {
	case PeriodDaily:
		return "d" + t.Format("20060102")
	case PeriodWeekly:
		y, w := t.ISOWeek()
		return fmt.Sprintf("w%04d-%02d", y, w)
	case PeriodMonthly:
		return "m" + t.Format("200601")
	}
	return "total"
}

// PeriodEnd is when the period containing t ends (the budget resets); the
// zero time for a total budget.
func PeriodEnd(period string, t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch period {
	case PeriodDaily:
		return day.AddDate(0, 0, 1)
	case PeriodWeekly:
		wd := int(day.Weekday()+6) % 7 // Monday = 0
		return day.AddDate(0, 0, 7-wd)
	case PeriodMonthly:
		return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// KeyEntry and TenantEntry name the budget entry of a key or tenant in a
// period.
func KeyEntry(keyID, periodID string) string     { return "k." + keyID + "." + periodID }
func TenantEntry(tenant, periodID string) string { return "t." + tenant + "." + periodID }

// Entry is one budget counter.
type Entry struct {
	SpentNano int64 `json:"spent_nano"`
	// ReservedNano is the sum of Holds, kept so readers need not add them.
	ReservedNano int64 `json:"reserved_nano"`
	// Holds are the reservations of requests in flight, each with the
	// deadline after which it no longer counts (see the package doc).
	Holds []Hold `json:"holds,omitempty"`
	// LastSeq is the last USAGE stream sequence settled into this entry;
	// settling is skipped for sequences at or below it, so a usage service
	// that replays after a crash never settles an event twice.
	LastSeq uint64 `json:"last_seq"`
	// SoftAlerted is set once the soft budget alert of the period was sent.
	SoftAlerted bool `json:"soft_alerted,omitempty"`
}

// Hold is money set aside for one request in flight.
type Hold struct {
	// ID is the request id; the usage event of the request releases the
	// hold by it.
	ID      string `json:"id"`
	NanoUSD int64  `json:"nano_usd"`
	// ExpiresUnixMS is when the hold stops counting: a request whose usage
	// has not settled by then is taken to have died with its edge or
	// worker.
	ExpiresUnixMS int64 `json:"expires_unix_ms"`
}

// Live is e as of now: expired holds left out.
func (e Entry) Live(now time.Time) Entry {
	e.Holds = append([]Hold(nil), e.Holds...)
	e.prune(now)
	return e
}

// prune drops the holds that expired at now and recomputes ReservedNano
// from the holds (an entry written before holds existed keeps no
// reservation: it is treated as expired).
func (e *Entry) prune(now time.Time) {
	ms := now.UnixMilli()
	kept := e.Holds[:0]
	var sum int64
	for _, h := range e.Holds {
		if h.ExpiresUnixMS > ms {
			kept = append(kept, h)
			sum = AddSat(sum, h.NanoUSD)
		}
	}
	if len(kept) == 0 {
		kept = nil
	}
	e.Holds, e.ReservedNano = kept, sum
}

// drop removes the hold id, reporting whether it was there.
func (e *Entry) drop(id string) bool {
	for i, h := range e.Holds {
		if h.ID == id {
			e.Holds = append(e.Holds[:i], e.Holds[i+1:]...)
			e.ReservedNano = SubFloor(e.ReservedNano, h.NanoUSD)
			return true
		}
	}
	return false
}

// RemainingNano is what the limit leaves for new reservations.
func (e Entry) RemainingNano(limitNano int64) int64 {
	return SubFloor(limitNano, AddSat(e.SpentNano, e.ReservedNano))
}

// ErrConflict is returned when a compare-and-set kept failing (it wraps
// kv.ErrConflict).
var ErrConflict = errors.New("spend: too many concurrent updates")

// update applies fn to the entry under key by compare-and-set (kv.Update),
// a missing entry being zero. fn returns false to leave the entry unchanged;
// its errors come back as they are.
func update(ctx context.Context, b jetstream.KeyValue, key string, fn func(*Entry) (bool, error)) (Entry, bool, error) {
	var fnErr error
	e, written, err := kv.Update(ctx, b, key, func(e *Entry, _ bool) error {
		changed, err := fn(e)
		if fnErr = err; err != nil {
			return err
		}
		if !changed {
			return kv.ErrNoChange
		}
		return nil
	})
	if err != nil && !errors.Is(err, fnErr) {
		err = storeErr(err)
	}
	return e, written, err
}

// storeErr marks an error of the store: a lost race is ErrConflict.
func storeErr(err error) error {
	if errors.Is(err, kv.ErrConflict) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return fmt.Errorf("spend: %w", err)
}

// Get reads an entry; a missing entry is zero.
func Get(ctx context.Context, b jetstream.KeyValue, key string) (Entry, error) {
	e, _, err := kv.Get[Entry](ctx, b, key)
	if errors.Is(err, kv.ErrNotFound) {
		return Entry{}, nil
	}
	if err != nil {
		return Entry{}, fmt.Errorf("spend: %w", err)
	}
	return e, nil
}

// Limit is a hard budget to check one entry against.
type Limit struct {
	Key       string
	LimitNano int64
}

// ErrBudgetExceeded is returned by Reserve when a hard budget has no room.
var ErrBudgetExceeded = errors.New("spend: budget exceeded")

// BudgetError is a refusal of Reserve: the entry Key had only
// RemainingNano left (limit minus spend minus live reservations), less
// than the request needed at least. It matches ErrBudgetExceeded.
type BudgetError struct {
	Key           string
	LimitNano     int64
	RemainingNano int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%s: %s (%d of %d nano-USD left)", ErrBudgetExceeded, e.Key, e.RemainingNano, e.LimitNano)
}

func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// Reserve sets aside, under the hold h.ID in every entry of limits, as much
// of h.NanoUSD as every entry has room for, and at least least: an entry
// whose spend plus live reservations leaves less than least refuses the
// request (a *BudgetError). It returns the amount reserved, the same in
// every entry. Each entry changes by compare-and-set, so spend plus live
// reservations never passes a limit: spend can pass a limit only by what
// requests cost beyond their reservation (see the package doc). Expired
// holds (h.ExpiresUnixMS at or before now) are dropped on the way. On
// refusal or error it releases what it reserved so far.
func Reserve(ctx context.Context, kv jetstream.KeyValue, limits []Limit, h Hold, least int64, now time.Time) (int64, error) {
	amount := max(h.NanoUSD, 0)
	least = min(max(least, 0), amount)
	var got []int64 // what each entry reserved
	undo := func() {
		for _, done := range limits[:len(got)] {
			_ = Release(context.WithoutCancel(ctx), kv, done.Key, h.ID, now)
		}
	}
	for _, l := range limits {
		var grant int64
		_, _, err := update(ctx, kv, l.Key, func(e *Entry) (bool, error) {
			e.prune(now)
			e.drop(h.ID) // a retried admission replaces its own hold
			room := e.RemainingNano(l.LimitNano)
			if room < least || e.SpentNano >= l.LimitNano {
				return false, &BudgetError{Key: l.Key, LimitNano: l.LimitNano, RemainingNano: room}
			}
			grant = min(amount, room)
			e.Holds = append(e.Holds, Hold{ID: h.ID, NanoUSD: grant, ExpiresUnixMS: h.ExpiresUnixMS})
			e.ReservedNano = AddSat(e.ReservedNano, grant)
			return true, nil
		})
		if err != nil {
			undo()
			return 0, err
		}
		got = append(got, grant)
		amount = grant
	}
	// A later entry may have granted less: shrink the earlier holds to it.
	for i, g := range got {
		if g == amount {
			continue
		}
		if _, _, err := update(ctx, kv, limits[i].Key, func(e *Entry) (bool, error) {
			for j := range e.Holds {
				if e.Holds[j].ID == h.ID && e.Holds[j].NanoUSD > amount {
					e.ReservedNano = SubFloor(e.ReservedNano, e.Holds[j].NanoUSD-amount)
					e.Holds[j].NanoUSD = amount
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			undo()
			return 0, err
		}
	}
	return amount, nil
}

// Release gives back the hold id (a request that never reached a worker,
// so no usage event will settle it), dropping expired holds on the way.
func Release(ctx context.Context, kv jetstream.KeyValue, key, id string, now time.Time) error {
	_, _, err := update(ctx, kv, key, func(e *Entry) (bool, error) {
		n := len(e.Holds)
		e.prune(now)
		return e.drop(id) || len(e.Holds) != n, nil
	})
	return err
}

// Settle adds spent and releases the holds release in the entry for the
// usage event at stream sequence seq, once: an entry that already saw seq
// is left alone. Holds expired at now are dropped too. It returns the entry
// after the change and whether it changed.
func Settle(ctx context.Context, kv jetstream.KeyValue, key string, seq uint64, spentNano int64, release []string, now time.Time) (Entry, bool, error) {
	return update(ctx, kv, key, func(e *Entry) (bool, error) {
		if seq <= e.LastSeq {
			return false, nil
		}
		e.prune(now)
		for _, id := range release {
			e.drop(id)
		}
		e.SpentNano = AddSat(e.SpentNano, spentNano)
		e.LastSeq = seq
		return true, nil
	})
}

// MarkAlerted sets SoftAlerted; it reports false when it was already set, so
// one alert goes out per period.
func MarkAlerted(ctx context.Context, kv jetstream.KeyValue, key string) (bool, error) {
	_, changed, err := update(ctx, kv, key, func(e *Entry) (bool, error) {
		if e.SoftAlerted {
			return false, nil
		}
		e.SoftAlerted = true
		return true, nil
	})
	return changed, err
}
