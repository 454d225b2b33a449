package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
)

// Tenant a fills both slots of a model with streams its client does not
// read, and queues two more; tenant b's stream, queued last, is the first
// to start when one of a's slow readers gives up. Asserted by the order in
// which the streams' first chunks arrive.
func TestSlowReadersDoNotStarveAnotherTenant(t *testing.T) {
	h := newHarness(t)
	_, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	cfg := modelFor("served", "up", base)
	cfg.Engine.MaxConcurrency = 2
	h.startWorker(cfg)
	const long = `{"model":"served","messages":[{"role":"user","content":"hi"}],"max_tokens":2000}`
	waiting := func() float64 {
		m := findMetric(t, h, "aiforge_worker_requests_waiting", map[string]string{"model": "served"})
		if m == nil {
			return -1
		}
		return m.GetGauge().GetValue()
	}

	type result struct {
		name string
		err  error
	}
	firsts := make(chan string, 8)
	done := make(chan result, 8)
	stream := func(ctx context.Context, name, tenant string, stall bool) {
		req := newReq("served", events.EndpointChatCompletions, true, false, long)
		req.Tenant = tenant
		go func() {
			first := true
			_, err := h.client.Do(ctx, req, func([]byte) error {
				if first {
					first = false
					firsts <- name
					if stall { // a client that stops reading
						<-ctx.Done()
						return ctx.Err()
					}
				}
				return nil
			})
			done <- result{name, err}
		}()
	}
	ctx := testCtx(t)
	a1, stopA1 := context.WithCancel(ctx)
	a2, stopA2 := context.WithCancel(ctx)
	defer stopA2()
	stream(a1, "a1", "a", true)
	stream(a2, "a2", "a", true)
	for range 2 {
		select {
		case <-firsts:
		case <-time.After(10 * time.Second):
			t.Fatal("a's streams did not start")
		}
	}
	stream(ctx, "a3", "a", false)
	eventually(t, 10*time.Second, "a3 queued", func() bool { return waiting() == 1 })
	stream(ctx, "a4", "a", false)
	eventually(t, 10*time.Second, "a4 queued", func() bool { return waiting() == 2 })
	stream(ctx, "b1", "b", false)
	eventually(t, 10*time.Second, "b1 queued", func() bool { return waiting() == 3 })

	stopA1()
	select {
	case got := <-firsts:
		if got != "b1" {
			t.Fatalf("%s started first after a slot freed; want b1", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing started after a slot freed")
	}
	stopA2()
	for range 5 {
		select {
		case r := <-done:
			if r.name != "a1" && r.name != "a2" && r.err != nil {
				t.Fatalf("%s: %v", r.name, r.err)
			}
			if (r.name == "a1" || r.name == "a2") && !errors.Is(r.err, context.Canceled) {
				t.Fatalf("%s: %v, want canceled", r.name, r.err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("streams did not finish")
		}
	}
}
