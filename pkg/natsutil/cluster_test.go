package natsutil

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestStartClusterValidates(t *testing.T) {
	if _, err := StartCluster(ClusterConfig{StoreDir: t.TempDir()}); err == nil {
		t.Fatal("a cluster of no servers started")
	}
	if _, err := StartCluster(ClusterConfig{Servers: 3}); err == nil {
		t.Fatal("a cluster without a store dir started")
	}
}

// A started cluster takes an R3 stream, and a connection to all its
// client URLs reaches it.
func TestStartClusterServesR3(t *testing.T) {
	servers, err := StartCluster(ClusterConfig{Servers: 3, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ShutdownCluster(servers) })
	url := ClientURLs(servers)
	if got := strings.Count(url, ",") + 1; got != 3 {
		t.Fatalf("ClientURLs %q: %d URLs, want 3", url, got)
	}
	nc, err := Connect(url, "cluster-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "r3.x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.State.Msgs != 1 || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream: replicas %d, msgs %d, followers %d", info.Config.Replicas, info.State.Msgs, len(info.Cluster.Replicas))
	}
}
