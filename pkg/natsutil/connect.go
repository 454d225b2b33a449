package natsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// ConnectOptions are how a process authenticates to NATS and secures the
// connection, with the mechanisms NATS operators use. At most one of
// CredsFile, NKeyFile, User and Token is set; TLS combines with any of them.
// Password and Token are secrets: they come from the environment only (see
// the cmd package) and never appear in an error.
type ConnectOptions struct {
	// CredsFile is a decorated JWT + nkey seed file (nsc, operator mode).
	CredsFile string
	// NKeyFile holds a user nkey seed ("SU..."); aiforge nats config
	// writes one per service.
	NKeyFile string
	// User and Password authenticate with a user name and password.
	User, Password string
	// Token authenticates with a bearer token.
	Token string
	// TLSCA verifies the server's certificate (a private CA); TLSCert and
	// TLSKey present a client certificate (mutual TLS).
	TLSCA, TLSCert, TLSKey string
	// TLSFirst starts the TLS handshake before the NATS INFO (servers
	// configured with handshake_first).
	TLSFirst bool
}

// Set reports whether any authentication or TLS option is given.
func (o ConnectOptions) Set() bool { return o != ConnectOptions{} }

// Method names the authentication method in use, for logs ("nkey",
// "creds", "user", "token" or "none"); it never includes a secret.
func (o ConnectOptions) Method() string {
	switch {
	case o.CredsFile != "":
		return "creds"
	case o.NKeyFile != "":
		return "nkey"
	case o.User != "":
		return "user"
	case o.Token != "":
		return "token"
	}
	return "none"
}

// Options turns the configuration into nats.Options. Files are checked
// here, so a typo fails before the first dial with the flag's file named.
func (o ConnectOptions) Options() ([]nats.Option, error) {
	n := 0
	for _, s := range []string{o.CredsFile, o.NKeyFile, o.User, o.Token} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("natsutil: give one of a creds file, an nkey seed file, a user or a token")
	}
	if o.Password != "" && o.User == "" {
		return nil, errors.New("natsutil: a NATS password needs a user")
	}
	var opts []nats.Option
	switch {
	case o.CredsFile != "":
		if err := readable(o.CredsFile, "creds file"); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.NKeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("natsutil: nkey seed file %s: %w", o.NKeyFile, redactSeedErr(err))
		}
		opts = append(opts, opt)
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("natsutil: a TLS client certificate needs both the certificate and its key")
	}
	if o.TLSCA != "" || o.TLSCert != "" || o.TLSFirst {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.TLSCA != "" {
			pem, err := os.ReadFile(o.TLSCA)
			if err != nil {
				return nil, fmt.Errorf("natsutil: TLS CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("natsutil: TLS CA %s holds no PEM certificate", o.TLSCA)
			}
			cfg.RootCAs = pool
		}
		if o.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
			if err != nil {
				return nil, fmt.Errorf("natsutil: TLS client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(cfg))
		if o.TLSFirst {
			opts = append(opts, nats.TLSHandshakeFirst())
		}
	}
	return opts, nil
}

func readable(path, what string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("natsutil: %s: %w", what, err)
	}
	return f.Close()
}

// redactSeedErr keeps a parse error of a seed file from quoting the file.
func redactSeedErr(err error) error {
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
		return err
	}
	return errors.New("not a valid nkey seed")
}

// Explain turns a connection error into one that names its cause, for an
// operator: refused credentials, a TLS problem, or no server. It never
// includes a secret: the URL's user information is dropped.
func Explain(rawURL string, err error) error {
	if err == nil {
		return nil
	}
	where := RedactURL(rawURL)
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	msg := strings.ToLower(err.Error())
	switch {
	case errors.Is(err, nats.ErrAuthorization) || strings.Contains(msg, "authorization violation"):
		return fmt.Errorf("NATS at %s refused the credentials (authorization violation): check --nats-creds, --nats-nkey, --nats-user/AIFORGE_NATS_PASSWORD or AIFORGE_NATS_TOKEN: %w", where, nats.ErrAuthorization)
	case errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked):
		return fmt.Errorf("NATS at %s refused the credentials (expired or revoked): %w", where, err)
	case errors.As(err, &unknown) || strings.Contains(msg, "unknown authority"):
		return fmt.Errorf("NATS at %s: TLS: the server's certificate is signed by an unknown authority: give its CA with --nats-tls-ca: %w", where, err)
	case errors.As(err, &hostErr):
		return fmt.Errorf("NATS at %s: TLS: the server's certificate is not valid for this host name: %w", where, err)
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted),
		strings.Contains(msg, "tls"), strings.Contains(msg, "certificate"), strings.Contains(msg, "handshake"):
		return fmt.Errorf("NATS at %s: TLS handshake failed: %w", where, err)
	case errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("no NATS server reachable at %s: %w", where, err)
	}
	return fmt.Errorf("NATS at %s: %w", where, err)
}

// RedactURL drops user information from a (comma-separated list of) NATS
// URL(s), so a password or token in the URL never reaches a log.
func RedactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			if strings.Contains(p, "@") {
				parts[i] = "[redacted]@" + p[strings.LastIndex(p, "@")+1:]
			}
			continue
		}
		u.User = nil
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
