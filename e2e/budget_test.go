package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/spend"
)

// TestBudgetUnderConcurrentStreams: 50 clients stream against a key with a
// small budget until they are refused. Spend plus reservations never pass
// the budget (the bound of pkg/spend: each request's max_tokens is within
// its reservation), so spend is within the budget while streams run and
// after; once everything is settled nothing is reserved.
func TestBudgetUnderConcurrentStreams(t *testing.T) {
	ns := natstest.Server(t)
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, TokensPerSecond: 400})
	s := externalStack(t, ns.ClientURL(), []string{"all"}, nil)
	ctx := context.Background()
	s.tenantKey("acme")
	// 0.001 USD per token in and out.
	if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "chat", "engine": map[string]any{"base_url": base, "model": "up"},
		"price": map[string]any{"input_per_mtok_usd": 1000, "output_per_mtok_usd": 1000}}, nil); err != nil {
		t.Fatal(err)
	}
	const budget = 0.5
	var k struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	if err := s.admin.Do(ctx, "POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "max_budget_usd": budget}, &k); err != nil {
		t.Fatal(err)
	}
	free, _ := s.tenantKey("acme")
	s.waitServed(free, "chat")

	js, _ := jetstream.New(natstest.Conn(t, ns, "budget-reader"))
	kv, err := js.KeyValue(ctx, events.BucketBudgets)
	if err != nil {
		t.Fatal(err)
	}
	entry := spend.KeyEntry(k.ID, "total")

	var admitted, refused atomic.Int64
	var maxOver atomic.Int64 // largest spend - budget seen while streams ran, in nano-USD
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Keep asking until refused several times in a row: settled
			// requests free their reservations, so a refused client may be
			// admitted again a moment later, until the budget is spent.
			for j, refusals := 0, 0; refusals < 5; j++ {
				body := fmt.Sprintf(`{"model":"chat","messages":[{"role":"user","content":"c%d r%d"}],"max_tokens":20,"stream":true}`, i, j)
				r := streamRaw(ctx, s.url, k.Key, body, nil)
				if r.status == http.StatusTooManyRequests {
					if !strings.Contains(r.events[0], `"budget_exceeded"`) {
						t.Errorf("429 without budget_exceeded: %s", r.events[0])
					}
					refused.Add(1)
					refusals++
					time.Sleep(20 * time.Millisecond)
					continue
				}
				refusals = 0
				if r.status != 200 || !r.done {
					t.Errorf("status %d done %v: %v", r.status, r.done, r.events)
					return
				}
				admitted.Add(1)
				if e, err := spend.Get(ctx, kv, entry); err == nil {
					if over := e.SpentNano - spend.USDToNano(budget); over > maxOver.Load() {
						maxOver.Store(over)
					}
					// The invariant admission keeps (pkg/spend's doc): spend +
					// live reservations never pass the budget; a request's
					// max_tokens is within what it reserved, so spend never
					// passes the budget, not even while streams run.
					if spend.AddSat(e.SpentNano, e.ReservedNano) > spend.USDToNano(budget) {
						t.Errorf("spend %d + reserved %d exceed the budget %d", e.SpentNano, e.ReservedNano, spend.USDToNano(budget))
					}
				}
			}
		}(i)
	}
	wg.Wait()
	if admitted.Load() == 0 || refused.Load() < 250 {
		t.Fatalf("admitted %d, refused %d", admitted.Load(), refused.Load())
	}
	var e spend.Entry
	eventually(t, 20*time.Second, func() bool {
		e, _ = spend.Get(ctx, kv, entry)
		return e.ReservedNano == 0 && e.SpentNano > 0
	}, "every reservation settled")
	t.Logf("admitted %d streams; spent $%.4f of a $%.2f budget; largest overshoot while running %d nano-USD",
		admitted.Load(), spend.NanoToUSD(e.SpentNano), budget, maxOver.Load())
	if e.SpentNano > spend.USDToNano(budget) || maxOver.Load() > 0 {
		t.Fatalf("settled spend %d (largest overshoot %d) exceeds the budget %d", e.SpentNano, maxOver.Load(), spend.USDToNano(budget))
	}
	// Sequential requests use up what settling gave back, then are refused.
	for i := 0; ; i++ {
		st, body := s.post(k.Key, "/v1/chat/completions", chatBody("chat", 20, false))
		if st == 429 {
			if errorCode(string(body)) != "budget_exceeded" {
				t.Fatalf("429 %s", body)
			}
			break
		}
		if st != 200 || i > 100 {
			t.Fatalf("request %d after the burst: %d %s", i, st, body)
		}
	}
	eventually(t, 20*time.Second, func() bool {
		e, _ = spend.Get(ctx, kv, entry)
		return e.ReservedNano == 0
	}, "settled")
	if e.SpentNano > spend.USDToNano(budget) {
		t.Fatalf("spend %d exceeds the budget %d", e.SpentNano, spend.USDToNano(budget))
	}
}

// budgetStack is a stack with model "chat" at $1000 per million tokens in
// and out on an engine whose answers end by themselves after 16 tokens, and
// a key of tenant acme with a hard budget; it returns the key's secret and
// budget entry and the budgets bucket.
func budgetStack(t *testing.T, budget float64) (s *stack, key, entry string, kv jetstream.KeyValue) {
	s, key, _, entry, kv = budgetStackID(t, budget)
	return s, key, entry, kv
}

func budgetStackID(t *testing.T, budget float64) (s *stack, key, keyID, entry string, kv jetstream.KeyValue) {
	t.Helper()
	ns := natstest.Server(t)
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, AnswerTokens: 16})
	s = externalStack(t, ns.ClientURL(), []string{"all"}, nil)
	ctx := context.Background()
	s.tenantKey("acme")
	if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "chat", "engine": map[string]any{"base_url": base, "model": "up"},
		"price": map[string]any{"input_per_mtok_usd": 1000, "output_per_mtok_usd": 1000}}, nil); err != nil {
		t.Fatal(err)
	}
	var k struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	if err := s.admin.Do(ctx, "POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "max_budget_usd": budget}, &k); err != nil {
		t.Fatal(err)
	}
	free, _ := s.tenantKey("acme")
	s.waitServed(free, "chat")
	js, _ := jetstream.New(natstest.Conn(t, ns, "budget-reader"))
	kv, err := js.KeyValue(ctx, events.BucketBudgets)
	if err != nil {
		t.Fatal(err)
	}
	return s, k.Key, k.ID, spend.KeyEntry(k.ID, "total"), kv
}

// TestBudgetServesWhatItCovers: a $0.05 budget on a model at $1000/M
// tokens, requests without max_tokens costing $0.018 (2 prompt tokens, 16
// answer tokens): sequential requests are served while the budget covers
// them (the last one possibly cut short with finish_reason "length"), spend
// never passes the budget, and the 429 says what is left and what the
// request could have cost.
func TestBudgetServesWhatItCovers(t *testing.T) {
	const budget = 0.05
	s, key, keyID, entry, kv := budgetStackID(t, budget)
	ctx := context.Background()
	body := `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`
	var served []string
	for i := 0; ; i++ {
		st, resp := s.post(key, "/v1/chat/completions", body)
		if st == http.StatusTooManyRequests {
			if errorCode(string(resp)) != "budget_exceeded" || !strings.Contains(string(resp), "left of $0.050000") || !strings.Contains(string(resp), "could cost up to $") {
				t.Fatalf("429 %s", resp)
			}
			t.Logf("refused: %s", resp)
			break
		}
		if st != 200 || i > 10 {
			t.Fatalf("request %d: %d %s", i, st, resp)
		}
		var r struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(resp, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("answer %s: %v", resp, err)
		}
		served = append(served, fmt.Sprintf("%s/%d+%d", r.Choices[0].FinishReason, r.Usage.PromptTokens, r.Usage.CompletionTokens))
		// Sequential: the next request comes once this one is settled.
		eventually(t, 20*time.Second, func() bool {
			e, _ := spend.Get(ctx, kv, entry)
			return e.ReservedNano == 0 && e.LastSeq > 0
		}, "the request settled")
	}
	e, _ := spend.Get(ctx, kv, entry)
	t.Logf("served %d (%v), spent $%.3f of $%.2f", len(served), served, spend.NanoToUSD(e.SpentNano), budget)
	if len(served) < 2 || len(served) > 3 || served[0] != "stop/2+16" {
		t.Fatalf("served %v, want 2 or 3 requests, the first whole", served)
	}
	if e.SpentNano > spend.USDToNano(budget) {
		t.Fatalf("spent %d past the budget", e.SpentNano)
	}
	// The admin API shows the limit, spend, reservations and what is left,
	// for the key and its tenant (which has no hard budget: no remaining).
	var k struct {
		Budget struct {
			Period       string   `json:"period"`
			LimitUSD     float64  `json:"limit_usd"`
			SpentUSD     float64  `json:"spent_usd"`
			ReservedUSD  *float64 `json:"reserved_usd"`
			RemainingUSD float64  `json:"remaining_usd"`
		} `json:"budget"`
	}
	if err := s.admin.Do(ctx, "GET", "/admin/v1/keys/"+keyID, nil, &k); err != nil {
		t.Fatal(err)
	}
	if b := k.Budget; b.Period != "total" || b.LimitUSD != budget || b.SpentUSD != spend.NanoToUSD(e.SpentNano) ||
		b.ReservedUSD == nil || *b.ReservedUSD != 0 || b.RemainingUSD != spend.NanoToUSD(spend.USDToNano(budget)-e.SpentNano) {
		t.Fatalf("key budget view %+v, entry %+v", b, e)
	}
	var tn map[string]any
	if err := s.admin.Do(ctx, "GET", "/admin/v1/tenants/acme", nil, &tn); err != nil {
		t.Fatal(err)
	}
	if b, ok := tn["budget"].(map[string]any); !ok || b["period"] != "total" || b["remaining_usd"] != nil {
		t.Fatalf("tenant view %v", tn)
	}
}

// TestBudgetReservationsOfACrashExpire: an edge killed with -9 leaves its
// reservations behind and no usage event ever settles them. Here a
// "crashed edge" reserved the key's whole budget under a short deadline:
// the key is refused until the deadline, then served again (polled, no
// sleeps), and the expired hold is gone from the entry.
func TestBudgetReservationsOfACrashExpire(t *testing.T) {
	const budget = 0.05
	s, key, entry, kv := budgetStack(t, budget)
	ctx := context.Background()
	expires := time.Now().Add(2 * time.Second)
	if _, err := spend.Reserve(ctx, kv, []spend.Limit{{Key: entry, LimitNano: spend.USDToNano(budget)}},
		spend.Hold{ID: "req_crashed", NanoUSD: spend.USDToNano(budget), ExpiresUnixMS: expires.UnixMilli()}, 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`
	if st, resp := s.post(key, "/v1/chat/completions", body); st != http.StatusTooManyRequests || !strings.Contains(string(resp), "$0.000000 left") {
		t.Fatalf("with the crashed edge's hold live: %d %s", st, resp)
	}
	var st int
	eventually(t, 30*time.Second, func() bool {
		st, _ = s.post(key, "/v1/chat/completions", body)
		return st == http.StatusOK
	}, "the key served again after the hold expired")
	if time.Now().Before(expires) {
		t.Fatal("served before the crashed hold expired")
	}
	eventually(t, 20*time.Second, func() bool {
		e, _ := spend.Get(ctx, kv, entry)
		return e.ReservedNano == 0 && e.SpentNano > 0 && len(e.Holds) == 0
	}, "the expired hold dropped and the request settled")
}

// TestBudgetOverflowInputsAreRefused: the inputs that used to wrap the
// admission arithmetic round (max_tokens of int64's largest) get a 400
// naming the parameter; n multiplies the reservation and the tokens per
// minute, so a request that could cost more than the budget or the minute
// allows is refused, and spend stays within the budget.
func TestBudgetOverflowInputsAreRefused(t *testing.T) {
	const budget = 0.05
	s, key, entry, kv := budgetStack(t, budget)
	ctx := context.Background()
	for _, c := range []struct{ extra, param string }{
		{`"max_tokens":9223372036854775807`, "max_tokens"},
		{`"max_completion_tokens":9223372036854775807`, "max_completion_tokens"},
		{`"max_tokens":2147483649`, "max_tokens"},
		{`"n":9223372036854775807`, "n"},
	} {
		body := `{"model":"chat","messages":[{"role":"user","content":"hi"}],` + c.extra + `}`
		st, resp := s.post(key, "/v1/chat/completions", body)
		if st != http.StatusBadRequest || !strings.Contains(string(resp), `"param":"`+c.param+`"`) {
			t.Errorf("%s: %d %s", c.extra, st, resp)
		}
	}
	// 128 choices of at least one token each cost more than $0.05 at
	// $1000/M: refused before the engine is asked.
	st, resp := s.post(key, "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}],"n":128,"max_tokens":100}`)
	if st != http.StatusTooManyRequests || errorCode(string(resp)) != "budget_exceeded" {
		t.Fatalf("n=128: %d %s", st, resp)
	}
	// A key with 2,000 tokens per minute: 3 choices of 1,000 count 3,000.
	var k struct {
		Key string `json:"key"`
	}
	if err := s.admin.Do(ctx, "POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "tpm": 2000}, &k); err != nil {
		t.Fatal(err)
	}
	st, resp = s.post(k.Key, "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}],"n":3,"max_tokens":1000}`)
	if st != http.StatusTooManyRequests || errorCode(string(resp)) != "rate_limit_exceeded" || !strings.Contains(string(resp), "counts for up to 3018 tokens") {
		t.Fatalf("tpm with n=3: %d %s", st, resp)
	}
	if st, resp = s.post(k.Key, "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":9223372036854775807}`); st != http.StatusBadRequest {
		t.Fatalf("tpm key, max_tokens overflow: %d %s", st, resp)
	}
	if e, _ := spend.Get(ctx, kv, entry); e.SpentNano != 0 || e.ReservedNano != 0 {
		t.Fatalf("refused requests spent or reserved: %+v", e)
	}
}

// TestBudgetConcurrentRequestsWithoutMaxTokens: 50 clients at once, none
// setting max_tokens, against a $0.20 budget: each is granted what is left
// (capping its max_tokens), so spend plus reservations never pass the
// budget and settled spend ends within it. A request without max_tokens
// wants 4,096 tokens ($4): the first takes all that is left and the others
// are refused until it settles (a client asks again then), so they are
// served one after another until less than a request's least is left.
func TestBudgetConcurrentRequestsWithoutMaxTokens(t *testing.T) {
	const budget = 0.20
	s, key, entry, kv := budgetStack(t, budget)
	ctx := context.Background()
	var served, refused, cut atomic.Int64
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			for j := 0; ; j++ {
				body := fmt.Sprintf(`{"model":"chat","messages":[{"role":"user","content":"c%d r%d"}]}`, i, j)
				st, resp := s.post(key, "/v1/chat/completions", body)
				if st == http.StatusTooManyRequests {
					refused.Add(1)
					// Refused while another request holds what is left: ask
					// again once nothing is held; refused with nothing held,
					// the budget is used up.
					e, _ := spend.Get(ctx, kv, entry)
					if e.Live(time.Now()).ReservedNano == 0 {
						return
					}
					// Poll (this goroutine must not call t.Fatal).
					for deadline := time.Now().Add(20 * time.Second); e.ReservedNano != 0; e, _ = spend.Get(ctx, kv, entry) {
						if time.Now().After(deadline) {
							t.Errorf("holds of requests in flight never released: %+v", e)
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
					continue
				}
				if st != 200 {
					t.Errorf("status %d %s", st, resp)
					return
				}
				served.Add(1)
				if strings.Contains(string(resp), `"finish_reason":"length"`) {
					cut.Add(1)
				}
				if e, err := spend.Get(ctx, kv, entry); err == nil && spend.AddSat(e.SpentNano, e.ReservedNano) > spend.USDToNano(budget) {
					t.Errorf("spent %d + reserved %d > budget", e.SpentNano, e.ReservedNano)
				}
			}
		})
	}
	wg.Wait()
	var e spend.Entry
	eventually(t, 20*time.Second, func() bool {
		e, _ = spend.Get(ctx, kv, entry)
		return e.ReservedNano == 0
	}, "every reservation settled")
	t.Logf("served %d (%d cut short), refused %d; spent $%.3f of $%.2f", served.Load(), cut.Load(), refused.Load(), spend.NanoToUSD(e.SpentNano), budget)
	if served.Load() < 5 || e.SpentNano > spend.USDToNano(budget) || spend.USDToNano(budget)-e.SpentNano >= spend.USDToNano(0.030) {
		t.Fatalf("served %d, spent %d of %d", served.Load(), e.SpentNano, spend.USDToNano(budget))
	}
}
