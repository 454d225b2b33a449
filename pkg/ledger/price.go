package ledger

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/registry"
)

// PriceBook answers "what did this request cost" from every model's price
// history and a discount factor per endpoint. It is immutable once built, so
// the folder and an audit can share one without locks.
type PriceBook struct {
	prices    map[string]registry.PriceHistory
	discounts map[string]float64
}

// NewPriceBook builds a price book. Histories are copied and sorted by
// EffectiveFrom; a later history for the same model replaces an earlier one.
// discounts maps an endpoint to the factor its costs are multiplied by
// (for example {"batch": 0.5}); endpoints not listed pay the full price.
func NewPriceBook(histories []registry.PriceHistory, discounts map[string]float64) *PriceBook {
	pb := &PriceBook{
		prices:    make(map[string]registry.PriceHistory, len(histories)),
		discounts: make(map[string]float64, len(discounts)),
	}
	for _, h := range histories {
		h.Prices = slices.Clone(h.Prices)
		slices.SortStableFunc(h.Prices, func(a, b registry.Price) int { return a.EffectiveFrom.Compare(b.EffectiveFrom) })
		pb.prices[h.Model] = h
	}
	for e, f := range discounts {
		pb.discounts[e] = f
	}
	return pb
}

// Histories returns the price histories, sorted by model.
func (pb *PriceBook) Histories() []registry.PriceHistory {
	if pb == nil {
		return nil
	}
	out := make([]registry.PriceHistory, 0, len(pb.prices))
	for _, h := range pb.prices {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b registry.PriceHistory) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// Discounts returns a copy of the discount factors.
func (pb *PriceBook) Discounts() map[string]float64 {
	out := map[string]float64{}
	if pb == nil {
		return out
	}
	for e, f := range pb.discounts {
		out[e] = f
	}
	return out
}

// Discount is the factor applied to an endpoint's costs (1 by default).
func (pb *PriceBook) Discount(endpoint string) float64 {
	if pb == nil {
		return 1
	}
	if f, ok := pb.discounts[endpoint]; ok {
		return f
	}
	return 1
}

// CostNano is the cost in nano-USD of a request to model through endpoint
// at time at, with prompt tokens (of which cached were cached) and
// completion tokens; ok is false, and the cost 0, when no price of the model
// was in force at that time. Prices are USD per million tokens, so one token
// costs price×1000 nano-USD; the sum is multiplied by the endpoint's
// discount and rounded once, to the nearest nano-USD. Negative counts (the
// deltas of a correction) give negative costs.
func (pb *PriceBook) CostNano(model, endpoint string, at time.Time, prompt, cached, completion int64) (int64, bool) {
	if pb == nil {
		return 0, false
	}
	h, ok := pb.prices[model]
	if !ok {
		return 0, false
	}
	p, ok := h.At(at)
	if !ok {
		return 0, false
	}
	return costNano(p, prompt, cached, completion, pb.Discount(endpoint)), true
}

// BatchCostNano is the cost of a line of a Batch API batch: CostNano with
// the model's batch factor (registry.Price.BatchFactor: its BatchDiscount,
// by default half price) in place of the endpoint's discount.
func (pb *PriceBook) BatchCostNano(model string, at time.Time, prompt, cached, completion int64) (int64, bool) {
	if pb == nil {
		return 0, false
	}
	h, ok := pb.prices[model]
	if !ok {
		return 0, false
	}
	p, ok := h.At(at)
	if !ok {
		return 0, false
	}
	return costNano(p, prompt, cached, completion, p.BatchFactor()), true
}

func costNano(p registry.Price, prompt, cached, completion int64, factor float64) int64 {
	nano := float64(prompt-cached)*p.InputPerMTokUSD*1000 +
		float64(cached)*p.CachedInputPerMTokUSD*1000 +
		float64(completion)*p.OutputPerMTokUSD*1000
	return int64(math.Round(nano * factor))
}

// SandboxCostNano is the cost in nano-USD of sandbox usage at time at:
// microGBSeconds (gigabyte-seconds × 1e6) of exec and sessions container
// sessions, at the price of registry.SandboxPriceModel in force then
// (PerGBSecondUSD, PerSessionUSD), rounded once to the nearest nano-USD; 0
// when none is (sandboxes are not charged until an operator sets a price).
// Endpoint discounts do not apply.
func (pb *PriceBook) SandboxCostNano(at time.Time, microGBSeconds, sessions int64) int64 {
	if pb == nil {
		return 0
	}
	h, ok := pb.prices[registry.SandboxPriceModel]
	if !ok {
		return 0
	}
	p, ok := h.At(at)
	if !ok {
		return 0
	}
	// A micro-GB-second costs PerGBSecondUSD × 1e-6 USD = × 1e3 nano-USD.
	return int64(math.Round(float64(microGBSeconds)*p.PerGBSecondUSD*1e3 + float64(sessions)*p.PerSessionUSD*1e9))
}
