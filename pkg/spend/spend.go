// Package spend keeps the shared counters that admission reads across every
// edge replica: budget entries (spend settled by the usage service plus money
// reserved by edges for requests in flight) and rate-limit windows. Both live
// in JetStream KV and change only by compare-and-set, so concurrent edges
// never overshoot what they reserved.
//
// Money is int64 nano-USD (1e-9 USD): exact, and the same whichever order
// the events are summed in.
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

// KeyEntry and TenantEntry name the budget entry of a key or tenant in a
// period.
func KeyEntry(keyID, periodID string) string     { return "k." + keyID + "." + periodID }
func TenantEntry(tenant, periodID string) string { return "t." + tenant + "." + periodID }

// Entry is one budget counter.
type Entry struct {
	SpentNano    int64 `json:"spent_nano"`
	ReservedNano int64 `json:"reserved_nano"`
	// LastSeq is the last USAGE stream sequence settled into this entry;
	// settling is skipped for sequences at or below it, so a usage service
	// that replays after a crash never settles an event twice.
	LastSeq uint64 `json:"last_seq"`
	// SoftAlerted is set once the soft budget alert of the period was sent.
	SoftAlerted bool `json:"soft_alerted,omitempty"`
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

// Reserve sets amount aside in every entry, in order, if each entry's spend
// plus reservations stays within its limit after adding it: spend may then
// exceed a limit only by what was reserved for requests in flight. On
// refusal it releases what it reserved so far and returns ErrBudgetExceeded
// naming the entry.
func Reserve(ctx context.Context, kv jetstream.KeyValue, limits []Limit, amount int64) error {
	for i, l := range limits {
		_, _, err := update(ctx, kv, l.Key, func(e *Entry) (bool, error) {
			if e.SpentNano+e.ReservedNano+amount > l.LimitNano || e.SpentNano >= l.LimitNano {
				return false, fmt.Errorf("%w: %s", ErrBudgetExceeded, l.Key)
			}
			e.ReservedNano += amount
			return true, nil
		})
		if err != nil {
			for _, done := range limits[:i] {
				_ = Release(ctx, kv, done.Key, amount)
			}
			return err
		}
	}
	return nil
}

// Release gives back a reservation that will not be settled (the request
// never reached a worker).
func Release(ctx context.Context, kv jetstream.KeyValue, key string, amount int64) error {
	_, _, err := update(ctx, kv, key, func(e *Entry) (bool, error) {
		e.ReservedNano = max(e.ReservedNano-amount, 0)
		return true, nil
	})
	return err
}

// Settle adds spent and releases reserved in the entry for the usage event
// at stream sequence seq, once: an entry that already saw seq is left alone.
// It returns the entry after the change and whether it changed.
func Settle(ctx context.Context, kv jetstream.KeyValue, key string, seq uint64, spentNano, releasedNano int64) (Entry, bool, error) {
	return update(ctx, kv, key, func(e *Entry) (bool, error) {
		if seq <= e.LastSeq {
			return false, nil
		}
		e.SpentNano += spentNano
		e.ReservedNano = max(e.ReservedNano-releasedNano, 0)
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
