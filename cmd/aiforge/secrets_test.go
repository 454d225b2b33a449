package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/sealed"
)

func TestSecretsKeygen(t *testing.T) {
	dir := t.TempDir()
	run := func() string {
		t.Helper()
		var out bytes.Buffer
		root := newRoot()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs([]string{"secrets", "keygen", "--out", dir})
		if err := root.Execute(); err != nil {
			t.Fatalf("secrets keygen: %v\n%s", err, out.String())
		}
		return out.String()
	}
	first := run()
	if !strings.HasPrefix(first, "generated the secrets key ") {
		t.Fatalf("first keygen printed %q", first)
	}
	keyPath, pubPath := filepath.Join(dir, "secrets.key"), filepath.Join(dir, "secrets.pub")
	st, err := os.Stat(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("secrets.key has mode %v, want 0600", st.Mode().Perm())
	}
	key, _, err := sealed.LoadPrivateKeyFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := sealed.LoadPublicKeyFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	if pub != key.Public() {
		t.Fatal("secrets.pub is not the public half of secrets.key")
	}
	box, err := pub.Seal([]byte("engine-key"), "ctx")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := key.Open(box, "ctx"); err != nil || string(got) != "engine-key" {
		t.Fatalf("open: %q %v", got, err)
	}

	// Again: the key is kept, and a lost public half is written again.
	if err := os.Remove(pubPath); err != nil {
		t.Fatal(err)
	}
	second := run()
	if !strings.HasPrefix(second, "kept the secrets key "+key.Public().ID()) {
		t.Fatalf("second keygen printed %q, want the same key kept", second)
	}
	if again, err := sealed.LoadPublicKeyFile(pubPath); err != nil || again != pub {
		t.Fatalf("secrets.pub after a second keygen: %v %v", again, err)
	}
}
