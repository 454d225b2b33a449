package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/natstest"
)

// newJS starts an embedded JetStream server with the bus contract ensured.
func newJS(t *testing.T) (jetstream.JetStream, *nats.Conn) {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := Ensure(testCtx(t), js, StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return js, nc
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func usage(n int) *UsageRecordedV1 {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	return &UsageRecordedV1{
		RequestID:        fmt.Sprintf("req-%d", n),
		Tenant:           "acme",
		KeyID:            "key-1",
		Model:            "meta-llama/Llama-3.1-8B",
		Endpoint:         EndpointChatCompletions,
		PromptTokens:     10,
		CompletionTokens: 20,
		Status:           UsageStatusOK,
		Reporter:         "edge-1",
		StartedAt:        start,
		FinishedAt:       start.Add(time.Second),
	}
}

func TestToken(t *testing.T) {
	plain := []string{"acme", "_", "meta-llama/Llama-3-8B", "Qwen2-7B-Instruct", "ünïcode", "a-b_c:d"}
	for _, name := range plain {
		if got := Token(name); got != name {
			t.Errorf("Token(%q) = %q, want unchanged", name, got)
		}
	}
	for _, c := range []string{".", "*", ">", " ", "%", "\t", "\n", "\x00", "\x7f"} {
		got := Token("a" + c + "b")
		if strings.Contains(got, c) && c != "%" {
			t.Errorf("Token(%q) = %q still contains %q", "a"+c+"b", got, c)
		}
		if want := fmt.Sprintf("a%%%02Xb", c[0]); got != want {
			t.Errorf("Token(%q) = %q, want %q", "a"+c+"b", got, want)
		}
	}
	names := []string{"", "_", "%", "%2E", ".", "a.b", "a%2Eb", "a b", "a%20b", "a*b", "a>b", "*", ">", "a", "A", "a.", ".a", "..", "%%", "\x00", "%00", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3%2E1-8B"}
	seen := map[string]string{}
	for _, name := range names {
		tok := Token(name)
		if prev, dup := seen[tok]; dup {
			t.Errorf("Token(%q) = Token(%q) = %q", name, prev, tok)
		}
		seen[tok] = name
		subj := Subject(TypeUsageRecordedV1, name)
		if n := strings.Count(subj, "."); n != strings.Count(TypeUsageRecordedV1, ".")+1 {
			t.Errorf("Subject(%q, %q) = %q has %d dots", TypeUsageRecordedV1, name, subj, n)
		}
		if tok == "" || strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Errorf("Token(%q) = %q is not one plain token", name, tok)
		}
		if got, want := Infer(name), "aiforge.infer.v1."+tok; got != want {
			t.Errorf("Infer(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestEnsureIdempotentAndUsageImmutable(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	if err := Ensure(ctx, js, StreamOptions{}); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	ack, err := Publish(ctx, js, usage(1), Envelope{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, ack.Sequence); err == nil {
		t.Error("DeleteMsg on USAGE succeeded; the stream must deny deletes")
	}
	if err := st.SecureDeleteMsg(ctx, ack.Sequence); err == nil {
		t.Error("SecureDeleteMsg on USAGE succeeded; the stream must deny deletes")
	}
	if err := st.Purge(ctx); err == nil {
		t.Error("Purge on USAGE succeeded; the stream must deny purges")
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("USAGE holds %d messages, want 1", info.State.Msgs)
	}
}

func TestPublishDuplicateStoredOnce(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	env := Envelope{ID: "req-1", Source: "test", Tenant: "acme"}
	first, err := Publish(ctx, js, usage(1), env)
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate {
		t.Error("first publish reported a duplicate")
	}
	second, err := Publish(ctx, js, usage(1), env)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Duplicate {
		t.Error("second publish of the same id was not a duplicate")
	}
	st, err := js.Stream(ctx, StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("USAGE holds %d messages, want 1", info.State.Msgs)
	}
}

func TestMarshalRejectsInvalid(t *testing.T) {
	js, _ := newJS(t)
	ctx := testCtx(t)
	bad := usage(1)
	bad.Tenant = ""
	bad.Endpoint = "images"
	if _, err := Marshal(bad, Envelope{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Marshal error = %v, want ErrInvalid", err)
	} else if !strings.Contains(err.Error(), "tenant is required") || !strings.Contains(err.Error(), "endpoint") {
		t.Errorf("Marshal error %q does not name every problem", err)
	}
	if _, err := Publish(ctx, js, bad, Envelope{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Publish error = %v, want ErrInvalid", err)
	}
	st, err := js.Stream(ctx, StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("USAGE holds %d messages, want 0", info.State.Msgs)
	}
}

func TestMarshalDecodeEnvelope(t *testing.T) {
	when := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	env := Envelope{ID: "id-1", Source: "edge", Time: when, Tenant: "acme", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceState: "k=v"}
	m, err := Marshal(usage(1), env)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(nats.MsgIdHdr) != "id-1" {
		t.Errorf("Nats-Msg-Id = %q", m.Header.Get(nats.MsgIdHdr))
	}
	reg := NewRegistry(func() Event { return new(UsageRecordedV1) })
	gotEnv, ev, err := reg.Decode(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	env.Type = TypeUsageRecordedV1
	if !gotEnv.Time.Equal(env.Time) {
		t.Errorf("time %v, want %v", gotEnv.Time, env.Time)
	}
	gotEnv.Time = env.Time
	if gotEnv != env {
		t.Errorf("envelope %+v, want %+v", gotEnv, env)
	}
	if *ev.(*UsageRecordedV1) != *usage(1) {
		t.Errorf("event %+v, want %+v", ev, usage(1))
	}
}

func TestNewRegistryRejectsNonPointer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewRegistry accepted a proto returning a value")
		}
	}()
	NewRegistry(func() Event { return UsageRecordedV1{} })
}

// TestPublishRetryBoundsEachAttempt: a publish that is never acknowledged
// (it reached a leader that then lost its node) is given up after
// PublishAttemptTimeout and sent again, within the caller's deadline,
// instead of waiting out the whole deadline on the first attempt.
func TestPublishRetryBoundsEachAttempt(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s, "publisher")
	rc := natstest.Conn(t, s, "stream")
	// A stand-in for the stream: it drops the first publish of the event and
	// acknowledges the second.
	var (
		mu   sync.Mutex
		seen []string
	)
	sub, err := rc.Subscribe(usage(1).Subject(), func(m *nats.Msg) {
		mu.Lock()
		seen = append(seen, m.Header.Get(jetstream.MsgIDHeader))
		n := len(seen)
		mu.Unlock()
		if n == 1 {
			return
		}
		_ = m.Respond([]byte(`{"stream":"USAGE","seq":1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	was := PublishAttemptTimeout
	PublishAttemptTimeout = 100 * time.Millisecond
	t.Cleanup(func() { PublishAttemptTimeout = was })

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ack, attempts, err := PublishRetry(ctx, js, usage(1), Envelope{ID: "req-1", Source: "test"})
	if err != nil {
		t.Fatalf("PublishRetry: %v after %d attempts", err, attempts)
	}
	if attempts != 2 || ack.Sequence != 1 {
		t.Fatalf("PublishRetry: %d attempts, ack %+v; want the second attempt acknowledged", attempts, ack)
	}
	// Both attempts carry the same message id: a stored first attempt is a
	// duplicate the stream drops.
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "req-1" || seen[1] != "req-1" {
		t.Fatalf("the stream saw message ids %q, want req-1 twice", seen)
	}
}
