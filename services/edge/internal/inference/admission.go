package inference

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/spend"
)

// DefaultOutputReserve is the number of output tokens a budget reservation
// assumes for a request that sets no max_tokens.
const DefaultOutputReserve = 4096

// admitted is what admission set aside for a request.
type admitted struct {
	reservations []events.Reservation
}

// admitSpend enforces a key's rate limits and the key's and tenant's hard
// budgets across every edge replica. Rate limits count the request against
// the key's window of this minute; budgets reserve the request's largest
// possible cost (prompt bytes as an upper bound of its tokens, plus
// max_tokens) so that spend can exceed a budget only by the reservations of
// requests in flight. The usage service releases each reservation when it
// settles the request's usage event.
func (s *Service) admitSpend(ctx context.Context, w http.ResponseWriter, key *registry.Key, endpoint string, p Request) (admitted, *refusal) {
	var a admitted
	now := time.Now()
	output := p.MaxTokens
	if endpoint == events.EndpointEmbeddings {
		output = 0
	} else if output == 0 {
		output = DefaultOutputReserve
	}
	if key.RPM > 0 || key.TPM > 0 {
		d, err := spend.Admit(ctx, s.d.Rates, key.ID, spend.RateLimit{RPM: key.RPM, TPM: key.TPM}, p.InputBytes+output, now)
		if err != nil {
			s.log.Error("rate limit check failed", "key_id", key.ID, "err", err)
			return a, &refusal{Error: contracts.ErrInternal("The rate limiter could not be reached."), model: p.Model}
		}
		setRateHeaders(w.Header(), d)
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Reset.Seconds()))))
			return a, &refusal{Error: &contracts.Error{Status: http.StatusTooManyRequests, Type: d.Exceeded, Code: contracts.CodeRateLimited,
				Message: fmt.Sprintf("Rate limit reached for %s per minute on this key (limit %d). Retry after %s.", d.Exceeded, limitOf(d), d.Reset.Round(time.Second))}, model: p.Model}
		}
	}

	var limits []spend.Limit
	if key.MaxBudgetUSD > 0 {
		limits = append(limits, spend.Limit{Key: spend.KeyEntry(key.ID, spend.PeriodID(key.Period(), now)), LimitNano: spend.USDToNano(key.MaxBudgetUSD)})
	}
	if t, ok := s.d.Directory.Tenant(key.Tenant); ok && t.MaxBudgetUSD > 0 {
		limits = append(limits, spend.Limit{Key: spend.TenantEntry(t.ID, spend.PeriodID(t.Period(), now)), LimitNano: spend.USDToNano(t.MaxBudgetUSD)})
	}
	if len(limits) == 0 {
		return a, nil
	}
	amount := s.estimateCost(p.Model, now, p.InputBytes, output)
	if err := spend.Reserve(ctx, s.d.Budgets, limits, amount); err != nil {
		if errors.Is(err, spend.ErrBudgetExceeded) {
			return a, &refusal{Error: &contracts.Error{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Code: contracts.CodeBudgetExceeded,
				Message: "The budget of this key or its tenant is used up for the current period."}, model: p.Model}
		}
		s.log.Error("budget reservation failed", "key_id", key.ID, "err", err)
		return a, &refusal{Error: contracts.ErrInternal("The budget store could not be reached."), model: p.Model}
	}
	for _, l := range limits {
		a.reservations = append(a.reservations, events.Reservation{Key: l.Key, NanoUSD: amount})
	}
	return a, nil
}

// release gives back reservations of a request that never reached a worker
// (so no usage event will settle them).
func (s *Service) release(rs []events.Reservation) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range rs {
		if err := spend.Release(ctx, s.d.Budgets, r.Key, r.NanoUSD); err != nil {
			s.log.Error("budget release failed", "entry", r.Key, "err", err)
		}
	}
}

func limitOf(d spend.RateDecision) int64 {
	if d.Exceeded == "tokens" {
		return d.LimitTokens
	}
	return d.LimitRequests
}

// setRateHeaders writes OpenAI's x-ratelimit-* headers.
func setRateHeaders(h http.Header, d spend.RateDecision) {
	reset := d.Reset.Round(time.Second).String()
	if d.LimitRequests > 0 {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(d.LimitRequests, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(d.RemainingRequests, 10))
		h.Set("x-ratelimit-reset-requests", reset)
	}
	if d.LimitTokens > 0 {
		h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(d.LimitTokens, 10))
		h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(d.RemainingTokens, 10))
		h.Set("x-ratelimit-reset-tokens", reset)
	}
}

// estimateCost is the largest cost a request can have at the price in
// force now; 0 when the model has no price.
func (s *Service) estimateCost(model string, now time.Time, inputTokens, outputTokens int64) int64 {
	h, ok := s.d.Directory.Price(model)
	if !ok {
		return 0
	}
	p, ok := h.At(now)
	if !ok {
		return 0
	}
	// $ per million tokens = 1000 nano-$ per token.
	return int64(math.Ceil(float64(inputTokens)*p.InputPerMTokUSD*1000 + float64(outputTokens)*p.OutputPerMTokUSD*1000))
}
