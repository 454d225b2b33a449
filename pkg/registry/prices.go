package registry

import (
	"context"
	"fmt"
	"time"
)

// Price is what a model costs, in USD per million tokens, from EffectiveFrom
// on. A price is never edited: a change is a new Price with a later
// EffectiveFrom, so past requests keep the price that was in force.
type Price struct {
	EffectiveFrom         time.Time `json:"effective_from"`
	InputPerMTokUSD       float64   `json:"input_per_mtok_usd"`
	CachedInputPerMTokUSD float64   `json:"cached_input_per_mtok_usd"`
	OutputPerMTokUSD      float64   `json:"output_per_mtok_usd"`
	// BatchDiscount is the fraction taken off batch lines (0.5: half
	// price); nil means DefaultBatchDiscount.
	BatchDiscount *float64 `json:"batch_discount,omitempty"`
	// The sandbox prices, set on the history of SandboxPriceModel only:
	// USD per gigabyte-second of agent code exec (memory limit × wall
	// time) and per container session. 0, or no price: not charged.
	PerGBSecondUSD float64 `json:"per_gb_second_usd,omitempty"`
	PerSessionUSD  float64 `json:"per_session_usd,omitempty"`
}

// SandboxPriceModel is the reserved price history name of the agent code
// sandboxes (the code interpreter): its prices' PerGBSecondUSD and
// PerSessionUSD. No model binding may take the name.
const SandboxPriceModel = "@sandbox"

// DefaultBatchDiscount is what batch lines of a model without a
// BatchDiscount pay less: half.
const DefaultBatchDiscount = 0.5

// BatchFactor is what a batch line pays of the full price.
func (p Price) BatchFactor() float64 {
	if p.BatchDiscount == nil {
		return 1 - DefaultBatchDiscount
	}
	return 1 - *p.BatchDiscount
}

// Validate checks a price.
func (p Price) Validate() error {
	if p.InputPerMTokUSD < 0 || p.CachedInputPerMTokUSD < 0 || p.OutputPerMTokUSD < 0 || p.PerGBSecondUSD < 0 || p.PerSessionUSD < 0 {
		return fmt.Errorf("%w: prices must not be negative", ErrInvalid)
	}
	if d := p.BatchDiscount; d != nil && !(*d >= 0 && *d <= 1) {
		return fmt.Errorf("%w: batch_discount must be between 0 and 1", ErrInvalid)
	}
	return nil
}

// PriceHistory is every price a model has had, oldest first. It is kept when
// the model binding is deleted, so costs can always be recomputed.
type PriceHistory struct {
	Model  string  `json:"model"`
	Prices []Price `json:"prices"`
}

// At returns the price in force at t, if any.
func (h PriceHistory) At(t time.Time) (Price, bool) {
	for i := len(h.Prices) - 1; i >= 0; i-- {
		if !h.Prices[i].EffectiveFrom.After(t) {
			return h.Prices[i], true
		}
	}
	return Price{}, false
}

// SetPrice appends a price to a model's history. EffectiveFrom defaults to
// now and may not be before the latest price's.
func (s *Store) SetPrice(ctx context.Context, model string, p Price) (PriceHistory, error) {
	if err := p.Validate(); err != nil {
		return PriceHistory{}, err
	}
	if p.EffectiveFrom.IsZero() {
		p.EffectiveFrom = time.Now().UTC()
	}
	return upsert(ctx, s.prices, ModelKey(model), func(h *PriceHistory, exists bool) error {
		if !exists {
			*h = PriceHistory{Model: model, Prices: []Price{p}}
			return nil
		}
		if n := len(h.Prices); n > 0 && p.EffectiveFrom.Before(h.Prices[n-1].EffectiveFrom) {
			return fmt.Errorf("%w: effective_from is before the current price's (%s)", ErrInvalid, h.Prices[n-1].EffectiveFrom.Format(time.RFC3339))
		}
		h.Prices = append(h.Prices, p)
		return nil
	})
}

// Prices returns a model's price history.
func (s *Store) Prices(ctx context.Context, model string) (PriceHistory, error) {
	return get[PriceHistory](ctx, s.prices, ModelKey(model))
}

// ListPrices returns every model's price history.
func (s *Store) ListPrices(ctx context.Context) ([]PriceHistory, error) {
	return list[PriceHistory](ctx, s.prices)
}

// WatchPrices delivers every price history, then each change.
func (s *Store) WatchPrices(ctx context.Context, fn func(c Change[PriceHistory], initialDone bool)) error {
	return watch(ctx, s.prices, fn)
}

// WatchTenants delivers every tenant, then each change.
func (s *Store) WatchTenants(ctx context.Context, fn func(c Change[Tenant], initialDone bool)) error {
	return watch(ctx, s.tenants, fn)
}
