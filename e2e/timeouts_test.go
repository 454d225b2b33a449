package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

// TestTTFTTimeoutThroughTheStack: a model registered with a TTFT timeout
// answers a stream whose engine hangs before its first token with an
// OpenAI-shaped 504 engine_timeout, instead of holding it for the
// 10-minute request timeout.
func TestTTFTTimeoutThroughTheStack(t *testing.T) {
	s := startStack(t, stackOpts{targets: []string{"all"}})
	sm, base := sim(t, enginesim.Config{Models: []string{"up"}})
	body := map[string]any{"name": "chat", "engine": map[string]any{"base_url": base, "model": "up", "ttft_timeout": "200ms"}}
	if err := s.admin.Do(context.Background(), "POST", "/admin/v1/models", body, nil); err != nil {
		t.Fatal(err)
	}
	key, _ := s.tenantKey("acme")
	s.waitServed(key, "chat")

	sm.SetTiming(time.Hour, 0)
	st, b := s.post(key, "/v1/chat/completions", chatBody("chat", 4, true))
	if st != http.StatusGatewayTimeout || !strings.Contains(string(b), `"code":"engine_timeout"`) {
		t.Fatalf("hung engine: %d %s; want 504 engine_timeout", st, b)
	}
	eventually(t, 10*time.Second, func() bool { return sm.Stats().InFlight == 0 }, "the engine request to be canceled")
}
