// Package natsutil starts an embedded NATS server with JetStream and opens
// connections to it or to an external cluster. It is the one place that knows
// how aiforge talks to its bus.
package natsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedConfig configures an in-process nats-server.
type EmbeddedConfig struct {
	// StoreDir holds the JetStream file store. Required.
	StoreDir string
	// Host and Port to listen on for external clients; Port -1 picks a free
	// port, and DontListen keeps the server reachable only in-process.
	Host       string
	Port       int
	DontListen bool
	// ServerName names the server in logs and cluster views.
	ServerName string
	// ReadyTimeout bounds how long Start waits for the server. Default 10s.
	ReadyTimeout time.Duration
	// Users are the nkey identities the server accepts, each with its
	// permissions (pkg/busauth). With none, the server accepts only
	// in-process clients: StartEmbedded refuses to open a listener
	// without authentication unless Anonymous is set.
	Users []*server.NkeyUser
	// Anonymous allows a listener without authentication: for tests on
	// loopback only.
	Anonymous bool
	// TLS, when set, is required of every network client (ServerTLS);
	// in-process clients need none.
	TLS *tls.Config
}

// ServerTLS loads the embedded server's certificate and key; with ca, the
// server also requires client certificates signed by it (mutual TLS).
func ServerTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("natsutil: server TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("natsutil: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("natsutil: client CA %s holds no PEM certificate", caFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// StartEmbedded starts a nats-server with JetStream enabled and waits until it
// accepts connections. The caller owns Shutdown.
func StartEmbedded(cfg EmbeddedConfig) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsutil: StoreDir is required")
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "aiforge"
	}
	if !cfg.DontListen && len(cfg.Users) == 0 && !cfg.Anonymous {
		return nil, errors.New("natsutil: refusing to open a NATS listener without authentication: give the server its users")
	}
	opts := &server.Options{
		ServerName:         cfg.ServerName,
		Host:               cfg.Host,
		Port:               cfg.Port,
		DontListen:         cfg.DontListen,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		NoSigs:             true,
		NoLog:              true,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 256 << 20,
		Nkeys:              cfg.Users,
	}
	if cfg.TLS != nil {
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, cfg.TLS, 2
		opts.TLSVerify = cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsutil: new server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(cfg.ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("natsutil: server not ready after %s", cfg.ReadyTimeout)
	}
	return s, nil
}

// ConnectInProcess opens a client connection to an embedded server without a
// socket. name shows up in the server's connection list.
func ConnectInProcess(s *server.Server, name string, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.InProcessServer(s), nats.Name(name), nats.MaxReconnects(-1)}
	nc, err := nats.Connect("", append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("natsutil: connect in-process: %w", err)
	}
	return nc, nil
}

// Connect opens a client connection to an external NATS URL that keeps
// reconnecting forever: services outlive bus restarts. A failure names its
// cause (Explain) without the URL's user information.
func Connect(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("natsutil: connect: %w", Explain(url, err))
	}
	return nc, nil
}

// Dial is Connect with the authentication and TLS of co.
func Dial(url, name string, co ConnectOptions, opts ...nats.Option) (*nats.Conn, error) {
	auth, err := co.Options()
	if err != nil {
		return nil, err
	}
	return Connect(url, name, append(auth, opts...)...)
}

// LogAsyncErrors logs what the server reports asynchronously, permission
// violations above all: a publish or subscribe the identity may not make
// fails on the server, and this is where it shows.
func LogAsyncErrors(log *slog.Logger) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if sub != nil {
			log.Error("nats: asynchronous error", "subject", sub.Subject, "err", err)
			return
		}
		log.Error("nats: asynchronous error", "err", err)
	})
}
