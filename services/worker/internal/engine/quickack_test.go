package engine

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

func quickAckClient(on bool) *http.Client {
	dial := (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	if on {
		dial = QuickAck(dial)
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 4}}
}

func post(tb testing.TB, hc *http.Client, url, body string) string {
	tb.Helper()
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("%v %d %s", err, resp.StatusCode, b)
	}
	return string(b)
}

// TestQuickAckConn checks that QuickAck wraps TCP connections (on Linux) and
// that requests over them, kept alive, work.
func TestQuickAckConn(t *testing.T) {
	var dialed net.Conn
	dial := QuickAck(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		dialed = c
		return c, err
	})
	_, base, closeSim, err := enginesim.Start(enginesim.LlamaLike(enginesim.Config{Models: []string{"m"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSim()
	var wrapped net.Conn
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		wrapped = c
		return c, err
	}}}
	for i := 0; i < 3; i++ {
		if b := post(t, hc, base+"/chat/completions", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`); !strings.Contains(b, `"usage"`) {
			t.Fatalf("answer %s", b)
		}
	}
	if _, same := wrapped.(*net.TCPConn); same == quickAckSupported || (wrapped == dialed) == quickAckSupported {
		t.Fatalf("connection %T (wrapping supported: %v)", wrapped, quickAckSupported)
	}
}

// BenchmarkSplitWrites measures non-streamed calls to an engine that writes
// headers and body apart without TCP_NODELAY, on a kept-alive connection:
// an ordinary client (which waits for its delayed ACK), one with quick
// ACKs, and an ordinary client asking for a stream and reading it whole.
//
//	go test -run - -bench SplitWrites -benchtime 200x ./services/worker/internal/engine/
func BenchmarkSplitWrites(b *testing.B) {
	_, base, closeSim, err := enginesim.Start(enginesim.LlamaLike(enginesim.Config{Models: []string{"m"}}))
	if err != nil {
		b.Fatal(err)
	}
	defer closeSim()
	const plain = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"x"}]}`
	stream := strings.Replace(plain, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	for _, tc := range []struct {
		name  string
		quick bool
		body  string
	}{{"plain", false, plain}, {"plain-quickack", true, plain}, {"stream-assembled", false, stream}, {"stream-assembled-quickack", true, stream}} {
		b.Run(tc.name, func(b *testing.B) {
			hc := quickAckClient(tc.quick)
			post(b, hc, base+"/chat/completions", tc.body)
			for b.Loop() {
				post(b, hc, base+"/chat/completions", tc.body)
			}
		})
	}
}
