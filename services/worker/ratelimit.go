package worker

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/services/worker/internal/engine"
)

// engineLimiter keeps one worker replica's requests and tokens per minute
// to an engine under the engine's own rate limits (registry.Engine RPM and
// TPM, a hosted provider's quota). Each is a token bucket holding a
// minute's worth and refilled continuously, so a burst of up to the limit
// is allowed and the rate over any minute stays under it. A request is
// counted for its prompt estimate (four bytes a token) plus its max_tokens
// when admitted, and corrected to the tokens the engine reported when it
// ends. The limits are per replica: with N replicas of an engine give each
// 1/N of the provider's quota.
type engineLimiter struct {
	rpm, tpm float64
	now      func() time.Time

	mu           sync.Mutex
	last         time.Time
	reqs, tokens float64 // available
}

func newEngineLimiter(rpm, tpm int, now func() time.Time) *engineLimiter {
	if rpm <= 0 && tpm <= 0 {
		return nil
	}
	l := &engineLimiter{rpm: float64(rpm), tpm: float64(tpm), now: now, last: now()}
	l.reqs, l.tokens = l.rpm, l.tpm
	return l
}

func (l *engineLimiter) refillLocked(now time.Time) {
	el := now.Sub(l.last).Minutes()
	if el <= 0 {
		return
	}
	l.last = now
	l.reqs = math.Min(l.rpm, l.reqs+el*l.rpm)
	l.tokens = math.Min(l.tpm, l.tokens+el*l.tpm)
}

// admit takes one request of tokens from the buckets; when over a limit it
// takes nothing and says how long until the request would fit.
func (l *engineLimiter) admit(tokens int64) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refillLocked(l.now())
	need := float64(tokens)
	if l.tpm > 0 {
		need = math.Min(need, l.tpm) // a request larger than the quota waits for a full bucket
	}
	var wait time.Duration
	if l.rpm > 0 && l.reqs < 1 {
		wait = max(wait, time.Duration((1-l.reqs)/l.rpm*float64(time.Minute)))
	}
	if l.tpm > 0 && l.tokens < need {
		wait = max(wait, time.Duration((need-l.tokens)/l.tpm*float64(time.Minute)))
	}
	if wait > 0 {
		return false, wait
	}
	if l.rpm > 0 {
		l.reqs--
	}
	if l.tpm > 0 {
		l.tokens -= need
	}
	return true, 0
}

// settle corrects a request's count from its estimate to what it used.
func (l *engineLimiter) settle(estimate, used int64) {
	if l == nil || l.tpm <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokens = math.Min(l.tpm, l.tokens+float64(min(estimate, int64(l.tpm))-used))
}

// requestTokens estimates a request's tokens: prompt bytes / 4 plus
// max_tokens (or max_completion_tokens) per choice.
func requestTokens(body []byte) int64 {
	var f struct {
		MaxTokens     int64 `json:"max_tokens"`
		MaxCompletion int64 `json:"max_completion_tokens"`
		N             int64 `json:"n"`
	}
	_ = json.Unmarshal(body, &f)
	out := max(f.MaxTokens, f.MaxCompletion, 0)
	return int64(len(body)+3)/4 + out*max(f.N, 1)
}

// admitEngine applies the engine's rate limits to a request before it is
// forwarded. Over them it answers 429 overloaded, retryable, without
// calling the engine: the edge tries another replica or the model's next
// fallback. It returns the estimate to settle, and false when it answered.
func (s *Service) admitEngine(c *engine.Call, w *bridge.ResponseWriter) (int64, bool) {
	if s.limits == nil {
		return 0, true
	}
	est := requestTokens(c.Req.Body)
	ok, wait := s.limits.admit(est)
	if ok {
		return est, true
	}
	e := contracts.ErrOverloaded(s.cfg.Model)
	e.Message = fmt.Sprintf("The engine's rate limit (%d requests, %d tokens per minute) is reached on this replica; retry in %s.",
		s.cfg.Engine.RPM, s.cfg.Engine.TPM, wait.Round(time.Millisecond))
	c.Outcome, c.Code, c.Retryable = engine.OutcomeError, contracts.CodeOverloaded, true
	_ = w.Fail(&bridge.Error{Status: http.StatusTooManyRequests, Code: contracts.CodeOverloaded, Message: e.Message, Body: e.Body(), Retryable: true})
	return 0, false
}

// settleEngine corrects the engine's token count once the request ended.
func (s *Service) settleEngine(c *engine.Call, est int64) {
	if s.limits == nil {
		return
	}
	used := est
	if c.UsageKnown {
		used = max(c.Usage.PromptTokens, 0) + max(c.Usage.CompletionTokens, 0)
	} else if c.Outcome != engine.OutcomeOK && c.Chunks == 0 {
		used = 0 // failed before the engine generated anything
	}
	s.limits.settle(est, used)
}
