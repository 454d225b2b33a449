package batch

import (
	"strings"
	"testing"
)

func TestUsageAddsEveryAnswerShape(t *testing.T) {
	var u Usage
	u.AddAnswer([]byte(`{"object":"chat.completion","usage":{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":1}}}`))
	u.AddAnswer([]byte(`{"object":"list","usage":{"prompt_tokens":7,"total_tokens":7}}`))
	u.AddAnswer([]byte(`{"object":"response","usage":{"input_tokens":5,"output_tokens":2,"total_tokens":7,"input_tokens_details":{"cached_tokens":1},"output_tokens_details":{"reasoning_tokens":2}}}`))
	u.AddAnswer([]byte(`{"object":"chat.completion"}`))
	u.AddAnswer([]byte(`not json`))
	want := Usage{InputTokens: 22, InputTokensDetails: InputTokensDetails{CachedTokens: 4}, OutputTokens: 6,
		OutputTokensDetails: OutputTokensDetails{ReasoningTokens: 3}, TotalTokens: 28}
	if u != want {
		t.Fatalf("usage %+v, want %+v", u, want)
	}
}

func TestIdempotencyKeyIsOneTokenPerTenantAndKey(t *testing.T) {
	a, b := IdempotencyKey("acme", "k 1.*>"), IdempotencyKey("acme", "k 1.*>")
	if a != b || strings.ContainsAny(a[len("idem.acme."):], ".*> ") {
		t.Fatalf("keys %q %q", a, b)
	}
	if IdempotencyKey("globex", "k 1.*>") == a || IdempotencyKey("acme", "k2") == a {
		t.Fatal("another tenant or key maps to the same bucket key")
	}
}

func TestFinalStatuses(t *testing.T) {
	for s, want := range map[string]bool{StatusValidating: false, StatusInProgress: false, StatusFinalizing: false, StatusCancelling: false,
		StatusCompleted: true, StatusFailed: true, StatusExpired: true, StatusCancelled: true} {
		if Final(s) != want {
			t.Errorf("Final(%q) = %v", s, !want)
		}
	}
}

func TestQueueAndPoolValidation(t *testing.T) {
	neg := int64(-1)
	for _, p := range []Pool{{}, {Name: "p", Weight: -1}, {Name: "p", Quotas: []Quota{{Flavor: "gpu"}, {Flavor: "gpu"}}}, {Name: "p", Quotas: []Quota{{BorrowingLimit: &neg}}}} {
		if p.Validate() == nil {
			t.Errorf("pool %+v validated", p)
		}
	}
	if err := (Pool{Name: "p", Models: []string{"m"}, Quotas: []Quota{{Flavor: "gpu", Lines: 8}}}).Validate(); err != nil {
		t.Error(err)
	}
	if (Queue{Pool: "p"}).Validate() == nil || (Queue{Pool: "p", Tenant: "t", Weight: -2}).Validate() == nil {
		t.Error("a queue without tenant or with a negative weight validated")
	}
	if w := (Queue{}).EffectiveWeight(); w != 1 {
		t.Errorf("unset weight counts as %v", w)
	}
}
