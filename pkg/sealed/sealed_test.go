package sealed_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/sealed"
)

func mustGenerate(t *testing.T) *sealed.PrivateKey {
	t.Helper()
	k, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := mustGenerate(t)
	const secret = "sk-engine-very-secret"
	v, err := k.Public().Seal([]byte(secret), "model\x00http://e/v1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(v, secret) || !strings.HasPrefix(v, "v1."+k.Public().ID()+".") {
		t.Fatalf("sealed value %q", v)
	}
	again, _ := k.Public().Seal([]byte(secret), "model\x00http://e/v1")
	if again == v {
		t.Fatal("two seals of the same secret are equal: the box is not randomised")
	}
	got, err := k.Open(v, "model\x00http://e/v1")
	if err != nil || string(got) != secret {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if id, err := sealed.KeyID(v); err != nil || id != k.Public().ID() {
		t.Fatalf("KeyID = %q, %v", id, err)
	}
}

func TestOpenRefuses(t *testing.T) {
	k, other := mustGenerate(t), mustGenerate(t)
	const secret = "sk-engine-never-in-an-error"
	v, err := k.Public().Seal([]byte(secret), "ctx")
	if err != nil {
		t.Fatal(err)
	}
	// Same key id, other body: a forged or corrupted value.
	forged, _ := other.Public().Seal([]byte("x"), "ctx")
	forged = "v1." + k.Public().ID() + "." + strings.SplitN(forged, ".", 3)[2]
	for _, c := range []struct {
		name string
		key  *sealed.PrivateKey
		v    string
		ctx  string
		want error
	}{
		{"other key", other, v, "ctx", sealed.ErrWrongKey},
		{"other context", k, v, "ctx2", sealed.ErrContext},
		{"forged body", k, forged, "ctx", sealed.ErrOpen},
		{"truncated", k, v[:len(v)-4], "ctx", sealed.ErrOpen},
		{"not sealed", k, secret, "ctx", sealed.ErrMalformed},
		{"unknown version", k, "v9" + v[2:], "ctx", sealed.ErrMalformed},
	} {
		got, err := c.key.Open(c.v, c.ctx)
		if !errors.Is(err, c.want) || got != nil {
			t.Errorf("%s: Open = %q, %v; want %v", c.name, got, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the secret: %v", c.name, err)
		}
	}
}

func TestKeyNeverPrinted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets.key")
	k, _, _, err := sealed.LoadOrCreate(path, "")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(path)
	raw := strings.TrimSpace(string(text))
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k)} {
		if strings.Contains(s, raw) || !strings.Contains(s, k.Public().ID()) {
			t.Fatalf("printed key %q", s)
		}
	}
}

func TestLoadOrCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	path, pub := filepath.Join(dir, "secrets.key"), filepath.Join(dir, "secrets.pub")
	k, created, tooOpen, err := sealed.LoadOrCreate(path, pub)
	if err != nil || !created || tooOpen {
		t.Fatalf("LoadOrCreate = %v, created %v, tooOpen %v", err, created, tooOpen)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", st.Mode().Perm(), err)
	}
	p, err := sealed.LoadPublicKeyFile(pub)
	if err != nil || p != k.Public() {
		t.Fatalf("public key file = %v, %v; want %v", p, err, k.Public())
	}
	again, created, _, err := sealed.LoadOrCreate(path, pub)
	if err != nil || created || again.Public() != k.Public() {
		t.Fatalf("second LoadOrCreate = %v, created %v, same key %v", err, created, again.Public() == k.Public())
	}
	v, _ := k.Public().Seal([]byte("s"), "")
	if got, err := again.Open(v, ""); err != nil || string(got) != "s" {
		t.Fatalf("reloaded key Open = %q, %v", got, err)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, tooOpen, err := sealed.LoadPrivateKeyFile(path); err != nil || !tooOpen {
		t.Fatalf("mode 0644: tooOpen %v, %v", tooOpen, err)
	}
	// A Kubernetes Secret volume's mode for a non-root pod.
	if err := os.Chmod(path, 0o440); err != nil {
		t.Fatal(err)
	}
	if _, tooOpen, err := sealed.LoadPrivateKeyFile(path); err != nil || tooOpen {
		t.Fatalf("mode 0440: tooOpen %v, %v", tooOpen, err)
	}
}

func TestParseKeys(t *testing.T) {
	// Any 32 bytes in base64 are a key: `openssl rand -base64 32`.
	const std = "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA="
	k, err := sealed.ParsePrivateKey([]byte(std + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	url := strings.NewReplacer("+", "-", "/", "_", "=", "").Replace(std)
	if k2, err := sealed.ParsePrivateKey([]byte(url)); err != nil || k2.Public() != k.Public() {
		t.Fatalf("URL alphabet: %v", err)
	}
	p, err := sealed.ParsePublicKey([]byte(k.Public().String()))
	if err != nil || p != k.Public() {
		t.Fatalf("ParsePublicKey(String()) = %v, %v", p, err)
	}
	for _, bad := range []string{"", "short", std[:20]} {
		if _, err := sealed.ParsePrivateKey([]byte(bad)); err == nil {
			t.Errorf("ParsePrivateKey(%q) accepted", bad)
		}
		if _, err := sealed.ParsePublicKey([]byte(bad)); err == nil {
			t.Errorf("ParsePublicKey(%q) accepted", bad)
		}
	}
}
