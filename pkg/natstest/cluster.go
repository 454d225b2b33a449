package natstest

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterReadyTimeout bounds how long Cluster waits for its servers to
// accept connections and elect a JetStream meta leader that sees them all.
const ClusterReadyTimeout = 30 * time.Second

// Cluster starts n JetStream servers routed into one cluster on loopback
// (client and route ports picked by the kernel), each with its file store
// in its own temporary directory, and waits until the JetStream meta group
// has a leader that sees every server and every server is current. users
// are the nkey identities every server accepts (pkg/busauth); with none,
// clients connect anonymously. The servers are shut down when the test
// ends.
func Cluster(t testing.TB, n int, users []*server.NkeyUser) []*server.Server {
	t.Helper()
	var servers []*server.Server
	t.Cleanup(func() {
		for _, s := range servers {
			s.Shutdown()
		}
		for _, s := range servers {
			s.WaitForShutdown()
		}
	})
	// JetStream in a cluster wants its routes configured, the first
	// server's too, so route ports are picked before the servers start;
	// every server routes to all of them (its own route is dropped).
	ports := freePorts(t, n)
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))})
	}
	for i := range n {
		opts := &server.Options{
			ServerName:         fmt.Sprintf("n%d", i+1),
			Host:               "127.0.0.1",
			Port:               -1,
			JetStream:          true,
			StoreDir:           t.TempDir(),
			NoSigs:             true,
			NoLog:              true,
			MaxPayload:         8 << 20,
			JetStreamMaxMemory: 64 << 20,
			JetStreamMaxStore:  1 << 30,
			Nkeys:              users,
			Cluster:            server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: ports[i]},
			Routes:             routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("natstest: cluster server %d: %v", i+1, err)
		}
		servers = append(servers, s)
		go s.Start()
		if !s.ReadyForConnections(ClusterReadyTimeout) {
			t.Fatalf("natstest: cluster server %d not ready after %s", i+1, ClusterReadyTimeout)
		}
	}
	WaitClusterReady(t, servers)
	return servers
}

// WaitClusterReady polls until one of servers is the JetStream meta leader,
// sees all of them as peers, and every server's meta state is current.
func WaitClusterReady(t testing.TB, servers []*server.Server) {
	t.Helper()
	deadline := time.Now().Add(ClusterReadyTimeout)
	for !clusterReady(servers) {
		if time.Now().After(deadline) {
			t.Fatalf("natstest: no JetStream meta leader seeing all %d servers after %s", len(servers), ClusterReadyTimeout)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

func clusterReady(servers []*server.Server) bool {
	leader := false
	for _, s := range servers {
		if !s.JetStreamIsCurrent() {
			return false
		}
		if s.JetStreamIsLeader() {
			leader = len(s.JetStreamClusterPeers()) == len(servers)
		}
	}
	return leader
}

// ClientURLs are the servers' client URLs joined for nats.Connect, so a
// connection fails over between them.
func ClientURLs(servers []*server.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// freePorts picks n free loopback ports. They are closed before the
// servers bind them; another process taking one in between fails the
// test with a clear listener error, not a hang.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("natstest: free port: %v", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
}
