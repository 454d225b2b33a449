package events_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/natsutil"
)

// clusterBus is a 3-node JetStream cluster in process with the identities
// of pkg/busauth.
type clusterBus struct {
	servers []*server.Server
	ids     map[string]busauth.Identity
}

func newClusterBus(t *testing.T) clusterBus {
	t.Helper()
	ids, err := busauth.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	users, err := busauth.ServerUsers(ids)
	if err != nil {
		t.Fatal(err)
	}
	return clusterBus{servers: natstest.Cluster(t, 3, users), ids: ids}
}

// js connects as identity to the first server, so the API-call watcher
// (watch) sees every request of the connection without routes between.
func (b clusterBus) js(t *testing.T, identity string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsutil.Connect(b.servers[0].ClientURL(), identity, b.ids[identity].Option())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// contractStreams names every stream of the contract, buckets as KV_<bucket>.
func contractStreams() []string {
	var names []string
	for _, sc := range events.Streams(events.StreamOptions{}) {
		names = append(names, sc.Name)
	}
	for _, kc := range events.Buckets(events.StreamOptions{}) {
		names = append(names, "KV_"+kc.Bucket)
	}
	return names
}

// waitReplicas polls until every stream and bucket is declared with n
// replicas and has n current peers (a leader and n-1 followers).
func waitReplicas(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	for _, name := range contractStreams() {
		for {
			st, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("stream %s: %v", name, err)
			}
			info := st.CachedInfo()
			if info.Config.Replicas != n {
				t.Fatalf("stream %s: config has %d replicas, want %d", name, info.Config.Replicas, n)
			}
			if info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == n-1 && allCurrent(info.Cluster.Replicas) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("stream %s: cluster %+v, want a leader and %d current followers", name, info.Cluster, n-1)
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}
	}
}

// checkReads asserts how every bucket is read: with direct gets (any
// replica answers) or through its leader.
func checkReads(t *testing.T, js jetstream.JetStream, direct bool) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	for _, kc := range events.Buckets(events.StreamOptions{}) {
		st, err := js.Stream(ctx, "KV_"+kc.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.AllowDirect; got != direct {
			t.Errorf("bucket %s: allow direct %t, want %t", kc.Bucket, got, direct)
		}
	}
}

// TestReplicatedBucketReadsItsWrites: a write acknowledged through one node
// of the cluster is read through each of the others at once, as an edge
// reads a file another edge has just recorded.
func TestReplicatedBucketReadsItsWrites(t *testing.T) {
	b := newClusterBus(t)
	_, ajs := b.js(t, busauth.Admin)
	ctx := ctxFor(t, 2*time.Minute)
	if err := events.Ensure(ctx, ajs, events.StreamOptions{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, ajs, 3)
	var kvs []jetstream.KeyValue
	for _, srv := range b.servers {
		nc, err := natsutil.Connect(srv.ClientURL(), busauth.Edge, b.ids[busauth.Edge].Option())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, events.BucketFiles)
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, kv)
	}
	for i := range 300 {
		w := kvs[i%3]
		key := fmt.Sprintf("t.acme.file-%d", i)
		if _, err := w.Put(ctx, key, []byte("v")); err != nil {
			t.Fatal(err)
		}
		for j := 1; j < 3; j++ {
			if _, err := kvs[(i+j)%3].Get(ctx, key); err != nil {
				t.Fatalf("write %d through node %d, read through node %d: %v", i, i%3, (i+j)%3, err)
			}
		}
	}
}

func allCurrent(peers []*jetstream.PeerInfo) bool {
	for _, p := range peers {
		if !p.Current || p.Offline {
			return false
		}
	}
	return true
}

// watch counts the stream create and update API calls the admin
// connection nc makes. count returns the calls since its last call: it
// publishes a marker on nc and waits for it, so every earlier call has
// been seen. (CreateOrUpdate tries an update first, so creating a stream
// is one update refused with "not found" and one create.)
func watch(t *testing.T, b clusterBus, nc *nats.Conn) (count func() (creates, updates int)) {
	t.Helper()
	wc, _ := b.js(t, busauth.Admin)
	calls := make(chan *nats.Msg, 1024)
	for _, subj := range []string{"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "natstest.mark"} {
		if _, err := wc.ChanSubscribe(subj, calls); err != nil {
			t.Fatal(err)
		}
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() (creates, updates int) {
		t.Helper()
		if err := nc.Publish("natstest.mark", nil); err != nil {
			t.Fatal(err)
		}
		// One connection's messages arrive in order: every call made
		// before the marker comes before it.
		timeout := time.After(30 * time.Second)
		for {
			select {
			case m := <-calls:
				switch {
				case m.Subject == "natstest.mark":
					return creates, updates
				case strings.HasPrefix(m.Subject, "$JS.API.STREAM.CREATE."):
					creates++
				default:
					updates++
				}
			case <-timeout:
				t.Fatal("the watcher never saw the marker")
			}
		}
	}
}

func TestEnsureReplicasOnCluster(t *testing.T) {
	b := newClusterBus(t)
	nc, js := b.js(t, busauth.Admin)
	calls := watch(t, b, nc)
	all := len(contractStreams())

	if err := events.Ensure(ctxFor(t, time.Minute), js, events.StreamOptions{Replicas: 3}); err != nil {
		t.Fatalf("Ensure R3 on a fresh cluster: %v", err)
	}
	waitReplicas(t, js, 3)
	checkReads(t, js, false)
	if creates, _ := calls(); creates != all {
		t.Errorf("Ensure on a fresh cluster made %d create calls, want %d (one per stream and bucket)", creates, all)
	}

	if err := events.Ensure(ctxFor(t, time.Minute), js, events.StreamOptions{Replicas: 3}); err != nil {
		t.Fatalf("second Ensure R3: %v", err)
	}
	if creates, updates := calls(); creates+updates != 0 {
		t.Errorf("Ensure with everything in place made %d create and %d update calls, want none", creates, updates)
	}

	// Down is applied too.
	if err := events.Ensure(ctxFor(t, time.Minute), js, events.StreamOptions{Replicas: 1}); err != nil {
		t.Fatalf("Ensure R1 on an R3 bus: %v", err)
	}
	waitReplicas(t, js, 1)
	checkReads(t, js, true)
	if creates, updates := calls(); creates != 0 || updates != all {
		t.Errorf("Ensure R3 -> R1 made %d create and %d update calls, want 0 and %d", creates, updates, all)
	}
}

func TestEnsureRaisesR1BusToR3KeepingData(t *testing.T) {
	b := newClusterBus(t)
	nc, js := b.js(t, busauth.Admin)
	ctx := ctxFor(t, 2*time.Minute)
	if err := events.Ensure(ctx, js, events.StreamOptions{Replicas: 1}); err != nil {
		t.Fatalf("Ensure R1: %v", err)
	}
	waitReplicas(t, js, 1)
	kv, err := js.KeyValue(ctx, events.BucketTenants)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "t1", []byte("acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "aiforge.docs.test", []byte("kept")); err != nil {
		t.Fatal(err)
	}

	// A service declaring R3 against the R1 bus may not change it: Ensure
	// fails, naming what differs and how to fix it, and changes nothing.
	_, sjs := b.js(t, busauth.Edge)
	err = events.Ensure(ctxFor(t, 3*time.Second), sjs, events.StreamOptions{Replicas: 3})
	if err == nil {
		t.Fatal("a service identity's Ensure R3 on an R1 bus succeeded")
	}
	for _, want := range []string{"aiforge nats provision", "stream " + events.StreamUsage + " (replicas 1, declared 3)", "bucket " + events.BucketTenants + " (replicas 1, declared 3, direct gets true, declared false)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("service Ensure error lacks %q:\n%v", want, err)
		}
	}
	waitReplicas(t, js, 1)
	t.Logf("a service's Ensure against a bus provisioned differently fails with:\n%v", err)

	calls := watch(t, b, nc)
	if err := events.Ensure(ctx, js, events.StreamOptions{Replicas: 3}); err != nil {
		t.Fatalf("Ensure R3 on an R1 bus: %v", err)
	}
	waitReplicas(t, js, 3)
	checkReads(t, js, false)
	if creates, updates := calls(); creates != 0 || updates != len(contractStreams()) {
		t.Errorf("raising R1 to R3 made %d create and %d update calls, want 0 and %d", creates, updates, len(contractStreams()))
	}
	// A replicated bucket is read through its leader, so a handle bound
	// while it had one replica (and direct gets) is bound again.
	if kv, err = js.KeyValue(ctx, events.BucketTenants); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "t1")
	if err != nil || string(e.Value()) != "acme" {
		t.Fatalf("tenants t1 after R1 -> R3: %v %v, want acme", e, err)
	}
	st, err := js.Stream(ctx, events.StreamDocs)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "aiforge.docs.test")
	if err != nil || string(m.Data) != "kept" {
		t.Fatalf("DOCS message after R1 -> R3: %v %v, want kept", m, err)
	}
	// Every bucket kept its shape: history, TTL, storage.
	for _, kc := range events.Buckets(events.StreamOptions{Replicas: 3}) {
		b, err := js.KeyValue(ctx, kc.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.History() != int64(kc.History) || s.TTL() != kc.TTL || s.Config().Storage != kc.Storage {
			t.Errorf("bucket %s after R1 -> R3: history %d ttl %s storage %s, want %d %s %s", kc.Bucket, s.History(), s.TTL(), s.Config().Storage, kc.History, kc.TTL, kc.Storage)
		}
	}

	// Now the admin's and the service's checks pass, changing nothing.
	if err := events.Ensure(ctx, js, events.StreamOptions{Replicas: 3}); err != nil {
		t.Fatalf("admin Ensure R3 on the R3 bus: %v", err)
	}
	if err := events.Ensure(ctxFor(t, 30*time.Second), sjs, events.StreamOptions{Replicas: 3}); err != nil {
		t.Fatalf("service Ensure R3 on the R3 bus: %v", err)
	}
	if creates, updates := calls(); creates+updates != 0 {
		t.Errorf("admin and service Ensure with everything in place made %d create and %d update calls, want none", creates, updates)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("test context ran out")
	}
}
