package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/aiforge/aiforge/pkg/natsutil"
)

// ClusterReadyTimeout bounds how long Cluster waits for its servers to
// accept connections and elect a JetStream meta leader that sees them all.
const ClusterReadyTimeout = natsutil.DefaultClusterReadyTimeout

// Cluster starts n JetStream servers routed into one cluster on loopback
// (natsutil.StartCluster), their file stores in a temporary directory.
// users are the nkey identities every server accepts (pkg/busauth); with
// none, clients connect anonymously. The servers are shut down when the
// test ends.
func Cluster(t testing.TB, n int, users []*server.NkeyUser) []*server.Server {
	t.Helper()
	servers, err := natsutil.StartCluster(natsutil.ClusterConfig{Servers: n, StoreDir: t.TempDir(), Users: users, Name: "natstest"})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(func() { natsutil.ShutdownCluster(servers) })
	return servers
}

// WaitClusterReady polls until one of servers is the JetStream meta leader,
// sees all of them as peers, and every server's meta state is current.
func WaitClusterReady(t testing.TB, servers []*server.Server) {
	t.Helper()
	if err := natsutil.WaitClusterReady(servers, ClusterReadyTimeout); err != nil {
		t.Fatalf("natstest: %v", err)
	}
}

// ClientURLs are the servers' client URLs joined for nats.Connect, so a
// connection fails over between them.
func ClientURLs(servers []*server.Server) string { return natsutil.ClientURLs(servers) }
