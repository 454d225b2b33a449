package inference

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/registry"
	"github.com/aiforge/aiforge/pkg/spend"
	"github.com/aiforge/aiforge/services/edge/internal/httpapi"
)

// DefaultOutputReserve is the number of output tokens per choice a
// request that sets no max_tokens is counted for (tokens per minute,
// budget reservations) and, on a key or tenant with a hard budget, capped
// at.
const DefaultOutputReserve = 4096

// admitted is what admission set aside for a request.
type admitted struct {
	// id is the request id; budget holds are reserved under it.
	id           string
	reservations []events.Reservation
	// capTokens, when positive, is the max_tokens the request is sent
	// with: what its budget reservation pays for.
	capTokens int64
}

// admitRate enforces a key's rate limits across every edge replica, once
// per request whatever model serves it; reserve enforces the key's and
// tenant's hard budgets for one model. Rate limits count the request against
// the key's window of this minute; budgets reserve the request's largest
// possible cost (prompt bytes as an upper bound of its tokens, plus
// max_tokens for each of its choices), or what the budgets have left when
// that is less but still pays for the prompt and one token per choice. The
// request then goes out with max_tokens capped at what the reservation pays
// for (and at DefaultOutputReserve when it set none), so its cost never
// passes its reservation and a hard budget is not overshot (the bound is in
// pkg/spend's doc). The usage service releases each reservation when it
// settles the request's usage event; a reservation whose request died
// unsettled expires after HoldTTL.
func (s *Service) admitRate(ctx context.Context, w http.ResponseWriter, key *registry.Key, endpoint string, p Request) *refusal {
	now := s.now()
	output, choices := outputBound(endpoint, p)
	if key.RPM > 0 || key.TPM > 0 {
		tokens := spend.AddSat(p.InputBytes, spend.MulSat(output, choices))
		d, err := spend.Admit(ctx, s.d.Rates, key.ID, spend.RateLimit{RPM: key.RPM, TPM: key.TPM}, tokens, now)
		if err != nil {
			s.log.Error("rate limit check failed", "key_id", key.ID, "err", err)
			return &refusal{Error: httpapi.StoreError(ctx, err, "rate limiter", "The rate limiter could not be reached."), model: p.Model}
		}
		setRateHeaders(w.Header(), d)
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.Reset.Seconds()))))
			msg := fmt.Sprintf("Rate limit reached for %s per minute on this key (limit %d). Retry after %s.", d.Exceeded, limitOf(d), d.Reset.Round(time.Second))
			if d.Exceeded == "tokens" {
				msg = fmt.Sprintf("Rate limit reached for tokens per minute on this key (limit %d, %d left this minute); this request counts for up to %d tokens. Retry after %s.",
					d.LimitTokens, d.RemainingTokens, tokens, d.Reset.Round(time.Second))
			}
			return &refusal{Error: &contracts.Error{Status: http.StatusTooManyRequests, Type: d.Exceeded, Code: contracts.CodeRateLimited, Message: msg}, model: p.Model}
		}
	}
	return nil
}

// outputBound is the output tokens per choice a request is counted for,
// and its choices.
func outputBound(endpoint string, p Request) (output, choices int64) {
	choices = max(p.Choices, 1)
	output = p.MaxTokens
	if endpoint == events.EndpointEmbeddings || endpoint == events.EndpointRerank {
		output, choices = 0, 1
	} else if output == 0 {
		output = DefaultOutputReserve
	}
	return output, choices
}

// reserve reserves the request's budget at model's price under id (see
// admitRate). Each model a request is tried on is reserved for under its
// own id, at its own price, so that the served model's usage event settles
// exactly its own hold.
func (s *Service) reserve(ctx context.Context, key *registry.Key, endpoint string, p Request, model, id string) (admitted, *refusal) {
	a := admitted{id: id}
	now := s.now()
	output, choices := outputBound(endpoint, p)
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
	price := s.priceAt(model, now)
	inCost := spend.CostNano(p.InputBytes, 0, price.InputPerMTokUSD, 0)
	want := spend.AddSat(inCost, spend.CostNano(0, spend.MulSat(output, choices), 0, price.OutputPerMTokUSD))
	least := want
	if output > 0 {
		least = spend.AddSat(inCost, spend.CostNano(0, choices, 0, price.OutputPerMTokUSD))
	}
	hold := spend.Hold{ID: id, NanoUSD: want, ExpiresUnixMS: now.Add(s.d.HoldTTL).UnixMilli()}
	granted, err := spend.Reserve(ctx, s.d.Budgets, limits, hold, least, now)
	if err != nil {
		var be *spend.BudgetError
		if errors.As(err, &be) {
			return a, &refusal{Error: budgetRefusal(be, want, least), model: p.Model}
		}
		s.log.Error("budget reservation failed", "key_id", key.ID, "err", err)
		return a, &refusal{Error: httpapi.StoreError(ctx, err, "budget store", "The budget store could not be reached."), model: p.Model}
	}
	for _, l := range limits {
		a.reservations = append(a.reservations, events.Reservation{Key: l.Key, NanoUSD: granted})
	}
	if output > 0 && spend.NanoPerToken(price.OutputPerMTokUSD) > 0 {
		// What the grant pays for, per choice.
		per := spend.AffordableTokens(spend.SubFloor(granted, inCost), spend.MulSat(output, choices), price.OutputPerMTokUSD) / choices
		if per < output || p.MaxTokens == 0 {
			a.capTokens = max(per, 1)
		}
	}
	return a, nil
}

// budgetRefusal is the 429 of a request the budget cannot pay for: what is
// left, and what the request could have cost.
func budgetRefusal(be *spend.BudgetError, want, least int64) *contracts.Error {
	scope := "key"
	if strings.HasPrefix(be.Key, "t.") {
		scope = "tenant"
	}
	return &contracts.Error{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Code: contracts.CodeBudgetExceeded,
		Message: fmt.Sprintf("The budget of this %s is used up for the current period: $%.6f left of $%.6f (after spend and requests in flight). "+
			"This request could cost up to $%.6f, and at least $%.6f for its prompt and one output token.",
			scope, spend.NanoToUSD(be.RemainingNano), spend.NanoToUSD(be.LimitNano), spend.NanoToUSD(want), spend.NanoToUSD(least))}
}

// release gives back reservations of a request that never reached a worker
// (so no usage event will settle them).
func (s *Service) release(id string, rs []events.Reservation) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range rs {
		if err := spend.Release(ctx, s.d.Budgets, r.Key, id, s.now()); err != nil {
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

// priceAt is model's price in force at now; zero (free) when it has none.
func (s *Service) priceAt(model string, now time.Time) registry.Price {
	h, ok := s.d.Directory.Price(model)
	if !ok {
		return registry.Price{}
	}
	p, _ := h.At(now)
	return p
}
