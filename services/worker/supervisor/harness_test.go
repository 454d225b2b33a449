package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/services/worker"
)

// harness is one test's world: an embedded JetStream with the bus contract,
// a worker connection, an edge connection with a bridge client, shared
// worker metrics and a captured log.
type harness struct {
	t       testing.TB
	nc      *nats.Conn // workers'
	js      jetstream.JetStream
	edge    *nats.Conn
	client  *bridge.Client
	reg     *prometheus.Registry
	metrics *worker.Metrics
	logs    *syncBuffer
	log     *slog.Logger
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	srv, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Ensure(testCtx(t), js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	edge := natstest.Conn(t, srv, "edge")
	client, err := bridge.NewClient(edge, bridge.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	reg := prometheus.NewRegistry()
	m, err := worker.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	return &harness{
		t: t, nc: nc, js: js, edge: edge, client: client, reg: reg, metrics: m, logs: logs,
		log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) deps() Deps {
	return Deps{NC: h.nc, JS: h.js, Logger: h.log, Metrics: h.metrics}
}

// startSim starts an engine simulator closed when the test ends.
func startSim(t testing.TB, cfg enginesim.Config) (*enginesim.Sim, string) {
	t.Helper()
	sim, base, closeFn, err := enginesim.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return sim, base
}

var seq atomic.Int64

// newReq returns a request with a fresh id and tenant (one tenant per
// request keeps usage subjects apart).
func newReq(model, endpoint string, stream, includeUsage bool, body string) *bridge.OutRequest {
	n := seq.Add(1)
	return &bridge.OutRequest{
		Model: model, ID: fmt.Sprintf("req-%d-%s", n, events.NewID()[:8]), Tenant: fmt.Sprintf("tenant%d", n),
		KeyID: "key_test", Endpoint: endpoint, Stream: stream, IncludeUsage: includeUsage, Body: []byte(body),
	}
}

// do runs a request through the bridge client, as the edge does, and
// returns its data frames.
func (h *harness) do(ctx context.Context, req *bridge.OutRequest) ([][]byte, bridge.Result, error) {
	var frames [][]byte
	res, err := h.client.Do(ctx, req, func(p []byte) error {
		frames = append(frames, bytes.Clone(p))
		return nil
	})
	return frames, res, err
}

// usageEvent waits for the usage event of a request's tenant.
func (h *harness) usageEvent(tenant string) (events.UsageRecordedV1, *jetstream.RawStreamMsg) {
	h.t.Helper()
	ctx := testCtx(h.t)
	stream, err := h.js.Stream(ctx, events.StreamUsage)
	if err != nil {
		h.t.Fatal(err)
	}
	subj := events.Subject(events.TypeUsageRecordedV2, tenant)
	var msg *jetstream.RawStreamMsg
	eventually(h.t, 10*time.Second, "usage event on "+subj, func() bool {
		m, err := stream.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) {
				h.t.Fatal(err)
			}
			return false
		}
		msg = m
		return true
	})
	var ev events.UsageRecordedV1
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		h.t.Fatal(err)
	}
	if err := ev.Validate(); err != nil {
		h.t.Fatalf("usage event invalid: %v", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		h.t.Fatal(err)
	}
	if n := info.State.Subjects[subj]; n != 1 {
		h.t.Fatalf("%d usage events on %s, want 1", n, subj)
	}
	return ev, msg
}

const chatBody = `{"model":"served","messages":[{"role":"user","content":"hello there world"}],"max_tokens":6}`
