package edge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/bridge"
)

// responseEvents reads a /v1/responses event stream: each event is an
// "event:" line, a "data:" line and a blank line.
type responseEvents struct {
	br *bufio.Reader
}

func (e *responseEvents) next(t *testing.T) (typ string, data map[string]any, ok bool) {
	t.Helper()
	for {
		line, err := e.br.ReadString('\n')
		if err != nil {
			if err != io.EOF || line != "" {
				t.Fatalf("stream read: %q, %v", line, err)
			}
			return "", nil, false
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
				t.Fatalf("event %s data %q: %v", typ, line, err)
			}
			if data["type"] != typ {
				t.Fatalf("event %q carries type %v", typ, data["type"])
			}
			return typ, data, true
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// A /v1/responses stream goes through the one inference path: revoking its
// key ends it with an api_key_revoked error event, it is tracked in the
// edge's metrics, and the worker sees a chat completion.
func TestResponsesStreamEndsOnKeyRevocation(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("slow")
	endpoints := make(chan string, 1)
	h.worker("slow", "w1", func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		endpoints <- req.Endpoint
		for i := 0; ; i++ {
			chunk := fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"t%d "}}]}`, i)
			if err := w.Data(ctx, []byte(chunk)); err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	secret, id := h.tenantKey("acme")
	body := `{"model":"slow","input":"hello","stream":true}`
	req, err := http.NewRequest("POST", h.url+"/v1/responses", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("responses stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if ep := <-endpoints; ep != "chat.completions" {
		t.Fatalf("the worker was asked for %q", ep)
	}
	ev := &responseEvents{br: bufio.NewReader(resp.Body)}
	for {
		typ, _, ok := ev.next(t)
		if !ok {
			t.Fatal("the stream ended before its first delta")
		}
		if typ == "response.output_text.delta" {
			break
		}
	}
	// The stream is in flight: the edge's gauge counts it.
	eventually(t, 5*time.Second, func() bool {
		return strings.Contains(h.do("GET", "/metrics", "", nil, nil).String(), `aiforge_edge_requests_in_flight{model="slow"} 1`)
	}, "the responses stream counted in flight")

	if r := h.admin("DELETE", "/admin/v1/keys/"+id, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	var lastType string
	var last map[string]any
	for {
		typ, data, ok := ev.next(t)
		if !ok {
			break
		}
		if typ == "response.completed" {
			t.Fatal("the stream of a revoked key completed")
		}
		lastType, last = typ, data
	}
	if lastType != "error" || last["code"] != "api_key_revoked" {
		t.Fatalf("stream ended with %s %v, want an api_key_revoked error event", lastType, last)
	}
	eventually(t, 5*time.Second, func() bool {
		m := h.do("GET", "/metrics", "", nil, nil).String()
		return strings.Contains(m, `aiforge_edge_request_errors_total{code="api_key_revoked",model="slow"} 1`) &&
			strings.Contains(m, `aiforge_edge_requests_total{endpoint="responses",model="slow",status="401"} 1`)
	}, "the revoked responses stream in the edge's metrics")
	apiError(t, h.do("POST", "/v1/responses", secret, body, nil), http.StatusUnauthorized, "invalid_api_key")
}
