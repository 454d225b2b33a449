package e2e

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natsutil"
)

// The compose layout: `aiforge run nats` serves the bus, and edge, usage
// and workers run as separate processes, each authenticating with its own
// nkey over TCP. A chat completion crosses them under the permission table;
// a worker's credential cannot forge one.
func TestServicesAuthenticateWithTheirOwnCredentials(t *testing.T) {
	var url, creds string
	startStack(t, stackOpts{targets: []string{"nats"}, mutate: func(o *app.Options) {
		o.NATSListen = "127.0.0.1:-1"
		o.OnNATSListen = func(u, dir string) { url, creds = u, dir }
	}})
	as := func(identity string) func(*app.Options) {
		return func(o *app.Options) {
			o.NATS = natsutil.ConnectOptions{NKeyFile: busauth.SeedFile(creds, identity)}
		}
	}
	_, base := sim(t, enginesim.Config{Models: []string{"up"}})
	edge := externalStack(t, url, []string{"edge"}, as(busauth.Edge))
	externalStack(t, url, []string{"usage"}, as(busauth.Usage))
	externalStack(t, url, []string{"workers"}, as(busauth.Worker))

	key, _ := edge.tenantKey("acme")
	edge.register("chat", base, "up")
	edge.waitServed(key, "chat")

	nc, err := natsutil.Dial(url, "thief", natsutil.ConnectOptions{NKeyFile: busauth.SeedFile(creds, busauth.Worker)},
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m := nats.NewMsg(events.Infer("chat"))
	m.Header.Set("Aiforge-Tenant", "acme")
	m.Data = []byte(chatBody("chat", 2, false))
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(nc.LastError(), nats.ErrPermissionViolation) {
		t.Fatalf("a worker credential published an inference request: %v", nc.LastError())
	}
	if _, err := natsutil.Connect(url, "anonymous", nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous connection: %v", err)
	}
}
