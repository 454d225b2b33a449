package natsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func dial(url string, co ConnectOptions) error {
	nc, err := Dial(url, "test", co, nats.MaxReconnects(0), nats.Timeout(5*time.Second))
	if err == nil {
		nc.Close()
	}
	return err
}

// A refused password or token is named as an authorization violation, and
// neither the secret nor the URL's user information is in the error.
func TestExplainAuthorizationWithoutSecrets(t *testing.T) {
	const password, token = "hunter2-very-secret", "tok-very-secret"
	users := startServer(t, &server.Options{Users: []*server.User{{Username: "edge", Password: "right-one"}}})
	err := dial(users.ClientURL(), ConnectOptions{User: "edge", Password: password})
	if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "authorization violation") {
		t.Fatalf("wrong password: %v", err)
	}
	if strings.Contains(err.Error(), password) {
		t.Fatalf("the error prints the password: %v", err)
	}
	if err := dial(users.ClientURL(), ConnectOptions{User: "edge", Password: "right-one"}); err != nil {
		t.Fatalf("right password: %v", err)
	}
	url := strings.Replace(users.ClientURL(), "nats://", "nats://edge:"+password+"@", 1)
	err = dial(url, ConnectOptions{})
	if !errors.Is(err, nats.ErrAuthorization) || strings.Contains(err.Error(), password) {
		t.Fatalf("password in the URL: %v", err)
	}

	tokens := startServer(t, &server.Options{Authorization: "the-real-token"})
	err = dial(tokens.ClientURL(), ConnectOptions{Token: token})
	if !errors.Is(err, nats.ErrAuthorization) || strings.Contains(err.Error(), token) {
		t.Fatalf("wrong token: %v", err)
	}
	if err := dial(tokens.ClientURL(), ConnectOptions{Token: "the-real-token"}); err != nil {
		t.Fatalf("right token: %v", err)
	}
}

// A server whose certificate the client cannot verify is named as a TLS
// problem (unknown authority) that --nats-tls-ca fixes.
func TestExplainTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, &server.Options{TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	url := "tls://" + s.Addr().String()
	err = dial(url, ConnectOptions{TLSCA: writeOtherCA(t, dir)})
	if err == nil || !strings.Contains(err.Error(), "unknown authority") || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("untrusted server certificate: %v", err)
	}
	if err := dial(url, ConnectOptions{TLSCA: certFile}); err != nil {
		t.Fatalf("with the right CA: %v", err)
	}
}

func TestExplainNoServers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	err = dial("nats://"+addr, ConnectOptions{})
	if !errors.Is(err, nats.ErrNoServers) || !strings.Contains(err.Error(), "no NATS server reachable") {
		t.Fatalf("nothing listening: %v", err)
	}
}

func TestConnectOptionsChecks(t *testing.T) {
	for name, co := range map[string]ConnectOptions{
		"two methods":        {User: "a", Token: "b"},
		"password, no user":  {Password: "p"},
		"cert without key":   {TLSCert: "c.pem"},
		"missing nkey file":  {NKeyFile: "/nonexistent/edge.nk"},
		"missing creds file": {CredsFile: "/nonexistent/edge.creds"},
	} {
		if _, err := co.Options(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.nk")
	if err := os.WriteFile(bad, []byte("SUsecret-but-not-a-seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ConnectOptions{NKeyFile: bad}.Options()
	if err == nil || strings.Contains(err.Error(), "SUsecret") {
		t.Fatalf("bad seed file: %v", err)
	}
}

func selfSigned(t *testing.T, dir string) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

func writeOtherCA(t *testing.T, dir string) string {
	t.Helper()
	sub := filepath.Join(dir, "other")
	_ = os.MkdirAll(sub, 0o700)
	ca, _ := selfSigned(t, sub)
	return ca
}

// The embedded server with TLS: a client that trusts its CA connects with
// its nkey, one that does not is told about the unknown authority, and a
// plain-text client is refused.
func TestEmbeddedServerRequiresTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	cfg, err := ServerTLS(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := StartEmbedded(EmbeddedConfig{StoreDir: filepath.Join(dir, "js"), Port: -1, TLS: cfg,
		Users: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	url := s.ClientURL()
	if err := dial(url, ConnectOptions{NKeyFile: seedFile, TLSCA: certFile}); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	err = dial(url, ConnectOptions{NKeyFile: seedFile, TLSCA: writeOtherCA(t, dir)})
	if err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("another CA: %v", err)
	}
	if err := dial(url, ConnectOptions{NKeyFile: seedFile}); err == nil {
		t.Fatal("a plain-text client was accepted")
	}
	// In-process clients need no TLS.
	nc, err := ConnectInProcess(s, "inproc", nats.Nkey(pub, kp.Sign))
	if err != nil {
		t.Fatalf("in-process: %v", err)
	}
	nc.Close()
}
