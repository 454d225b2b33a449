package e2e

import (
	"context"
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
// small budget until they are refused. Spend may exceed the budget only by
// what was reserved for requests in flight; once everything is settled
// nothing is reserved and spend is within the budget.
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
					// The invariant admission keeps: spend + reservations never
					// pass the budget, so spend alone passes it by at most what
					// is reserved for requests in flight.
					if e.SpentNano > spend.USDToNano(budget)+e.ReservedNano {
						t.Errorf("spend %d exceeds budget by more than the %d reserved", e.SpentNano, e.ReservedNano)
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
	if e.SpentNano > spend.USDToNano(budget) {
		t.Fatalf("settled spend %d exceeds the budget %d with nothing in flight", e.SpentNano, spend.USDToNano(budget))
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
