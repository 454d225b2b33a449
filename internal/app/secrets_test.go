package app

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/sealed"
)

func secretsApp(t *testing.T, o Options) (*App, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return a, &logs
}

func TestSecretsKeyGeneratedByWorkersInDataDir(t *testing.T) {
	dir := t.TempDir()
	a, logs := secretsApp(t, Options{Targets: []string{"all"}, DataDir: dir})
	priv, pub, err := a.secretsKeys()
	if err != nil || priv == nil || pub == nil || *pub != priv.Public() {
		t.Fatalf("all-in-one: %v, %v, %v", priv, pub, err)
	}
	st, err := os.Stat(filepath.Join(dir, "secrets.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secrets.key: %v, %v", st, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "secrets.key"))
	if strings.Contains(logs.String(), strings.TrimSpace(string(raw))) || !strings.Contains(logs.String(), "secrets.key") {
		t.Fatalf("the log shows the key or not its path: %s", logs)
	}
	filePub, err := sealed.LoadPublicKeyFile(filepath.Join(dir, "secrets.pub"))
	if err != nil || filePub != priv.Public() {
		t.Fatalf("secrets.pub = %v, %v", filePub, err)
	}

	// The next start (workers alone) reads the same key.
	b, _ := secretsApp(t, Options{Targets: []string{"workers"}, DataDir: dir})
	if p2, pub2, err := b.secretsKeys(); err != nil || p2 == nil || p2.Public() != priv.Public() || pub2 != nil {
		t.Fatalf("workers restart: %v, %v, %v", p2, pub2, err)
	}

	// An edge with the same data dir reads only the public half.
	if err := os.Remove(filepath.Join(dir, "secrets.key")); err != nil {
		t.Fatal(err)
	}
	e, _ := secretsApp(t, Options{Targets: []string{"edge"}, DataDir: dir})
	if p3, pub3, err := e.secretsKeys(); err != nil || p3 != nil || pub3 == nil || *pub3 != priv.Public() {
		t.Fatalf("edge: %v, %v, %v", p3, pub3, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "secrets.key")); !os.IsNotExist(err) {
		t.Fatalf("the edge generated a private key: %v", err)
	}
}

func TestSecretsKeyFromFiles(t *testing.T) {
	dir := t.TempDir()
	keyFile, pubFile := filepath.Join(dir, "mount", "key"), filepath.Join(dir, "mount", "pub")
	// A named key file is never generated.
	w, _ := secretsApp(t, Options{Targets: []string{"workers"}, SecretsKeyFile: keyFile})
	if _, _, err := w.secretsKeys(); err == nil || !strings.Contains(err.Error(), "AIFORGE_SECRETS_KEY_FILE") {
		t.Fatalf("missing key file: %v", err)
	}
	k, _, _, err := sealed.LoadOrCreate(keyFile, pubFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	w, logs := secretsApp(t, Options{Targets: []string{"workers"}, SecretsKeyFile: keyFile})
	if p, _, err := w.secretsKeys(); err != nil || p.Public() != k.Public() {
		t.Fatalf("workers: %v, %v", p, err)
	}
	if !strings.Contains(logs.String(), "chmod 600") {
		t.Fatalf("no warning about a readable key file: %s", logs)
	}
	e, _ := secretsApp(t, Options{Targets: []string{"edge"}, SecretsPublicKeyFile: pubFile})
	if _, p, err := e.secretsKeys(); err != nil || p == nil || *p != k.Public() {
		t.Fatalf("edge: %v, %v", p, err)
	}
	// A public key that does not match the private one is a mistake.
	other, _ := sealed.Generate()
	otherPub := filepath.Join(dir, "other.pub")
	if err := sealed.WritePublicKeyFile(otherPub, other.Public()); err != nil {
		t.Fatal(err)
	}
	all, _ := secretsApp(t, Options{Targets: []string{"all"}, SecretsKeyFile: keyFile, SecretsPublicKeyFile: otherPub})
	if _, _, err := all.secretsKeys(); err == nil || !strings.Contains(err.Error(), "not the public half") {
		t.Fatalf("mismatched keys: %v", err)
	}
}

func TestNoSecretsKeyWarns(t *testing.T) {
	e, logs := secretsApp(t, Options{Targets: []string{"edge", "workers"}})
	if p, pub, err := e.secretsKeys(); err != nil || p != nil || pub != nil {
		t.Fatalf("%v, %v, %v", p, pub, err)
	}
	for _, want := range []string{"AIFORGE_SECRETS_KEY_FILE", "AIFORGE_SECRETS_PUBLIC_KEY_FILE"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no warning naming %s: %s", want, logs)
		}
	}
	// Other services need no key and read none.
	u, logs := secretsApp(t, Options{Targets: []string{"usage"}, DataDir: t.TempDir()})
	if p, pub, err := u.secretsKeys(); err != nil || p != nil || pub != nil || logs.Len() != 0 {
		t.Fatalf("usage: %v, %v, %v, %s", p, pub, err, logs)
	}
}
