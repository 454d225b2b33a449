package kv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/natsutil"
)

func TestUnavailableSentinels(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{jetstream.ErrNoStreamResponse, true},
		{fmt.Errorf("kv: put files/a: %w", jetstream.ErrNoStreamResponse), true},
		{nats.ErrNoResponders, true},
		{nats.ErrTimeout, true},
		{fmt.Errorf("kv: get x/y: %w", context.DeadlineExceeded), true},
		{jetstream.ErrNoHeartbeat, true},
		{jetstream.ErrConsumerLeadershipChanged, true},
		{nats.ErrConnectionReconnecting, true},
		{nats.ErrDisconnected, true},
		{nats.ErrConnectionClosed, true},
		{nats.ErrConnectionDraining, true},
		{errors.Join(errors.New("first"), fmt.Errorf("second: %w", nats.ErrNoResponders)), true},
		// A cluster without quorum or room answers 503, in either API.
		{fmt.Errorf("x: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{fmt.Errorf("x: %w", &nats.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}), true},
		{jetstream.ErrJetStreamNotEnabled, true},

		{context.Canceled, false},
		{errors.New("nats: timeout"), false}, // the words are not the error
		{fmt.Errorf("%w: files/a", kv.ErrNotFound), false},
		{kv.ErrExists, false},
		{kv.ErrConflict, false},
		{&kv.DecodeError{Bucket: "b", Key: "k", Err: errors.New("bad json")}, false},
		{jetstream.ErrKeyNotFound, false},
		{jetstream.ErrStreamNotFound, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{&nats.APIError{Code: 404, ErrorCode: 10059}, false},
	} {
		if got := kv.Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestUnavailableRealErrors: what the bus really answers while it is
// unavailable is Unavailable, and what it answers when it is there is
// not.
func TestUnavailableRealErrors(t *testing.T) {
	ctx := testCtx(t)
	s, nc := natstest.JetStream(t)
	// The JetStream default timeout is the internal bound here; the
	// caller's own context has none.
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, b, "a", rec{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	putRaw(t, b, "bad", `{"name":`)

	// The bus answers: none of its errors is unavailability.
	_, _, err = kv.Get[rec](ctx, b, "missing")
	notTransient(t, "missing key", err)
	_, err = kv.Create(ctx, b, "a", rec{})
	notTransient(t, "create of an existing key", err)
	_, _, err = kv.Get[rec](ctx, b, "bad")
	notTransient(t, "corrupt value", err)

	// The server stops: the connection is reconnecting.
	s.Shutdown()
	s.WaitForShutdown()
	waitStatus(t, nc, func(st nats.Status) bool { return st != nats.CONNECTED })
	bg := context.Background()
	_, _, err = kv.Get[rec](bg, b, "a")
	transient(t, bg, "get while reconnecting", err)
	_, err = kv.Put(bg, b, "a", rec{})
	transient(t, bg, "put while reconnecting", err)

	nc.Close()
	_, _, err = kv.Get[rec](bg, b, "a")
	transient(t, bg, "get on a closed connection", err)
	if !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("get on a closed connection: %v", err)
	}
}

// TestUnavailableLeaderless: a bucket whose only replica's server is gone
// has no leader; what reads, writes and listings of it get through another
// node of the cluster is Unavailable.
func TestUnavailableLeaderless(t *testing.T) {
	servers := natstest.Cluster(t, 3, nil)
	natstest.WaitClusterReady(t, servers)
	ctx := testCtx(t)
	admin, err := natsutil.Connect(natstest.ClientURLs(servers), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	for _, direct := range []bool{true, false} {
		name := fmt.Sprintf("direct-%t", direct)
		t.Run(name, func(t *testing.T) {
			ajs, err := jetstream.New(admin)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ajs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, Replicas: 1}); err != nil {
				t.Fatal(err)
			}
			st, err := ajs.Stream(ctx, "KV_"+name)
			if err != nil {
				t.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			if !direct {
				cfg.AllowDirect = false
				if _, err := ajs.UpdateStream(ctx, cfg); err != nil {
					t.Fatal(err)
				}
			}
			leader := st.CachedInfo().Cluster.Leader
			var host, other *server.Server
			for _, s := range servers {
				switch {
				case s.Name() == leader:
					host = s
				case other == nil && s.Running():
					other = s
				}
			}
			if host == nil || other == nil {
				t.Fatalf("leader %q: no server of %d to stop and another to ask", leader, len(servers))
			}
			nc := connect(t, other)
			js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			b, err := js.KeyValue(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, b, "a", rec{Name: "a"}); err != nil {
				t.Fatal(err)
			}
			host.Shutdown()
			host.WaitForShutdown()

			bg := context.Background()
			_, _, err = kv.Get[rec](bg, b, "a")
			transient(t, bg, "get", err)
			// The publish's own retries of no responders fit in this bound.
			pctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			_, err = b.Put(pctx, "a", []byte(`{}`))
			transient(t, pctx, "put", err)
			if !errors.Is(err, jetstream.ErrNoStreamResponse) {
				t.Errorf("put: %v, want no response from stream", err)
			}
			_, err = kv.List[rec](bg, b)
			transient(t, bg, "list", err)
		})
	}
}

func connect(t *testing.T, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := natsutil.Connect(s.ClientURL(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func transient(t *testing.T, ctx context.Context, what string, err error) {
	t.Helper()
	if err == nil || !kv.Unavailable(err) || ctx.Err() != nil {
		t.Errorf("%s: %v (ctx %v), want an error Unavailable", what, err, ctx.Err())
	}
}

func notTransient(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || kv.Unavailable(err) {
		t.Errorf("%s: %v, want an error not Unavailable", what, err)
	}
}

// waitStatus polls until the connection's status satisfies ok.
func waitStatus(t *testing.T, nc *nats.Conn, ok func(nats.Status) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(nc.Status()) {
		if time.Now().After(deadline) {
			t.Fatalf("connection status %v", nc.Status())
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}
