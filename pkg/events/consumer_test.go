package events

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var testBackoff = []time.Duration{10 * time.Millisecond}

func usageRegistry() *Registry {
	return NewRegistry(func() Event { return new(UsageRecordedV1) })
}

// recorder is a Handler that records what it was called with and fails or
// panics as told.
type recorder struct {
	mu    sync.Mutex
	envs  []Envelope
	evs   []Event
	calls atomic.Int64
	fn    func(call int64, env Envelope) error // nil succeeds
}

func (r *recorder) handle(ctx context.Context, env Envelope, ev Event) error {
	n := r.calls.Add(1)
	if r.fn != nil {
		if err := r.fn(n, env); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.envs = append(r.envs, env)
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
	return nil
}

func (r *recorder) handled() []Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Envelope(nil), r.envs...)
}

// start runs c until the returned stop is called (or the test ends); stop
// waits for Run to return and fails the test on an error.
func start(t *testing.T, c *Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newConsumer(t *testing.T, js jetstream.JetStream, cfg ConsumerConfig, h Handler) *Consumer {
	t.Helper()
	if cfg.Stream == "" {
		cfg.Stream = StreamUsage
	}
	if cfg.Durable == "" {
		cfg.Durable = "test-ledger"
	}
	if cfg.Backoff == nil {
		cfg.Backoff = testBackoff
	}
	c, err := NewConsumer(js, usageRegistry(), cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func consumerInfo(t *testing.T, js jetstream.JetStream, stream, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := testCtx(t)
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// settled reports whether the durable has nothing pending, unacked or
// waiting for redelivery.
func settled(t *testing.T, js jetstream.JetStream, durable string) bool {
	info := consumerInfo(t, js, StreamUsage, durable)
	return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
}

func deadLetters(t *testing.T, js jetstream.JetStream, subject string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := testCtx(t)
	st, err := js.Stream(ctx, StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == subject {
			out = append(out, m)
		}
	}
	return out
}

func deadLetterCount(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := testCtx(t)
	st, err := js.Stream(ctx, StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestConsumerConfigValidate(t *testing.T) {
	if err := (ConsumerConfig{Stream: StreamUsage, Durable: "usage-ledger"}).Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
	bad := ConsumerConfig{
		Durable:           "a.b",
		FilterSubjects:    []string{"aiforge.>.x", ""},
		MaxDeliver:        -1,
		Backoff:           []time.Duration{time.Second, -time.Second},
		AckWait:           -1,
		MaxAckPending:     -1,
		DeadLetterSubject: "aiforge.deadletter.*",
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
	}
	before := fmt.Sprintf("%#v", bad)
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	if after := fmt.Sprintf("%#v", bad); after != before {
		t.Errorf("Validate mutated the config:\n%s\n%s", before, after)
	}
	for _, want := range []string{"stream is required", "durable \"a.b\"", "filter subject 0", "filter subject 1", "max deliver", "backoff 1", "ack wait", "max ack pending", "dead letter subject", "deliver policy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error lacks %q:\n%v", want, err)
		}
	}
	if _, err := NewConsumer(nil, nil, bad, nil); err == nil {
		t.Error("NewConsumer accepted a bad config")
	}
}

func TestConsumerDefaults(t *testing.T) {
	cfg := ConsumerConfig{Stream: StreamUsage, Durable: "usage-ledger"}
	c, err := NewConsumer(&fakeJS{}, usageRegistry(), cfg, func(context.Context, Envelope, Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	got := c.cfg
	if got.MaxDeliver != 5 || got.AckWait != 30*time.Second || got.MaxAckPending != 1000 ||
		got.DeadLetterSubject != "aiforge.deadletter.USAGE.usage-ledger" || got.DeliverPolicy != jetstream.DeliverAllPolicy || got.Logger == nil {
		t.Errorf("defaults not applied: %+v", got)
	}
	for n, want := range map[uint64]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond, 2: 500 * time.Millisecond, 3: 2 * time.Second, 4: 5 * time.Second, 9: 5 * time.Second} {
		if d := got.backoff(n); d != want {
			t.Errorf("backoff(%d) = %s, want %s", n, d, want)
		}
	}
	if cfg.MaxDeliver != 0 || cfg.Backoff != nil {
		t.Error("NewConsumer mutated the caller's config")
	}
}

// fakeJS satisfies jetstream.JetStream for tests that never reach the
// server.
type fakeJS struct{ jetstream.JetStream }

func TestConsumerHandlesWithEnvelope(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	rec := &recorder{}
	c := newConsumer(t, js, ConsumerConfig{Durable: "usage-ledger"}, rec.handle)
	start(t, c)

	var want []Envelope
	for i := range 3 {
		env := Envelope{
			ID:          fmt.Sprintf("id-%d", i),
			Source:      "aiforge/edge/edge-0",
			Tenant:      "acme",
			TraceParent: fmt.Sprintf("00-0af7651916cd43dd8448eb211c80319%d-b7ad6b7169203331-01", i),
		}
		if _, err := Publish(ctx, js, usage(i), env); err != nil {
			t.Fatal(err)
		}
		env.Type = TypeUsageRecordedV1
		want = append(want, env)
	}
	eventually(t, "3 handled", func() bool { return c.Stats().Handled == 3 })
	eventually(t, "consumer settled", func() bool { return settled(t, js, "usage-ledger") })

	got := rec.handled()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, env := range got {
		if env.Time.IsZero() {
			t.Errorf("event %d has no time", i)
		}
		env.Time = time.Time{}
		if env != want[i] {
			t.Errorf("event %d envelope %+v, want %+v", i, env, want[i])
		}
		if u, ok := rec.evs[i].(*UsageRecordedV1); !ok || *u != *usage(i) {
			t.Errorf("event %d = %#v, want %+v", i, rec.evs[i], usage(i))
		}
	}
	if s := c.Stats(); s != (ConsumerStats{Handled: 3}) {
		t.Errorf("stats %+v", s)
	}
}

func TestConsumerRetriesThenSucceeds(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	rec := &recorder{fn: func(call int64, _ Envelope) error {
		if call <= 2 {
			return errors.New("database unavailable")
		}
		return nil
	}}
	c := newConsumer(t, js, ConsumerConfig{}, rec.handle)
	start(t, c)
	if _, err := Publish(ctx, js, usage(1), Envelope{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "handled", func() bool { return c.Stats().Handled == 1 })
	eventually(t, "consumer settled", func() bool {
		info := consumerInfo(t, js, StreamUsage, "test-ledger")
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	if s := c.Stats(); s != (ConsumerStats{Handled: 1, Failed: 2, Retried: 2}) {
		t.Errorf("stats %+v, want handled 1, failed 2, retried 2", s)
	}
	if n := len(rec.handled()); n != 1 {
		t.Errorf("handled %d times", n)
	}
	if n := deadLetterCount(t, js); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

func TestConsumerDeadLettersAfterMaxDeliver(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	var failing atomic.Bool
	failing.Store(true)
	rec := &recorder{fn: func(int64, Envelope) error {
		if failing.Load() {
			return errors.New("tenant\nnot found")
		}
		return nil
	}}
	c := newConsumer(t, js, ConsumerConfig{MaxDeliver: 3}, rec.handle)
	start(t, c)

	m, err := Marshal(usage(1), Envelope{ID: "id-dead", Tenant: "acme", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set("X-Custom", "kept")
	m.Header.Set(nats.ExpectedLastSeqHdr, "0") // a publisher directive the copy must not replay
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	dlq := "aiforge.deadletter.USAGE.test-ledger"
	eventually(t, "dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	eventually(t, "source terminated", func() bool { return settled(t, js, "test-ledger") })

	if s := c.Stats(); s != (ConsumerStats{Failed: 3, Retried: 2, DeadLettered: 1}) {
		t.Errorf("stats %+v, want failed 3, retried 2, dead-lettered 1", s)
	}
	if n := rec.calls.Load(); n != 3 {
		t.Errorf("handler called %d times, want 3", n)
	}
	dls := deadLetters(t, js, dlq)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters on %s, want 1", len(dls), dlq)
	}
	dl := dls[0]
	if string(dl.Data) != string(m.Data) {
		t.Errorf("dead letter data %s, want %s", dl.Data, m.Data)
	}
	for k, want := range map[string]string{
		HeaderDLQReason:         "tenant; not found",
		HeaderDLQStream:         StreamUsage,
		HeaderDLQSequence:       fmt.Sprint(ack.Sequence),
		HeaderDLQDeliveries:     "3",
		HeaderDLQSubject:        usage(1).Subject(),
		HeaderDLQConsumer:       "test-ledger",
		nats.MsgIdHdr:           fmt.Sprintf("dlq-USAGE-%d", ack.Sequence),
		HeaderID:                "id-dead",
		HeaderType:              TypeUsageRecordedV1,
		HeaderTraceParent:       "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"X-Custom":              "kept",
		nats.ExpectedLastSeqHdr: "",
	} {
		if got := dl.Header.Get(k); got != want {
			t.Errorf("dead letter header %s = %q, want %q", k, got, want)
		}
	}

	// Dead-lettering the same message again is stored once.
	again := nats.NewMsg(dlq)
	again.Header.Set(nats.MsgIdHdr, fmt.Sprintf("dlq-USAGE-%d", ack.Sequence))
	if pa, err := js.PublishMsg(ctx, again); err != nil || !pa.Duplicate {
		t.Errorf("republished dead letter: ack %+v, err %v; want a duplicate", pa, err)
	}
	if n := deadLetterCount(t, js); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
	// Nothing is redelivered: a later event is handled by the same
	// consumer and the stats of the dead one do not move.
	failing.Store(false)
	if _, err := Publish(ctx, js, usage(2), Envelope{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "later event handled", func() bool { return c.Stats().Handled == 1 })
	if s := c.Stats(); s != (ConsumerStats{Handled: 1, Failed: 3, Retried: 2, DeadLettered: 1}) {
		t.Errorf("stats %+v after a later event", s)
	}
}

func TestConsumerDeadLetterPublishFailureRedelivers(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	rec := &recorder{fn: func(int64, Envelope) error { return errors.New("boom") }}
	// No stream captures this subject yet: the dead-letter publish fails.
	c := newConsumer(t, js, ConsumerConfig{MaxDeliver: 1, DeadLetterSubject: "test.dlq.ledger"}, rec.handle)
	start(t, c)
	if _, err := Publish(ctx, js, usage(1), Envelope{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "redelivered after a failed dead-letter publish", func() bool { return c.Stats().Retried >= 2 })
	if s := c.Stats(); s.DeadLettered != 0 || s.Retried < 2 {
		t.Errorf("stats %+v: want retries and no dead letter yet", s)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TESTDLQ", Subjects: []string{"test.dlq.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "dead-lettered once the stream exists", func() bool { return c.Stats().DeadLettered == 1 })
	eventually(t, "source terminated", func() bool {
		info := consumerInfo(t, js, StreamUsage, "test-ledger")
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	st, err := js.Stream(ctx, "TESTDLQ")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("TESTDLQ holds %d messages, want 1", info.State.Msgs)
	}
}

func TestConsumerAcksUnknownType(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	rec := &recorder{}
	c := newConsumer(t, js, ConsumerConfig{}, rec.handle)
	start(t, c)

	m := nats.NewMsg(Subject(TypeUsageRecordedV1, "acme"))
	m.Header.Set(HeaderID, "future-1")
	m.Header.Set(nats.MsgIdHdr, "future-1")
	m.Header.Set(HeaderType, "aiforge.future.thing.v9")
	m.Data = []byte(`{"whatever":true}`)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "unknown counted", func() bool { return c.Stats().Unknown == 1 })
	eventually(t, "acked", func() bool { return settled(t, js, "test-ledger") })
	if n := rec.calls.Load(); n != 0 {
		t.Errorf("handler called %d times for an unknown type", n)
	}
	if s := c.Stats(); s != (ConsumerStats{Unknown: 1}) {
		t.Errorf("stats %+v", s)
	}
	if n := deadLetterCount(t, js); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

func TestConsumerDeadLettersInvalidAtOnce(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	rec := &recorder{}
	c := newConsumer(t, js, ConsumerConfig{}, rec.handle)
	start(t, c)

	publishRaw := func(id, typ, body string) {
		m := nats.NewMsg(Subject(TypeUsageRecordedV1, "acme"))
		m.Header.Set(nats.MsgIdHdr, id)
		m.Header.Set(HeaderID, id)
		if typ != "" {
			m.Header.Set(HeaderType, typ)
		}
		m.Data = []byte(body)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	publishRaw("not-json", TypeUsageRecordedV1, `{not json`)
	publishRaw("fails-validate", TypeUsageRecordedV1, `{"request_id":"r","endpoint":"images"}`)
	publishRaw("no-type", "", `{}`)

	eventually(t, "3 invalid", func() bool { return c.Stats().Invalid == 3 })
	eventually(t, "terminated", func() bool { return settled(t, js, "test-ledger") })
	if s := c.Stats(); s != (ConsumerStats{Invalid: 3, DeadLettered: 3}) {
		t.Errorf("stats %+v, want invalid 3, dead-lettered 3 and no retries", s)
	}
	if n := rec.calls.Load(); n != 0 {
		t.Errorf("handler called %d times", n)
	}
	dls := deadLetters(t, js, "aiforge.deadletter.USAGE.test-ledger")
	if len(dls) != 3 {
		t.Fatalf("%d dead letters, want 3", len(dls))
	}
	for _, dl := range dls {
		reason := dl.Header.Get(HeaderDLQReason)
		if !strings.Contains(reason, ErrInvalid.Error()) || strings.ContainsAny(reason, "\r\n") {
			t.Errorf("dead letter %s reason %q", dl.Header.Get(HeaderID), reason)
		}
		if d := dl.Header.Get(HeaderDLQDeliveries); d != "1" {
			t.Errorf("dead letter %s after %s deliveries, want 1", dl.Header.Get(HeaderID), d)
		}
	}
	if r := dls[1].Header.Get(HeaderDLQReason); !strings.Contains(r, "tenant is required; ") {
		t.Errorf("validation errors not joined on one line: %q", r)
	}
}

func TestConsumerRecoversPanic(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	rec := &recorder{fn: func(call int64, _ Envelope) error {
		if call == 1 {
			panic("nil map somewhere")
		}
		return nil
	}}
	c := newConsumer(t, js, ConsumerConfig{}, rec.handle)
	start(t, c)
	if _, err := Publish(ctx, js, usage(1), Envelope{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "handled after the panic", func() bool { return c.Stats().Handled == 1 })
	if s := c.Stats(); s != (ConsumerStats{Handled: 1, Failed: 1, Retried: 1}) {
		t.Errorf("stats %+v, want handled 1, failed 1, retried 1", s)
	}
}

func TestConsumerRestartDoesNotRedeliver(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	first := &recorder{}
	c1 := newConsumer(t, js, ConsumerConfig{}, first.handle)
	stop := start(t, c1)
	for i := range 3 {
		if _, err := Publish(ctx, js, usage(i), Envelope{ID: fmt.Sprintf("first-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "first run handled 3", func() bool { return c1.Stats().Handled == 3 })
	stop()

	// Published while nobody runs: the restarted durable picks it up.
	if _, err := Publish(ctx, js, usage(3), Envelope{ID: "between"}); err != nil {
		t.Fatal(err)
	}
	second := &recorder{}
	c2 := newConsumer(t, js, ConsumerConfig{}, second.handle)
	stop = start(t, c2)
	if _, err := Publish(ctx, js, usage(4), Envelope{ID: "second"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second run handled 2", func() bool { return c2.Stats().Handled == 2 })
	eventually(t, "settled", func() bool { return settled(t, js, "test-ledger") })
	var ids []string
	for _, env := range second.handled() {
		ids = append(ids, env.ID)
	}
	if strings.Join(ids, ",") != "between,second" {
		t.Errorf("restarted consumer handled %v, want [between second]", ids)
	}
	stop()

	// The same Consumer value can run again.
	stop = start(t, c2)
	if _, err := Publish(ctx, js, usage(5), Envelope{ID: "third"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "third handled", func() bool { return c2.Stats().Handled == 3 })
	stop()
}

func TestConsumerShutdownFinishesHandlerAndHandsBackBuffered(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	var handlerCtxErr atomic.Value
	rec := &recorder{fn: func(call int64, _ Envelope) error {
		if call == 1 {
			close(entered)
			<-release
		}
		return nil
	}}
	c1 := newConsumer(t, js, ConsumerConfig{}, func(hctx context.Context, env Envelope, ev Event) error {
		err := rec.handle(hctx, env, ev)
		handlerCtxErr.CompareAndSwap(nil, fmt.Sprint(hctx.Err()))
		return err
	})
	stop := start(t, c1)
	for i := range 5 {
		if _, err := Publish(ctx, js, usage(i), Envelope{ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	<-entered
	// Let the other four reach the client's buffer.
	eventually(t, "all delivered", func() bool {
		return consumerInfo(t, js, StreamUsage, "test-ledger").NumAckPending == 5
	})
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Run returned while the handler was in progress")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-stopped
	if got := handlerCtxErr.Load(); got != "<nil>" {
		t.Errorf("handler context ended at shutdown: %v", got)
	}
	if s := c1.Stats(); s != (ConsumerStats{Handled: 1}) {
		t.Errorf("stats %+v, want the one in progress handled", s)
	}
	// The buffered four were handed back (Nak), not left to AckWait (30s,
	// longer than eventually waits): the next run gets them at once.
	rec2 := &recorder{}
	c2 := newConsumer(t, js, ConsumerConfig{}, rec2.handle)
	start(t, c2)
	eventually(t, "the rest handled by the next run", func() bool { return c2.Stats().Handled == 4 })
	var ids []string
	for _, env := range rec2.handled() {
		ids = append(ids, env.ID)
	}
	slices.Sort(ids) // redelivery order is the server's
	if strings.Join(ids, ",") != "1,2,3,4" {
		t.Errorf("next run handled %v, want [1 2 3 4]", ids)
	}
}

func TestConsumerRunTwiceAtOnce(t *testing.T) {
	js, _ := newJS(t)
	c := newConsumer(t, js, ConsumerConfig{}, (&recorder{}).handle)
	start(t, c)
	eventually(t, "running", func() bool { return c.running.Load() })
	if err := c.Run(testCtx(t)); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run = %v, want already running", err)
	}
}

func TestConsumerRunSetupError(t *testing.T) {
	js, _ := newJS(t)
	c, err := NewConsumer(js, usageRegistry(), ConsumerConfig{Stream: "NOSUCHSTREAM", Durable: "x"}, (&recorder{}).handle)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(testCtx(t)); err == nil {
		t.Error("Run on a missing stream returned nil")
	}
}

func TestConsumerRecreatedAfterDelete(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	rec := &recorder{}
	c := newConsumer(t, js, ConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy}, rec.handle)
	c.retryDelay = 10 * time.Millisecond
	c.heartbeat = 500 * time.Millisecond
	start(t, c)
	// Delete it once it is pulling (the setup error of a consumer deleted
	// while Run creates it is Run's to return).
	eventually(t, "consumer pulling", func() bool {
		cons, err := js.Consumer(ctx, StreamUsage, "test-ledger")
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting > 0
	})
	if err := js.DeleteConsumer(ctx, StreamUsage, "test-ledger"); err != nil {
		t.Fatal(err)
	}
	// Publish until the recreated durable (delivering new messages only)
	// handles one.
	i := 0
	eventually(t, "handled after the consumer was recreated", func() bool {
		if c.Stats().Handled > 0 {
			return true
		}
		i++
		if _, err := Publish(ctx, js, usage(i), Envelope{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		return false
	})
}

func TestConsumerRunStopLeavesNoGoroutines(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	rec := &recorder{}
	c := newConsumer(t, js, ConsumerConfig{}, rec.handle)
	// One run first, so the connection's own lazily started goroutines
	// exist before the baseline is taken.
	stop := start(t, c)
	if _, err := Publish(ctx, js, usage(0), Envelope{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "handled", func() bool { return c.Stats().Handled == 1 })
	stop()
	var base int
	eventually(t, "goroutines settle", func() bool {
		n := runtime.NumGoroutine()
		defer func() { base = n }()
		return n == base
	})
	for i := 1; i <= 5; i++ {
		stop := start(t, c)
		if _, err := Publish(ctx, js, usage(i), Envelope{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "handled", func() bool { return c.Stats().Handled == uint64(i+1) })
		stop()
	}
	eventually(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })
}

func TestHeaderValue(t *testing.T) {
	if got := headerValue("a\nb\r\nc\x00d"); got != "a; b; c d" {
		t.Errorf("headerValue = %q", got)
	}
	long := strings.Repeat("é", maxReasonLen)
	got := headerValue(long)
	if len(got) > maxReasonLen+len("…") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("headerValue truncated badly: %d bytes", len(got))
	}
}

// A handler that keeps telling the server it is working holds its message
// well past AckWait: no redelivery, and its context does not expire.
func TestConsumerInProgressExtendsTheLease(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	const ackWait = 400 * time.Millisecond
	var calls atomic.Int64
	var expired atomic.Bool
	c := newConsumer(t, js, ConsumerConfig{AckWait: ackWait}, func(hctx context.Context, _ Envelope, _ Event) error {
		calls.Add(1)
		for range 12 { // 12 × AckWait/4 = 3 × AckWait
			time.Sleep(ackWait / 4)
			if err := InProgress(hctx); err != nil {
				expired.Store(true)
				return err
			}
		}
		return hctx.Err()
	})
	start(t, c)
	if _, err := Publish(ctx, js, usage(1), Envelope{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "handled", func() bool { return c.Stats().Handled == 1 })
	if n := calls.Load(); n != 1 || expired.Load() {
		t.Fatalf("handler called %d times (want 1), lease expired: %v", n, expired.Load())
	}
	if err := InProgress(ctx); err == nil {
		t.Fatal("InProgress outside a handler succeeded")
	}
}

// Without InProgress the handler's context ends after AckWait.
func TestConsumerHandlerContextExpiresAfterAckWait(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	errs := make(chan error, 4)
	c := newConsumer(t, js, ConsumerConfig{AckWait: 300 * time.Millisecond, MaxDeliver: 1}, func(hctx context.Context, _ Envelope, _ Event) error {
		<-hctx.Done()
		errs <- context.Cause(hctx)
		return hctx.Err()
	})
	start(t, c)
	if _, err := Publish(ctx, js, usage(1), Envelope{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cause %v, want deadline exceeded", err)
		}
	case <-ctx.Done():
		t.Fatal("handler context never ended")
	}
}

// With Concurrency, a message is handled while another is busy, and
// messages of one OrderKey are handled one after another in delivery order.
func TestConsumerConcurrencyKeepsOrderPerKey(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	gate := make(chan struct{})
	var mu sync.Mutex
	var started, finished []string
	c := newConsumer(t, js, ConsumerConfig{Concurrency: 4, MaxAckPending: 4,
		OrderKey: func(_ Envelope, ev Event) string { return ev.(*UsageRecordedV1).KeyID },
	}, func(_ context.Context, _ Envelope, ev Event) error {
		id := ev.(*UsageRecordedV1).RequestID
		mu.Lock()
		started = append(started, id)
		mu.Unlock()
		if id == "req-1" {
			<-gate
		}
		mu.Lock()
		finished = append(finished, id)
		mu.Unlock()
		return nil
	})
	start(t, c)
	second := usage(3)
	second.KeyID = "key-2"
	for _, ev := range []*UsageRecordedV1{usage(1), usage(2), second} {
		if _, err := Publish(ctx, js, ev, Envelope{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "key-2 handled while key-1 is busy", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(finished, "req-3")
	})
	mu.Lock()
	if slices.Contains(started, "req-2") {
		t.Fatalf("req-2 started before req-1 of the same key finished: %v", started)
	}
	mu.Unlock()
	close(gate)
	eventually(t, "all handled", func() bool { return c.Stats().Handled == 3 })
	mu.Lock()
	defer mu.Unlock()
	if i, j := slices.Index(finished, "req-1"), slices.Index(finished, "req-2"); i > j {
		t.Fatalf("finished %v: req-2 before req-1", finished)
	}
}
