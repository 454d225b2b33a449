package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/natstest"
)

// TestTwoEdgesShareOneRateLimit: a key's requests per minute are counted
// across every edge replica, not per replica.
func TestTwoEdgesShareOneRateLimit(t *testing.T) {
	ns := natstest.Server(t)
	_, base := sim(t, enginesim.Config{Models: []string{"up"}})
	a := externalStack(t, ns.ClientURL(), []string{"all"}, nil)
	b := externalStack(t, ns.ClientURL(), []string{"edge"}, nil)
	a.tenantKey("acme")
	var k struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	if err := a.admin.Do(context.Background(), "POST", "/admin/v1/keys", map[string]any{"tenant": "acme", "rpm": 20}, &k); err != nil {
		t.Fatal(err)
	}
	a.register("chat", base, "up")
	// Wait for the model with a key that has no limit, so the limited key's
	// window starts untouched.
	free, _ := a.tenantKey("acme")
	a.waitServed(free, "chat")
	b.waitServed(free, "chat")
	// Keep the burst inside one minute window.
	if s := time.Now().Second(); s > 45 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}

	var admitted, limited atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func(s *stack) {
			defer wg.Done()
			req, _ := http.NewRequest("POST", s.url+"/v1/chat/completions", strings.NewReader(chatBody("chat", 2, false)))
			req.Header.Set("Authorization", "Bearer "+k.Key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			body, _ := readAll(resp.Body)
			resp.Body.Close()
			if resp.Header.Get("x-ratelimit-limit-requests") != "20" || resp.Header.Get("x-ratelimit-reset-requests") == "" {
				t.Errorf("missing rate limit headers: %v", resp.Header)
			}
			switch resp.StatusCode {
			case 200:
				admitted.Add(1)
			case 429:
				limited.Add(1)
				if errorCode(string(body)) != "rate_limit_exceeded" {
					t.Errorf("429 body %s", body)
				}
				if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
					t.Errorf("Retry-After = %q", resp.Header.Get("Retry-After"))
				}
			default:
				t.Errorf("status %d: %s", resp.StatusCode, body)
			}
		}(s)
	}
	wg.Wait()
	if admitted.Load() != 20 || limited.Load() != 40 {
		t.Fatalf("admitted %d, limited %d; want 20 and 40 across both replicas", admitted.Load(), limited.Load())
	}
}
