package app

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natsutil"
)

// `aiforge run nats` (and `up --nats-listen`): the listener requires
// authentication, the identities are created in the data dir with mode
// 0600 and announced, and each works with its own permissions only.
func TestServedBusRequiresCredentials(t *testing.T) {
	dir := t.TempDir()
	urls := make(chan string, 1)
	var credsDir string
	a, err := New(Options{Targets: []string{"nats"}, DataDir: dir, NATSListen: "127.0.0.1:-1",
		OnNATSListen: func(url, creds string) { credsDir = creds; urls <- url }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("the bus did not announce its listener")
	}
	for _, name := range busauth.Identities() {
		fi, err := os.Stat(busauth.SeedFile(credsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", name, fi.Mode().Perm())
		}
	}
	quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	if _, err := natsutil.Connect(url, "anonymous", nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous: %v, want an authorization violation", err)
	}
	dial := func(id string) *nats.Conn {
		t.Helper()
		nc, err := natsutil.Dial(url, id, natsutil.ConnectOptions{NKeyFile: busauth.SeedFile(credsDir, id)}, nats.MaxReconnects(0), quiet)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	// Provisioned at start, as admin.
	admin := dial(busauth.Admin)
	if _, err := admin.Request("$JS.API.STREAM.INFO."+events.StreamUsage, nil, 5*time.Second); err != nil {
		t.Fatalf("USAGE not provisioned: %v", err)
	}
	worker := dial(busauth.Worker)
	if err := worker.Publish(events.Infer("chat"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(worker.LastError(), nats.ErrPermissionViolation) {
		t.Fatalf("a worker published an inference request: %v", worker.LastError())
	}
}
