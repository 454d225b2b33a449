package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/services/worker"
)

// sseResult is a raw view of one streamed response.
type sseResult struct {
	status  int
	header  http.Header
	events  []string
	done    bool
	readErr error
}

// streamRaw posts body and reads the SSE answer event by event. onEvent,
// when set, sees each data payload as it arrives.
func streamRaw(ctx context.Context, url, key, body string, onEvent func(i int, data string)) sseResult {
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return sseResult{readErr: err}
	}
	defer resp.Body.Close()
	r := sseResult{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		r.events = []string{string(b)}
		return r
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err != io.EOF {
				r.readErr = err
			}
			return r
		}
		line = strings.TrimRight(line, "\r\n")
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			r.done = true
			continue
		}
		r.events = append(r.events, data)
		if onEvent != nil {
			onEvent(len(r.events)-1, data)
		}
	}
}

func errorCode(payload string) string {
	var e struct {
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(payload), &e) != nil || e.Error == nil {
		return ""
	}
	return e.Error.Code
}

// usageEvents reads every usage event on the bus, keyed by request id, with
// the number of stored copies.
func usageEvents(t testing.TB, nc *nats.Conn) map[string][]events.UsageRecordedV1 {
	t.Helper()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, events.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]events.UsageRecordedV1{}
	if info.State.Msgs == 0 {
		return out
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg := events.NewRegistry(func() events.Event { return &events.UsageRecordedV1{} }, func() events.Event { return &events.UsageRecordedV2{} })
	for i := uint64(0); i < info.State.Msgs; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_, ev, err := reg.Decode(m.Headers(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		var u events.UsageRecordedV1
		switch e := ev.(type) {
		case *events.UsageRecordedV1:
			u = *e
		case *events.UsageRecordedV2:
			u = e.UsageRecordedV1
		}
		out[u.RequestID] = append(out[u.RequestID], u)
	}
	return out
}

func chatBody(model string, maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"count for me"}],"max_tokens":%d,"stream":%t}`, model, maxTokens, stream)
}

// externalStack starts a process of the given targets on a shared NATS.
func externalStack(t *testing.T, natsURL string, targets []string, mutate func(*app.Options)) *stack {
	return startStack(t, stackOpts{natsURL: natsURL, targets: targets, mutate: mutate})
}

func TestNoWorkerIs503(t *testing.T) {
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	// Bound to an engine that does not exist: the worker never starts.
	s.register("ghost", "http://127.0.0.1:1/v1", "ghost")
	start := time.Now()
	st, body := s.post(key, "/v1/chat/completions", chatBody("ghost", 2, false))
	if st != http.StatusServiceUnavailable || errorCode(string(body)) != "model_unavailable" {
		t.Fatalf("got %d %s", st, body)
	}
	t.Logf("503 after %s", time.Since(start))
}

func TestFailoverBeforeFirstToken(t *testing.T) {
	ns := natstest.Server(t)
	bad, badURL := sim(t, enginesim.Config{Models: []string{"up"}})
	good, goodURL := sim(t, enginesim.Config{Models: []string{"up"}})
	bad.SetFailure(enginesim.Failure{Mode: enginesim.FailBeforeFirstToken})

	edge := externalStack(t, ns.ClientURL(), []string{"edge"}, nil)
	for _, u := range []string{badURL, goodURL} {
		u := u
		externalStack(t, ns.ClientURL(), []string{"worker"}, func(o *app.Options) {
			o.Worker = worker.Config{Model: "chat", Engine: registryEngine(u, "up"), HeartbeatInterval: 200 * time.Millisecond}
		})
	}
	// The edge knows models from the registry; register the name (the
	// binding's engine is served by the sidecar workers above).
	s := edge
	key, _ := s.tenantKey("acme")
	if err := s.admin.Do(context.Background(), "POST", "/admin/v1/models", map[string]any{"name": "chat", "engine": map[string]any{"base_url": goodURL, "model": "up"}}, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		r := streamRaw(context.Background(), s.url, key, chatBody("chat", 3, true), nil)
		if r.status != http.StatusOK || !r.done || len(r.events) < 3 {
			t.Fatalf("request %d: status %d done %v events %v", i, r.status, r.done, r.events)
		}
		st, body := s.post(key, "/v1/chat/completions", chatBody("chat", 3, false))
		if st != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, st, body)
		}
	}
	if bad.Stats().Failed == 0 {
		t.Fatal("the failing engine was never tried; failover not exercised")
	}
	if good.Stats().Completed < 20 {
		t.Fatalf("good engine completed %d of 20", good.Stats().Completed)
	}
}

func TestWorkerKilledMidStream(t *testing.T) {
	ns := natstest.Server(t)
	engine, base := sim(t, enginesim.Config{Models: []string{"up"}, TokensPerSecond: 50})
	s := externalStack(t, ns.ClientURL(), []string{"edge"}, func(o *app.Options) { o.Edge.HeartbeatTimeout = time.Second })
	w := externalStack(t, ns.ClientURL(), []string{"worker"}, func(o *app.Options) {
		o.Worker = worker.Config{Model: "chat", Engine: registryEngine(base, "up"), HeartbeatInterval: 200 * time.Millisecond}
	})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")

	var once sync.Once
	r := streamRaw(context.Background(), s.url, key, chatBody("chat", 500, true), func(i int, _ string) {
		if i == 4 {
			// The worker process dies: its bus connection is gone without a goodbye.
			once.Do(func() { w.app.NATS().Close() })
		}
	})
	if r.status != http.StatusOK || r.done {
		t.Fatalf("status %d, done %v: a killed worker must not end with [DONE]", r.status, r.done)
	}
	last := r.events[len(r.events)-1]
	if errorCode(last) != "worker_lost" {
		t.Fatalf("last event = %s", last)
	}
	reqID := r.header.Get("X-Request-Id")
	streamed := len(r.events) - 1
	nc := natstest.Conn(t, ns, "reader")
	var got []events.UsageRecordedV1
	eventually(t, 10*time.Second, func() bool {
		got = usageEvents(t, nc)[reqID]
		return len(got) > 0
	}, "usage of the killed stream")
	time.Sleep(300 * time.Millisecond) // let any second report land before counting
	got = usageEvents(t, nc)[reqID]
	if len(got) != 1 {
		t.Fatalf("usage recorded %d times", len(got))
	}
	u := got[0]
	if u.CompletionTokens != int64(streamed) || u.PromptTokens == 0 || u.Status != events.UsageStatusError || !u.Estimated {
		t.Fatalf("usage = %+v, streamed %d chunks", u, streamed)
	}
	_ = engine
}
