package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
)

// TestTraceContextReachesEngine: the client's traceparent flows from the
// edge over the bus to the worker and on to the engine, in the same trace.
func TestTraceContextReachesEngine(t *testing.T) {
	engine, base := sim(t, enginesim.Config{Models: []string{"up"}})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("POST", s.url+"/v1/chat/completions", strings.NewReader(chatBody("chat", 2, false)))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	tp := engine.LastPostHeaders().Get("traceparent")
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[1] != traceID {
		t.Fatalf("engine got traceparent %q, want trace id %s", tp, traceID)
	}
	if parts[2] == "00f067aa0ba902b7" {
		t.Fatal("the engine got the client's span id: aiforge added no span of its own")
	}
	if strings.Contains(engine.LastPostHeaders().Get("Authorization"), key) {
		t.Fatal("the tenant's API key was forwarded to the engine")
	}
}

// TestUsageRecordedOncePerRequest: every request, plain or streamed, leaves
// exactly one usage event with the engine's token counts; a request whose
// client did not ask for usage is metered all the same.
func TestUsageRecordedOncePerRequest(t *testing.T) {
	ns := natstest.Server(t)
	_, base := sim(t, enginesim.Config{Models: []string{"up"}})
	s := externalStack(t, ns.ClientURL(), []string{"all"}, nil)
	key, keyID := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")
	nc := natstest.Conn(t, ns, "reader")
	before := usageEvents(t, nc)

	ids := map[string]int{} // request id -> max_tokens
	for i := 0; i < 10; i++ {
		n := 3 + i
		body := fmt.Sprintf(`{"model":"chat","messages":[{"role":"user","content":"usage %d"}],"max_tokens":%d,"stream":%t}`, i, n, i%2 == 0)
		r := streamRawAny(t, s.url, key, body)
		ids[r] = n
	}
	var got map[string][]events.UsageRecordedV1
	eventually(t, 10*time.Second, func() bool {
		got = usageEvents(t, nc)
		return len(got)-len(before) >= len(ids)
	}, "usage events")
	for id, n := range ids {
		evs := got[id]
		if len(evs) != 1 {
			t.Fatalf("request %s: %d usage events", id, len(evs))
		}
		u := evs[0]
		if u.CompletionTokens != int64(n) || u.PromptTokens == 0 || u.Estimated || u.Status != events.UsageStatusOK ||
			u.Tenant != "acme" || u.KeyID != keyID || u.Model != "chat" || u.Endpoint != events.EndpointChatCompletions {
			t.Fatalf("request %s: usage %+v, want %d completion tokens", id, u, n)
		}
	}
}

// streamRawAny posts a chat body (streamed or not) and returns the request id.
func streamRawAny(t *testing.T, url, key, body string) string {
	t.Helper()
	if strings.Contains(body, `"stream":true`) {
		r := streamRaw(context.Background(), url, key, body, nil)
		if r.status != 200 || !r.done {
			t.Fatalf("stream: %d %v", r.status, r.events)
		}
		return r.header.Get("X-Request-Id")
	}
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.Header.Get("X-Request-Id")
}
