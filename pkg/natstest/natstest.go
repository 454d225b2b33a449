// Package natstest runs a real embedded JetStream server for tests.
package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/natsutil"
)

// Server starts an embedded JetStream server listening on a free loopback
// port with its store in a temporary directory; it is shut down when the test
// ends.
func Server(t testing.TB) *server.Server {
	t.Helper()
	s, err := natsutil.StartEmbedded(natsutil.EmbeddedConfig{StoreDir: t.TempDir(), Port: -1, ServerName: "test", Anonymous: true})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Conn opens a client connection to s that is closed when the test ends.
func Conn(t testing.TB, s *server.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := natsutil.Connect(s.ClientURL(), name)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream starts a server and returns it with one connection.
func JetStream(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	s := Server(t)
	return s, Conn(t, s, t.Name())
}
