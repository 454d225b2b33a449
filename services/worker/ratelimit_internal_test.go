package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
)

func TestEngineLimiterRequestsPerMinute(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newEngineLimiter(3, 0, func() time.Time { return now })
	for i := range 3 {
		if ok, _ := l.admit(10); !ok {
			t.Fatalf("request %d refused under the limit", i)
		}
	}
	ok, wait := l.admit(10)
	if ok || wait <= 0 || wait > 20*time.Second {
		t.Fatalf("4th request: ok %v wait %s, want refused for about 20s", ok, wait)
	}
	now = now.Add(20 * time.Second) // a third of a minute: one request back
	if ok, _ := l.admit(10); !ok {
		t.Fatal("refused after the bucket refilled one request")
	}
	if ok, _ := l.admit(10); ok {
		t.Fatal("admitted past the limit")
	}
}

func TestEngineLimiterTokensPerMinuteSettle(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newEngineLimiter(0, 1000, func() time.Time { return now })
	if ok, _ := l.admit(800); !ok {
		t.Fatal("refused under the limit")
	}
	if ok, _ := l.admit(800); ok {
		t.Fatal("admitted 1600 tokens of 1000")
	}
	l.settle(800, 100) // it used 100: 700 come back
	if ok, _ := l.admit(800); !ok {
		t.Fatal("refused after the first request settled for less")
	}
	// A request larger than the quota passes with a full bucket only.
	now = now.Add(time.Minute)
	if ok, _ := l.admit(5000); !ok {
		t.Fatal("a request over the whole quota never fits")
	}
	if newEngineLimiter(0, 0, time.Now) != nil {
		t.Fatal("no limits should need no limiter")
	}
	var none *engineLimiter
	if ok, _ := none.admit(1); !ok {
		t.Fatal("nil limiter refuses")
	}
}

func TestRequestTokens(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":10,"n":2,"messages":[]}`)
	if got, want := requestTokens(body), int64((len(body)+3)/4+20); got != want {
		t.Fatalf("requestTokens = %d, want %d", got, want)
	}
}

// Over the engine's requests per minute the worker answers 429 overloaded,
// retryable, without calling the engine; no usage event is published for
// it (nothing was spent, and the edge goes on elsewhere).
func TestWorkerEnforcesEngineRateLimit(t *testing.T) {
	h := newHarness(t)
	sim, base := startSim(t, enginesim.Config{Models: []string{"up"}})
	cfg := modelFor("served", "up", base)
	cfg.Engine.RPM = 1
	h.startWorker(cfg)
	if _, res, err := h.do(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, chatBody)); err != nil || res.Status != 200 {
		t.Fatalf("first request: %+v %v", res, err)
	}
	_, err := h.client.Once(testCtx(t), newReq("served", events.EndpointChatCompletions, false, false, chatBody), false, func([]byte) error { return nil })
	var be *bridge.Error
	if !errors.As(err, &be) || be.Status != 429 || be.Code != contracts.CodeOverloaded || !be.Retryable {
		t.Fatalf("second request: %v", err)
	}
	if n := sim.Stats().Completed; n != 1 {
		t.Fatalf("engine served %d requests, want 1", n)
	}
}
