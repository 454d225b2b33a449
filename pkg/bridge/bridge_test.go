package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
)

const model = "meta-llama/Llama-3.1-8B:q4"

// bus is one embedded NATS server for a test.
type bus struct {
	t   *testing.T
	srv *server.Server
	// stop is closed when the test ends, before the servers shut down, so
	// that blocked handlers return.
	stop     chan struct{}
	stopOnce sync.Once
}

func newBus(t *testing.T) *bus {
	t.Helper()
	b := &bus{t: t, srv: natstest.Server(t), stop: make(chan struct{})}
	t.Cleanup(b.halt)
	return b
}

func (b *bus) halt() { b.stopOnce.Do(func() { close(b.stop) }) }

func (b *bus) conn(name string) *nats.Conn { return natstest.Conn(b.t, b.srv, name) }

// server starts a bridge server on its own connection; it is shut down at
// the end of the test (after the test's own later cleanups).
func (b *bus) server(cfg bridge.ServerConfig, h bridge.Handler) (*bridge.Server, *nats.Conn) {
	b.t.Helper()
	nc := b.conn("worker-" + cfg.WorkerID)
	if cfg.Model == "" {
		cfg.Model = model
	}
	s, err := bridge.NewServer(nc, cfg, h)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		b.halt()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s, nc
}

func (b *bus) client(cfg bridge.ClientConfig) *bridge.Client {
	b.t.Helper()
	c, err := bridge.NewClient(b.conn("edge"), cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = c.Close() })
	return c
}

var reqSeq atomic.Int64

func newReq(body string) *bridge.OutRequest {
	return &bridge.OutRequest{
		Model: model, ID: fmt.Sprintf("req-%d", reqSeq.Add(1)), Tenant: "acme", KeyID: "key_1",
		Endpoint: events.EndpointChatCompletions, Body: []byte(body),
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// collect is a sink that keeps a copy of every frame.
type collect struct {
	mu     sync.Mutex
	frames []string
}

func (c *collect) sink(p []byte) error {
	c.mu.Lock()
	c.frames = append(c.frames, string(p))
	c.mu.Unlock()
	return nil
}

func (c *collect) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.frames...)
}

func eventually(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func asBridgeError(t *testing.T, err error) *bridge.Error {
	t.Helper()
	var be *bridge.Error
	if !errors.As(err, &be) {
		t.Fatalf("err = %v (%T), want a *bridge.Error", err, err)
	}
	return be
}

func TestConfigValidation(t *testing.T) {
	b := newBus(t)
	nc := b.conn("x")
	h := func(context.Context, *bridge.Request, *bridge.ResponseWriter) {}
	if _, err := bridge.NewServer(nil, bridge.ServerConfig{Model: "m", WorkerID: "w"}, h); err == nil {
		t.Error("NewServer accepted a nil connection")
	}
	if _, err := bridge.NewServer(nc, bridge.ServerConfig{Model: "m", WorkerID: "w"}, nil); err == nil {
		t.Error("NewServer accepted a nil handler")
	}
	for name, cfg := range map[string]bridge.ServerConfig{
		"no model":             {WorkerID: "w"},
		"no worker id":         {Model: "m"},
		"negative concurrency": {Model: "m", WorkerID: "w", MaxConcurrency: -1},
		"negative queue":       {Model: "m", WorkerID: "w", MaxQueue: -1},
		"negative heartbeat":   {Model: "m", WorkerID: "w", HeartbeatInterval: -time.Second},
	} {
		if _, err := bridge.NewServer(nc, cfg, h); err == nil {
			t.Errorf("%s: NewServer accepted %+v", name, cfg)
		}
	}
	if _, err := bridge.NewClient(nil, bridge.ClientConfig{}); err == nil {
		t.Error("NewClient accepted a nil connection")
	}
	if _, err := bridge.NewClient(nc, bridge.ClientConfig{Family: bridge.Family(7)}); err == nil {
		t.Error("NewClient accepted an unknown subject family")
	}
}

func TestFamilySubjects(t *testing.T) {
	for _, tc := range []struct {
		f                     bridge.Family
		subject, direct, ping string
	}{
		{bridge.FamilyInfer, events.Infer("m"), events.InferDirect("m", "w1"), events.InferPing("m")},
		{bridge.FamilyEmbed, events.Embed("m"), events.EmbedDirect("m", "w1"), events.EmbedPing("m")},
	} {
		if got := tc.f.Subject("m"); got != tc.subject {
			t.Errorf("%v.Subject = %q, want %q", tc.f, got, tc.subject)
		}
		if got := tc.f.Direct("m", "w1"); got != tc.direct {
			t.Errorf("%v.Direct = %q, want %q", tc.f, got, tc.direct)
		}
		if got := tc.f.Ping("m"); got != tc.ping {
			t.Errorf("%v.Ping = %q, want %q", tc.f, got, tc.ping)
		}
	}
	var zero bridge.ClientConfig
	if zero.Family != bridge.FamilyInfer {
		t.Errorf("the default family is %v, want infer", zero.Family)
	}
}

// TestEmbedFamily: a client on the embedding family reaches the model's
// workers on events.Embed, for embeddings; chat or completions sent there
// are refused before the handler runs, with a 403 endpoint_not_allowed
// frame that is not retried.
func TestEmbedFamily(t *testing.T) {
	b := newBus(t)
	got := make(chan *bridge.Request, 8)
	b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		got <- req
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte(`{"data":[]}`))
	})
	tap := b.conn("tap")
	seen := make(chan string, 8)
	sub, err := tap.Subscribe("aiforge.*.v1.>", func(m *nats.Msg) { seen <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := tap.Flush(); err != nil {
		t.Fatal(err)
	}
	c := b.client(bridge.ClientConfig{Family: bridge.FamilyEmbed})
	ctx := testCtx(t)

	req := newReq(`{"input":["a"]}`)
	req.Endpoint = events.EndpointEmbeddings
	var sink collect
	res, err := c.Do(ctx, req, sink.sink)
	if err != nil || res.Status != http.StatusOK || res.WorkerID != "w1" {
		t.Fatalf("embeddings on the embed family: %+v, %v", res, err)
	}
	if r := recv(t, got, "request at the worker"); r.Endpoint != events.EndpointEmbeddings || r.ID != req.ID {
		t.Fatalf("request at the worker: %+v", r)
	}
	if s := recv(t, seen, "the request on the bus"); s != events.Embed(model) {
		t.Fatalf("request published on %q, want %q", s, events.Embed(model))
	}

	for _, ep := range []string{events.EndpointChatCompletions, events.EndpointCompletions, ""} {
		req := newReq(`{"messages":[]}`)
		req.Endpoint = ep
		res, err := c.Do(ctx, req, func([]byte) error { return errors.New("no data expected") })
		be := asBridgeError(t, err)
		if be.Status != http.StatusForbidden || be.Code != contracts.CodeEndpointNotAllowed || be.Retryable || res.Retried ||
			!strings.Contains(be.Message, "embeddings endpoint only") {
			t.Fatalf("endpoint %q on the embed family: %+v, result %+v", ep, be, res)
		}
	}
	select {
	case r := <-got:
		t.Fatalf("the handler ran for a refused request: %+v", r)
	default:
	}

	// The inference family still serves every endpoint.
	res, err = b.client(bridge.ClientConfig{}).Do(ctx, newReq("{}"), func([]byte) error { return nil })
	if err != nil || res.Status != http.StatusOK {
		t.Fatalf("chat on the infer family: %+v, %v", res, err)
	}
}

// TestEmbedFamilyFailover: a retryable failure on the embedding family is
// retried on another replica found by the embedding family's ping, and
// goes out on its direct subject.
func TestEmbedFamilyFailover(t *testing.T) {
	b := newBus(t)
	b.server(bridge.ServerConfig{WorkerID: "A"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Fail(&bridge.Error{Status: http.StatusBadGateway, Code: "engine_error", Message: "engine down", Retryable: true})
	})
	b.server(bridge.ServerConfig{WorkerID: "B"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte(`{"data":[]}`))
	})
	c := b.client(bridge.ClientConfig{Family: bridge.FamilyEmbed})
	retried := 0
	for i := range 20 {
		req := newReq("{}")
		req.Endpoint = events.EndpointEmbeddings
		res, err := c.Do(testCtx(t), req, func([]byte) error { return nil })
		if err != nil || res.WorkerID != "B" {
			t.Fatalf("request %d: %+v, %v", i, res, err)
		}
		if res.Retried {
			retried++
		}
	}
	if retried == 0 {
		t.Fatal("the queue group never picked A in 20 requests")
	}
}

func TestStreamInOrderAndRequestFields(t *testing.T) {
	b := newBus(t)
	got := make(chan *bridge.Request, 1)
	const n = 300 // more than two default windows
	b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		got <- req
		for i := range n {
			if err := w.Data(ctx, []byte(strconv.Itoa(i))); err != nil {
				return
			}
		}
		_ = w.End(http.StatusOK, "text/event-stream")
	})
	c := b.client(bridge.ClientConfig{})

	req := newReq(`{"model":"x","stream":true}`)
	req.Stream, req.IncludeUsage = true, true
	req.Header = nats.Header{}
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	var sink collect
	res, err := c.Do(testCtx(t), req, sink.sink)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusOK || res.ContentType != "text/event-stream" || res.WorkerID != "w1" || res.DataFrames != n || res.Retried {
		t.Fatalf("result %+v", res)
	}
	frames := sink.get()
	if len(frames) != n {
		t.Fatalf("%d frames, want %d", len(frames), n)
	}
	for i, f := range frames {
		if f != strconv.Itoa(i) {
			t.Fatalf("frame %d = %q: out of order", i, f)
		}
	}

	r := recv(t, got, "request at the worker")
	if r.ID != req.ID || r.Tenant != "acme" || r.KeyID != "key_1" || r.Endpoint != events.EndpointChatCompletions ||
		!r.Stream || !r.IncludeUsage || string(r.Body) != `{"model":"x","stream":true}` || r.Attempt != 1 || r.FinalAttempt() {
		t.Fatalf("request at the worker: %+v", r)
	}
	if tp := r.Header.Get("traceparent"); tp != req.Header.Get("traceparent") {
		t.Fatalf("traceparent at the worker = %q", tp)
	}
	if r.ReceivedAt.IsZero() {
		t.Fatal("ReceivedAt not set")
	}
}

func TestLargeBodyInParts(t *testing.T) {
	b := newBus(t)
	body := make([]byte, 3*bridge.MaxPartSize-12345) // about 1.5 MiB: two full parts and a partial one
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Body(ctx, http.StatusCreated, "application/json", body)
	})
	c := b.client(bridge.ClientConfig{})
	var sink collect
	res, err := c.Do(testCtx(t), newReq("{}"), sink.sink)
	if err != nil {
		t.Fatal(err)
	}
	frames := sink.get()
	for i, f := range frames {
		if len(f) > bridge.MaxPartSize {
			t.Fatalf("part %d has %d bytes, more than MaxPartSize", i, len(f))
		}
	}
	if got := strings.Join(frames, ""); got != string(body) {
		t.Fatalf("body: got %d bytes, want %d (intact: %v)", len(got), len(body), got == string(body))
	}
	if res.Status != http.StatusCreated || res.ContentType != "application/json" || res.DataFrames != 3 || len(frames) != 3 {
		t.Fatalf("result %+v, %d frames", res, len(frames))
	}
}

func TestEmptyBody(t *testing.T) {
	b := newBus(t)
	b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Body(ctx, http.StatusNoContent, "", nil)
	})
	res, err := b.client(bridge.ClientConfig{}).Do(testCtx(t), newReq("{}"), func([]byte) error {
		return errors.New("no frame expected")
	})
	if err != nil || res.Status != http.StatusNoContent || res.DataFrames != 0 || res.ContentType != "" {
		t.Fatalf("Do = %+v, %v", res, err)
	}
}

func TestNoWorkerIsImmediate(t *testing.T) {
	b := newBus(t)
	c := b.client(bridge.ClientConfig{NoWorkerWait: 5 * time.Second})
	_, err := c.Do(testCtx(t), newReq("{}"), func([]byte) error { return nil })
	if !errors.Is(err, bridge.ErrNoWorker) {
		t.Fatalf("err = %v, want ErrNoWorker (from no-responders, not the NoWorkerWait timeout)", err)
	}
	if be := asBridgeError(t, err); be.Status != http.StatusServiceUnavailable || be.Retryable {
		t.Fatalf("error %+v", be)
	}
}

func TestWorkerThatNeverAcks(t *testing.T) {
	b := newBus(t)
	nc := b.conn("mute")
	var seen atomic.Int32
	sub, err := nc.QueueSubscribe(events.Infer(model), events.InferQueue(model), func(*nats.Msg) { seen.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := b.client(bridge.ClientConfig{NoWorkerWait: 200 * time.Millisecond, FailoverWait: 50 * time.Millisecond})
	_, err = c.Do(testCtx(t), newReq("{}"), func([]byte) error { return nil })
	be := asBridgeError(t, err)
	if be.Status != http.StatusServiceUnavailable || be.Code != "model_unavailable" || be.AfterData {
		t.Fatalf("error %+v, want 503 model_unavailable", be)
	}
	if seen.Load() == 0 {
		t.Fatal("the mute worker never saw the request")
	}
}

func TestFlowControlWindow(t *testing.T) {
	b := newBus(t)
	const window = 8
	const total = 10 * window
	var sent atomic.Int64
	stop := b.stop
	b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		for i := range total {
			if err := w.Data(ctx, []byte(strconv.Itoa(i))); err != nil {
				return
			}
			sent.Add(1)
		}
		_ = w.End(http.StatusOK, "text/event-stream")
	})
	c := b.client(bridge.ClientConfig{Window: window})

	release := make(chan struct{})
	var sink collect
	type result struct {
		res bridge.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		first := true
		res, err := c.Do(testCtx(t), newReq("{}"), func(p []byte) error {
			if first {
				first = false
				select {
				case <-release:
				case <-stop:
				}
			}
			return sink.sink(p)
		})
		done <- result{res, err}
	}()

	// The worker fills its window, then must stop: the edge has consumed
	// nothing, so it granted no credit.
	eventually(t, 10*time.Second, func() bool { return sent.Load() >= window }, "the worker to fill its window")
	hold := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(hold) {
		if n := sent.Load(); n > window+2 {
			t.Fatalf("worker sent %d frames with a window of %d and no credit", n, window)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := sent.Load(); n > window+2 {
		t.Fatalf("worker sent %d frames with a window of %d and no credit", n, window)
	}
	close(release)

	r := recv(t, done, "Do to return")
	if r.err != nil {
		t.Fatal(r.err)
	}
	frames := sink.get()
	if len(frames) != total || r.res.DataFrames != total {
		t.Fatalf("%d frames (result %d), want %d", len(frames), r.res.DataFrames, total)
	}
	for i, f := range frames {
		if f != strconv.Itoa(i) {
			t.Fatalf("frame %d = %q: out of order", i, f)
		}
	}
}

func TestCancel(t *testing.T) {
	for _, how := range []string{"context", "sink error"} {
		t.Run(how, func(t *testing.T) {
			b := newBus(t)
			type seen struct {
				ctxDone  bool
				canceled bool
			}
			out := make(chan seen, 1)
			stop := b.stop
			b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
				for i := 0; ; i++ {
					if err := w.Data(ctx, []byte(strconv.Itoa(i))); err != nil {
						break
					}
					select {
					case <-ctx.Done():
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
						continue
					}
					break
				}
				out <- seen{ctxDone: ctx.Err() != nil, canceled: w.Canceled()}
			})
			c := b.client(bridge.ClientConfig{})
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			gone := errors.New("client went away")
			frames := 0
			_, err := c.Do(ctx, newReq("{}"), func([]byte) error {
				frames++
				if frames == 3 {
					if how == "context" {
						cancel()
					} else {
						return gone
					}
				}
				return nil
			})
			want := context.Canceled
			if how != "context" {
				want = gone
			}
			if !errors.Is(err, want) {
				t.Fatalf("Do err = %v, want %v", err, want)
			}
			s := recv(t, out, "the handler to see the cancel")
			if !s.ctxDone || !s.canceled {
				t.Fatalf("handler saw ctx done %v, Canceled() %v; want both true", s.ctxDone, s.canceled)
			}
		})
	}
}

func TestHeartbeatsKeepSlowRequestAlive(t *testing.T) {
	b := newBus(t)
	const hb = 200 * time.Millisecond
	b.server(bridge.ServerConfig{WorkerID: "w1", HeartbeatInterval: hb}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		select {
		case <-time.After(3 * hb): // a slow engine: nothing to send yet
		case <-ctx.Done():
			return
		}
		_ = w.Data(ctx, []byte("late"))
		_ = w.End(http.StatusOK, "text/event-stream")
	})
	c := b.client(bridge.ClientConfig{HeartbeatTimeout: 2 * hb})
	var sink collect
	res, err := c.Do(testCtx(t), newReq("{}"), sink.sink)
	if err != nil {
		t.Fatalf("slow but alive worker: %v", err)
	}
	if f := sink.get(); len(f) != 1 || f[0] != "late" || res.Status != http.StatusOK {
		t.Fatalf("frames %q, result %+v", f, res)
	}
}

func TestWorkerLostMidStream(t *testing.T) {
	b := newBus(t)
	stop := b.stop
	_, wnc := b.server(bridge.ServerConfig{WorkerID: "w1", HeartbeatInterval: 50 * time.Millisecond}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Data(ctx, []byte("first"))
		select {
		case <-ctx.Done():
		case <-stop:
		}
	})
	c := b.client(bridge.ClientConfig{HeartbeatTimeout: 300 * time.Millisecond})
	res, err := c.Do(testCtx(t), newReq("{}"), func(p []byte) error {
		wnc.Close() // the worker process dies after its first frame
		return nil
	})
	be := asBridgeError(t, err)
	if be.Code != "worker_lost" || !be.AfterData || be.Status != http.StatusBadGateway || be.Retryable {
		t.Fatalf("error %+v, want 502 worker_lost after data", be)
	}
	if res.DataFrames != 1 || res.WorkerID != "w1" || res.Retried {
		t.Fatalf("result %+v", res)
	}
}

func TestRetryOnOtherReplica(t *testing.T) {
	b := newBus(t)
	var aCalls atomic.Int32
	b.server(bridge.ServerConfig{WorkerID: "A"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		aCalls.Add(1)
		if req.Attempt != 1 || req.FinalAttempt() {
			panic(fmt.Sprintf("A got attempt %d", req.Attempt))
		}
		_ = w.Fail(&bridge.Error{Status: http.StatusBadGateway, Code: "engine_error", Message: "engine down", Retryable: true})
	})
	bAttempts := make(chan int, 64)
	b.server(bridge.ServerConfig{WorkerID: "B"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		bAttempts <- req.Attempt
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte(`{"ok":true}`))
	})
	c := b.client(bridge.ClientConfig{})
	retried := 0
	for i := range 20 {
		var sink collect
		res, err := c.Do(testCtx(t), newReq("{}"), sink.sink)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if res.WorkerID != "B" || res.Status != http.StatusOK || strings.Join(sink.get(), "") != `{"ok":true}` {
			t.Fatalf("request %d: result %+v, body %q", i, res, sink.get())
		}
		attempt := recv(t, bAttempts, "B's request")
		if res.Retried {
			retried++
			if attempt != bridge.MaxAttempts {
				t.Fatalf("request %d: retry reached B as attempt %d", i, attempt)
			}
		} else if attempt != 1 {
			t.Fatalf("request %d: first try reached B as attempt %d", i, attempt)
		}
	}
	if int(aCalls.Load()) != retried {
		t.Fatalf("A failed %d requests but %d were retried", aCalls.Load(), retried)
	}
	if retried == 0 {
		t.Fatal("the queue group never picked A in 20 requests")
	}
	t.Logf("%d of 20 requests failed over from A to B", retried)
}

func TestErrorAfterDataIsNotRetried(t *testing.T) {
	b := newBus(t)
	var calls atomic.Int32
	b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		calls.Add(1)
		_ = w.Data(ctx, []byte("partial"))
		_ = w.Fail(&bridge.Error{Status: http.StatusServiceUnavailable, Code: "engine_error", Message: "died", Retryable: true})
	})
	c := b.client(bridge.ClientConfig{FailoverWait: 50 * time.Millisecond})
	var sink collect
	res, err := c.Do(testCtx(t), newReq("{}"), sink.sink)
	be := asBridgeError(t, err)
	if !be.AfterData || be.Retryable || be.Code != "engine_error" || be.Message != "died" {
		t.Fatalf("error %+v", be)
	}
	if res.Retried || calls.Load() != 1 || len(sink.get()) != 1 {
		t.Fatalf("retried %v, %d handler calls, frames %q", res.Retried, calls.Load(), sink.get())
	}
}

func TestErrorFrames(t *testing.T) {
	b := newBus(t)
	engineBody := `{"error":{"message":"bad temperature","type":"invalid_request_error","param":"temperature","code":null}}`
	b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		switch string(req.Body) {
		case "body":
			_ = w.Fail(&bridge.Error{Status: http.StatusBadRequest, Code: "engine_error", Body: []byte(engineBody)})
		case "text":
			_ = w.Fail(&bridge.Error{Status: http.StatusGatewayTimeout, Code: "engine_timeout", Message: "too slow"})
		case "nothing":
			// returns without a response
		}
	})
	c := b.client(bridge.ClientConfig{})
	ctx := testCtx(t)
	nop := func([]byte) error { return nil }

	_, err := c.Do(ctx, newReq("body"), nop)
	be := asBridgeError(t, err)
	if be.Status != http.StatusBadRequest || string(be.Body) != engineBody || be.Retryable || be.AfterData {
		t.Fatalf("engine error body: %+v", be)
	}
	_, err = c.Do(ctx, newReq("text"), nop)
	be = asBridgeError(t, err)
	if be.Status != http.StatusGatewayTimeout || be.Code != "engine_timeout" || be.Message != "too slow" || be.Body != nil {
		t.Fatalf("text error: %+v", be)
	}
	_, err = c.Do(ctx, newReq("nothing"), nop)
	be = asBridgeError(t, err)
	if be.Status != http.StatusBadGateway || be.Code != "engine_error" {
		t.Fatalf("handler without response: %+v", be)
	}
	req := newReq("{}")
	req.ID = ""
	_, err = c.Do(ctx, req, nop)
	be = asBridgeError(t, err)
	if be.Status != http.StatusBadRequest {
		t.Fatalf("request without id: %+v", be)
	}
}

func TestOverloaded(t *testing.T) {
	b := newBus(t)
	release := make(chan struct{})
	running := make(chan struct{}, 4)
	stop := b.stop
	srv, _ := b.server(bridge.ServerConfig{WorkerID: "w1", MaxConcurrency: 1, MaxQueue: 1}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		running <- struct{}{}
		select {
		case <-release:
		case <-stop:
			return
		}
		_ = w.Body(ctx, http.StatusOK, "application/json", []byte("ok"))
	})
	c := b.client(bridge.ClientConfig{FailoverWait: 50 * time.Millisecond})
	ctx := testCtx(t)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Do(ctx, newReq("{}"), func([]byte) error { return nil })
			errs <- err
		}()
	}
	recv(t, running, "the first request to run")
	eventually(t, 10*time.Second, func() bool { return srv.Waiting() == 1 && srv.Running() == 1 }, "one running and one queued request")

	res, err := c.Do(ctx, newReq("{}"), func([]byte) error { return nil })
	be := asBridgeError(t, err)
	if be.Status != http.StatusTooManyRequests || be.Code != "overloaded" || !be.Retryable {
		t.Fatalf("third request: %+v, want a retryable 429 overloaded", be)
	}
	if !res.Retried {
		t.Fatal("a retryable error before data was not retried")
	}

	close(release)
	for range 2 {
		if err := recv(t, errs, "the admitted requests"); err != nil {
			t.Fatalf("admitted request failed: %v", err)
		}
	}
	eventually(t, 10*time.Second, func() bool { return srv.Waiting() == 0 && srv.Running() == 0 }, "the server to be idle")
}

func TestPauseResume(t *testing.T) {
	b := newBus(t)
	srv, wnc := b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Body(ctx, http.StatusOK, "text/plain", []byte("ok"))
	})
	c := b.client(bridge.ClientConfig{})
	ctx := testCtx(t)
	nop := func([]byte) error { return nil }
	if _, err := c.Do(ctx, newReq("{}"), nop); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	srv.Pause() // idempotent
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, newReq("{}"), nop); !errors.Is(err, bridge.ErrNoWorker) {
		t.Fatalf("paused server: err = %v, want ErrNoWorker", err)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Resume(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Do(ctx, newReq("{}"), nop); err != nil || res.Status != http.StatusOK {
		t.Fatalf("resumed server: %+v, %v", res, err)
	}
}

func TestShutdownWaitsForInFlight(t *testing.T) {
	b := newBus(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	stop := b.stop
	srv, _ := b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		if string(req.Body) == "probe" {
			_ = w.Body(ctx, http.StatusOK, "text/plain", []byte("probe"))
			return
		}
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return
		case <-stop:
			return
		}
		_ = w.Body(ctx, http.StatusOK, "text/plain", []byte("finished"))
	})
	c := b.client(bridge.ClientConfig{})
	ctx := testCtx(t)
	type result struct {
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var sink collect
		_, err := c.Do(ctx, newReq("{}"), sink.sink)
		done <- result{strings.Join(sink.get(), ""), err}
	}()
	recv(t, started, "the request to start")

	shut := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- srv.Shutdown(sctx)
	}()
	// Shutdown stops taking requests at once...
	eventually(t, 10*time.Second, func() bool {
		_, err := c.Do(ctx, newReq("probe"), func([]byte) error { return nil })
		return errors.Is(err, bridge.ErrNoWorker)
	}, "the shutting-down server to refuse new requests")
	// ...but cannot return while the request in flight runs.
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	r := recv(t, done, "the in-flight request")
	if r.err != nil || r.body != "finished" {
		t.Fatalf("in-flight request: %q, %v", r.body, r.err)
	}
	if err := recv(t, shut, "Shutdown to return"); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
}

func TestShutdownCancelsWhenGraceEnds(t *testing.T) {
	b := newBus(t)
	started := make(chan struct{}, 1)
	handlerSaw := make(chan error, 1)
	stop := b.stop
	srv, _ := b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Data(ctx, []byte("a"))
		started <- struct{}{}
		select {
		case <-ctx.Done():
			handlerSaw <- ctx.Err()
		case <-stop:
		}
	})
	c := b.client(bridge.ClientConfig{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(testCtx(t), newReq("{}"), func([]byte) error { return nil })
		done <- err
	}()
	recv(t, started, "the request to start")
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want context.DeadlineExceeded", err)
	}
	if err := recv(t, handlerSaw, "the handler to be canceled"); err == nil {
		t.Fatal("handler ctx not done")
	}
	be := asBridgeError(t, recv(t, done, "the client to get an error"))
	if !be.AfterData || be.Retryable {
		t.Fatalf("client error %+v", be)
	}
}

func TestHandlerPanic(t *testing.T) {
	b := newBus(t)
	b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		if string(req.Body) == "panic" {
			panic("boom")
		}
		_ = w.Body(ctx, http.StatusOK, "text/plain", []byte("fine"))
	})
	c := b.client(bridge.ClientConfig{})
	ctx := testCtx(t)
	_, err := c.Do(ctx, newReq("panic"), func([]byte) error { return nil })
	be := asBridgeError(t, err)
	if be.Status != http.StatusInternalServerError {
		t.Fatalf("panic: %+v, want 500", be)
	}
	for range 3 {
		var sink collect
		if _, err := c.Do(ctx, newReq("ok"), sink.sink); err != nil || strings.Join(sink.get(), "") != "fine" {
			t.Fatalf("after a panic: %q, %v", sink.get(), err)
		}
	}
}

// Heartbeats sent while the edge's sink is slow are not data: they must not
// count against the flow-control window. Here the worker respects its
// window (one frame out of 4) but is idle while the edge's client does not
// read; its heartbeats pile up in the edge's per-request buffer.
func TestHeartbeatsDoNotOverflowWindow(t *testing.T) {
	b := newBus(t)
	const window = 4
	release := make(chan struct{})
	stop := b.stop
	b.server(bridge.ServerConfig{WorkerID: "w1", HeartbeatInterval: 10 * time.Millisecond}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Data(ctx, []byte("a"))
		select { // the engine thinks
		case <-release:
		case <-stop:
			return
		}
		_ = w.Data(ctx, []byte("b"))
		_ = w.End(http.StatusOK, "text/event-stream")
	})
	// Count heartbeats on the wire.
	spy := b.conn("spy")
	var hbs atomic.Int32
	if _, err := spy.Subscribe("_INBOX.>", func(m *nats.Msg) {
		if m.Header.Get(bridge.HdrFrame) == bridge.FrameHB {
			hbs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	c := b.client(bridge.ClientConfig{Window: window, HeartbeatTimeout: 5 * time.Second})
	var sink collect
	res, err := c.Do(testCtx(t), newReq("{}"), func(p []byte) error {
		if string(p) == "a" {
			// The HTTP client stops reading for a while.
			eventually(t, 10*time.Second, func() bool { return hbs.Load() > window+40 }, "heartbeats")
			close(release)
		}
		return sink.sink(p)
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if f := sink.get(); len(f) != 2 || res.DataFrames != 2 {
		t.Fatalf("frames %q", f)
	}
}

// Frames come back under the client's events.BridgeReplies (workers may
// publish there by grant, so the bus tracks no reply subject per request),
// and each request's reply subject is fresh and not derived from the last.
func TestRepliesUnderBridgeNamespace(t *testing.T) {
	b := newBus(t)
	for _, tc := range []struct {
		name   string
		opts   []nats.Option
		prefix string
	}{
		{"default inbox", nil, events.BridgeReplies("_INBOX") + "."},
		{"identity inbox", []nats.Option{nats.CustomInboxPrefix("_INBOX_edge")}, events.BridgeReplies("_INBOX_edge") + "."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(b.srv.ClientURL(), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			replies := make(chan string, 4)
			sub, err := nc.Subscribe(events.Infer(model), func(m *nats.Msg) {
				replies <- m.Reply
				for _, f := range []string{bridge.FrameAck, bridge.FrameEnd} {
					r := nats.NewMsg(m.Reply)
					r.Header.Set(bridge.HdrFrame, f)
					r.Header.Set(bridge.HdrWorker, "w-1")
					r.Header.Set(bridge.HdrStatus, "200")
					_ = nc.PublishMsg(r)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			c, err := bridge.NewClient(nc, bridge.ClientConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var seen []string
			for range 2 {
				if _, err := c.Do(testCtx(t), newReq(`{}`), func([]byte) error { return nil }); err != nil {
					t.Fatal(err)
				}
				r := <-replies
				tok, ok := strings.CutPrefix(r, tc.prefix)
				if !ok {
					t.Fatalf("reply subject %q, want it under %q", r, tc.prefix)
				}
				seen = append(seen, tok)
			}
			if seen[0] == seen[1] {
				t.Fatalf("two requests shared the reply subject %q", seen[0])
			}
		})
	}
}

// An error's Retry-After reaches the edge with it.
func TestErrorCarriesRetryAfter(t *testing.T) {
	b := newBus(t)
	b.server(bridge.ServerConfig{WorkerID: "w1"}, func(ctx context.Context, req *bridge.Request, w *bridge.ResponseWriter) {
		_ = w.Fail(&bridge.Error{Status: http.StatusServiceUnavailable, Code: "model_warming", Message: "starting", RetryAfter: 2500 * time.Millisecond})
	})
	_, err := b.client(bridge.ClientConfig{}).Do(testCtx(t), newReq("{}"), func([]byte) error { return nil })
	var be *bridge.Error
	if !errors.As(err, &be) || be.Code != "model_warming" || be.RetryAfter != 2500*time.Millisecond || be.Retryable {
		t.Fatalf("%v (%+v)", err, be)
	}
}
