package natsutil

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultClusterReadyTimeout bounds how long StartCluster waits for its
// servers to accept connections and elect a JetStream meta leader that
// sees them all.
const DefaultClusterReadyTimeout = 30 * time.Second

// ClusterConfig configures an in-process JetStream cluster on loopback:
// for tests and benchmarks, never a production bus.
type ClusterConfig struct {
	// Servers is how many servers to start. Required (at least 1).
	Servers int
	// StoreDir holds one file store per server (<StoreDir>/n1, n2 ...).
	// Required.
	StoreDir string
	// Users are the nkey identities every server accepts (pkg/busauth);
	// with none, clients connect anonymously.
	Users []*server.NkeyUser
	// Name is the cluster's name. Default "aiforge-local".
	Name string
	// ReadyTimeout bounds the start. Default DefaultClusterReadyTimeout.
	ReadyTimeout time.Duration
}

// StartCluster starts cfg.Servers JetStream servers routed into one cluster
// on 127.0.0.1 (client and route ports picked by the kernel), each with its
// file store in its own directory under cfg.StoreDir, and waits until the
// JetStream meta group has a leader that sees every server and every
// server is current. On an error every server started is shut down; on
// success the caller owns ShutdownCluster.
func StartCluster(cfg ClusterConfig) ([]*server.Server, error) {
	if cfg.Servers < 1 {
		return nil, errors.New("natsutil: a cluster needs at least one server")
	}
	if cfg.StoreDir == "" {
		return nil, errors.New("natsutil: StoreDir is required")
	}
	if cfg.Name == "" {
		cfg.Name = "aiforge-local"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = DefaultClusterReadyTimeout
	}
	// JetStream in a cluster wants its routes configured, the first
	// server's too, so route ports are picked before the servers start;
	// every server routes to all of them (its own route is dropped).
	ports, err := freePorts(cfg.Servers)
	if err != nil {
		return nil, err
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))})
	}
	var servers []*server.Server
	fail := func(err error) ([]*server.Server, error) {
		ShutdownCluster(servers)
		return nil, err
	}
	for i := range cfg.Servers {
		name := fmt.Sprintf("n%d", i+1)
		opts := &server.Options{
			ServerName:         name,
			Host:               "127.0.0.1",
			Port:               -1,
			JetStream:          true,
			StoreDir:           filepath.Join(cfg.StoreDir, name),
			NoSigs:             true,
			NoLog:              true,
			MaxPayload:         8 << 20,
			JetStreamMaxMemory: 64 << 20,
			JetStreamMaxStore:  1 << 30,
			Nkeys:              cfg.Users,
			Cluster:            server.ClusterOpts{Name: cfg.Name, Host: "127.0.0.1", Port: ports[i]},
			Routes:             routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			return fail(fmt.Errorf("natsutil: cluster server %s: %w", name, err))
		}
		servers = append(servers, s)
		go s.Start()
		if !s.ReadyForConnections(cfg.ReadyTimeout) {
			return fail(fmt.Errorf("natsutil: cluster server %s not ready after %s", name, cfg.ReadyTimeout))
		}
	}
	if err := WaitClusterReady(servers, cfg.ReadyTimeout); err != nil {
		return fail(err)
	}
	return servers, nil
}

// ShutdownCluster shuts every server down and waits until they stopped.
func ShutdownCluster(servers []*server.Server) {
	for _, s := range servers {
		s.Shutdown()
	}
	for _, s := range servers {
		s.WaitForShutdown()
	}
}

// WaitClusterReady polls until one of servers is the JetStream meta leader,
// sees all of them as peers, and every server's meta state is current.
func WaitClusterReady(servers []*server.Server, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !clusterReady(servers) {
		if time.Now().After(deadline) {
			return fmt.Errorf("natsutil: no JetStream meta leader seeing all %d servers after %s", len(servers), timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	return nil
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

// ClientURLs are the servers' client URLs joined for Connect, so a
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
// start with a clear listener error, not a hang.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("natsutil: free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
