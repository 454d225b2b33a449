package e2e

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/natstest"
)

func TestRevokedKeyOnTwoReplicas(t *testing.T) {
	ns := natstest.Server(t)
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, TokensPerSecond: 20})
	a := externalStack(t, ns.ClientURL(), []string{"all"}, nil)
	b := externalStack(t, ns.ClientURL(), []string{"edge"}, nil)
	key, id := a.tenantKey("acme")
	a.register("chat", base, "up")
	a.waitServed(key, "chat")
	b.waitServed(key, "chat")

	// A stream in flight on replica b.
	streamed := make(chan sseResult, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		streamed <- streamRaw(context.Background(), b.url, key, chatBody("chat", 400, true), func(int, string) {
			once.Do(func() { close(started) })
		})
	}()
	<-started

	revokedAt := time.Now()
	if err := a.admin.Do(context.Background(), "DELETE", "/admin/v1/keys/"+id, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*stack{a, b} {
		eventually(t, 5*time.Second, func() bool {
			st, body := s.post(key, "/v1/chat/completions", chatBody("chat", 1, false))
			return st == http.StatusUnauthorized && errorCode(string(body)) == "invalid_api_key"
		}, "401 after revocation on "+s.url)
	}
	t.Logf("revocation refused on both replicas after %s", time.Since(revokedAt))

	r := <-streamed
	if r.done {
		t.Fatal("stream of a revoked key ended with [DONE]")
	}
	if code := errorCode(r.events[len(r.events)-1]); code != "api_key_revoked" {
		t.Fatalf("stream ended with %q, want api_key_revoked", r.events[len(r.events)-1])
	}
}

func TestMalformedAndOversizedBodies(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"up"}})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")

	deep := strings.Repeat("[", 200000) + strings.Repeat("]", 200000)
	cases := []struct {
		name, body string
		status     int
		param      string
	}{
		{"not json", `{"model":`, 400, ""},
		{"not an object", `[1,2,3]`, 400, ""},
		{"missing model", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model"},
		{"model not a string", `{"model":7,"messages":[{"role":"user","content":"x"}]}`, 400, "model"},
		{"stream not a bool", `{"model":"chat","stream":"yes","messages":[{"role":"user","content":"x"}]}`, 400, "stream"},
		{"missing messages", `{"model":"chat"}`, 400, "messages"},
		{"empty messages", `{"model":"chat","messages":[]}`, 400, "messages"},
		{"messages not an array", `{"model":"chat","messages":"hi"}`, 400, "messages"},
		{"deeply nested", `{"model":"chat","messages":` + deep + `}`, 400, ""},
		{"stream_options without stream", `{"model":"chat","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, 400, "stream_options"},
		{"oversized", `{"model":"chat","messages":[{"role":"user","content":"` + strings.Repeat("a", 17<<20) + `"}]}`, 413, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, body := s.post(key, "/v1/chat/completions", c.body)
			if st != c.status {
				t.Fatalf("status %d, want %d: %.300s", st, c.status, body)
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := jsonUnmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == nil {
				t.Fatalf("not an OpenAI error: %.300s", body)
			}
			if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
				t.Fatalf("param = %v, want %q (%s)", e.Error.Param, c.param, body)
			}
		})
	}
	// The edge is still healthy after all that.
	if st, body := s.post(key, "/v1/chat/completions", chatBody("chat", 2, false)); st != 200 {
		t.Fatalf("after bad input: %d %s", st, body)
	}
	// A key without access to the model gets 403; no key 401.
	limited, _ := s.tenantKey("acme", "other-model")
	if st, body := s.post(limited, "/v1/chat/completions", chatBody("chat", 2, false)); st != 403 || errorCode(string(body)) != "model_not_allowed" {
		t.Fatalf("limited key: %d %s", st, body)
	}
	if st, _ := s.post("", "/v1/chat/completions", chatBody("chat", 2, false)); st != 401 {
		t.Fatalf("no key: %d", st)
	}
}

func TestConcurrentStreams(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, TokensPerSecond: 200})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")

	const n = 32
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"chat","messages":[{"role":"user","content":"stream %d"}],"max_tokens":20,"stream":true,"stream_options":{"include_usage":true}}`, i)
			r := streamRaw(context.Background(), s.url, key, body, nil)
			if r.status != 200 || !r.done {
				errs <- fmt.Sprintf("stream %d: status %d done %v err %v", i, r.status, r.done, r.readErr)
				return
			}
			last := r.events[len(r.events)-1]
			if !strings.Contains(last, `"completion_tokens":20`) {
				errs <- fmt.Sprintf("stream %d: last chunk %s", i, last)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestSlowClientBoundedMemory: a client that stops reading slows the worker
// and the engine down instead of making the edge buffer the whole answer.
func TestSlowClientBoundedMemory(t *testing.T) {
	engine, base := sim(t, enginesim.Config{Models: []string{"up"}})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")

	const total = 1000000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/v1/chat/completions", strings.NewReader(chatBody("chat", total, true)))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	// Stop reading. The engine must stall well before the answer is done.
	var last int64 = -1
	stable := 0
	eventually(t, 60*time.Second, func() bool {
		time.Sleep(200 * time.Millisecond)
		cur := engine.Stats().TokensSent
		if cur == last {
			stable++
		} else {
			stable = 0
		}
		last = cur
		return stable >= 3
	}, "engine stalled behind the slow client")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("engine stalled after %d of %d tokens; heap in use %d MiB", last, total, ms.HeapInuse>>20)
	if last >= total/2 {
		t.Fatalf("engine produced %d of %d tokens for a client that read 4 KiB: no backpressure", last, total)
	}
	// Reading again resumes the stream.
	var read atomic.Int64
	go func() {
		for {
			n, err := resp.Body.Read(buf)
			read.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	eventually(t, 20*time.Second, func() bool { return engine.Stats().TokensSent > last+1000 }, "stream resumed")
	cancel()
	eventually(t, 10*time.Second, func() bool { return engine.Stats().Canceled >= 1 }, "engine request canceled after the client left")
}

// TestGracefulShutdownWithOpenStreams: on shutdown the edge stops taking
// requests but lets open streams finish.
func TestGracefulShutdownWithOpenStreams(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, TokensPerSecond: 40})
	s := startStack(t, stackOpts{noCleanup: true})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")

	const n = 4
	results := make(chan sseResult, n)
	var startedWG sync.WaitGroup
	startedWG.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			var once sync.Once
			results <- streamRaw(context.Background(), s.url, key, chatBody("chat", 30, true), func(int, string) { once.Do(startedWG.Done) })
		}()
	}
	startedWG.Wait()
	stopErr := make(chan error, 1)
	go func() { stopErr <- s.stop() }()
	eventually(t, 5*time.Second, func() bool {
		resp, err := http.Get(s.url + "/readyz")
		if err != nil {
			return true
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}, "not ready while draining")
	for i := 0; i < n; i++ {
		r := <-results
		if r.status != 200 || !r.done || len(r.events) < 30 {
			t.Fatalf("stream cut by shutdown: status %d done %v events %d err %v", r.status, r.done, len(r.events), r.readErr)
		}
	}
	if err := <-stopErr; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
