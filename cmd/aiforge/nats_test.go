package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/busauth"
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
