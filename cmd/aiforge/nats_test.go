package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/natsutil"
)

// aiforge nats config writes one seed per identity (mode 0600) and a
// server configuration that names their public keys only.
func TestNATSConfigWritesPrivateSeeds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"nats", "config", "--out", dir})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	conf := out.String()
	for _, name := range busauth.Identities() {
		path := busauth.SeedFile(dir, name)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", path, fi.Mode().Perm())
		}
		id, err := busauth.Load(name, path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(conf, id.PublicKey) {
			t.Errorf("the configuration lacks %s's public key", name)
		}
		if strings.Contains(conf, string(id.Seed())) {
			t.Errorf("the configuration prints %s's seed", name)
		}
	}
	written, err := os.ReadFile(filepath.Join(dir, "nats-server.conf"))
	if err != nil || string(written) != conf {
		t.Fatalf("nats-server.conf differs from the printed configuration (%v)", err)
	}
}

// aiforge nats provision gives every stream and bucket the replicas of
// AIFORGE_STREAM_REPLICAS or --stream-replicas, raising an R1 bus and
// lowering it again, and a service started with the same value passes its
// check.
func TestNATSProvisionReplicasOnCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	ids, err := busauth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	users, err := busauth.ServerUsers(ids)
	if err != nil {
		t.Fatal(err)
	}
	servers := natstest.Cluster(t, 3, users)
	url := natstest.ClientURLs(servers)
	provision := func(args ...string) string {
		t.Helper()
		root := newRoot()
		var stderr bytes.Buffer
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&stderr)
		root.SetArgs(append([]string{"nats", "provision", "--nats-url", url, "--nats-nkey", busauth.SeedFile(dir, busauth.Admin)}, args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("provision %v: %v\n%s", args, err, stderr.String())
		}
		return stderr.String()
	}
	replicas := func(identity string) map[int]int {
		t.Helper()
		nc, err := natsutil.Connect(url, identity, ids[identity].Option())
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
		count := map[int]int{}
		for _, sc := range events.Streams(events.StreamOptions{}) {
			st, err := js.Stream(ctx, sc.Name)
			if err != nil {
				t.Fatal(err)
			}
			count[st.CachedInfo().Config.Replicas]++
		}
		for _, kc := range events.Buckets(events.StreamOptions{}) {
			st, err := js.Stream(ctx, "KV_"+kc.Bucket)
			if err != nil {
				t.Fatal(err)
			}
			count[st.CachedInfo().Config.Replicas]++
		}
		return count
	}
	all := len(events.Streams(events.StreamOptions{})) + len(events.Buckets(events.StreamOptions{}))

	provision()
	if got := replicas(busauth.Admin); got[1] != all {
		t.Fatalf("default provision: replicas %v, want all %d at 1", got, all)
	}
	t.Setenv("AIFORGE_STREAM_REPLICAS", "3")
	if out := provision(); !strings.Contains(out, "with 3 replicas") {
		t.Errorf("provision output %q does not name 3 replicas", out)
	}
	if got := replicas(busauth.Admin); got[3] != all {
		t.Fatalf("AIFORGE_STREAM_REPLICAS=3: replicas %v, want all %d at 3", got, all)
	}

	// A service given the same value passes its start check.
	nc, err := natsutil.Connect(url, busauth.Usage, ids[busauth.Usage].Option())
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
	if err := events.Ensure(ctx, js, events.StreamOptions{Replicas: 3}); err != nil {
		t.Fatalf("service check after provisioning R3: %v", err)
	}

	provision("--stream-replicas", "1")
	if got := replicas(busauth.Admin); got[1] != all {
		t.Fatalf("--stream-replicas 1 after 3: replicas %v, want all %d at 1", got, all)
	}
}

// AIFORGE_STREAM_REPLICAS is the default of --stream-replicas on the
// provisioning command and on every way of starting services, and reaches
// the stream options every service's Ensure is given (internal/app passes
// Edge.Streams to the usage service and to its own check at start).
func TestStreamReplicasReachEveryEnsure(t *testing.T) {
	t.Setenv("AIFORGE_STREAM_REPLICAS", "3")
	for name, c := range map[string]*cobra.Command{"nats provision": natsProvisionCmd(), "run": runCmd(), "up": upCmd()} {
		if f := c.Flags().Lookup("stream-replicas"); f == nil || f.DefValue != "3" {
			t.Errorf("%s: --stream-replicas %+v, want default 3 from AIFORGE_STREAM_REPLICAS", name, f)
		}
	}
	for _, args := range [][]string{nil, {"--stream-replicas", "1"}} {
		var f serveFlags
		c := &cobra.Command{}
		f.add(c, false)
		if err := c.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		o, err := f.options([]string{"edge"})
		if err != nil {
			t.Fatal(err)
		}
		want := 3
		if args != nil {
			want = 1
		}
		if o.Edge.Streams.Replicas != want {
			t.Errorf("args %v: Edge.Streams.Replicas = %d, want %d", args, o.Edge.Streams.Replicas, want)
		}
	}
}
