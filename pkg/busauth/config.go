package busauth

import (
	"fmt"
	"strconv"
	"strings"
)

// ServerConfig configures the nats-server configuration ServerConf
// renders.
type ServerConfig struct {
	// Listen is host:port of the client listener ("0.0.0.0:4222").
	Listen string
	// StoreDir is JetStream's store ("/data/jetstream").
	StoreDir string
	// ServerName names the server ("aiforge").
	ServerName string
	// TLSCert, TLSKey and TLSCA, when set, require TLS of every client
	// (with TLSCA, the CA client certificates are verified against).
	TLSCert, TLSKey, TLSCA string
}

// ServerConf renders a nats-server configuration file: JetStream, and one
// nkey user per identity with its permissions. Only public keys appear in
// it; the seeds stay in their files.
func ServerConf(ids map[string]Identity, c ServerConfig) (string, error) {
	if c.Listen == "" {
		c.Listen = "0.0.0.0:4222"
	}
	if c.ServerName == "" {
		c.ServerName = "aiforge"
	}
	var b strings.Builder
	b.WriteString("# nats-server configuration for aiforge, written by `aiforge nats config`.\n")
	b.WriteString("# Every client authenticates with its nkey; each service may publish and\n")
	b.WriteString("# subscribe only what it needs (pkg/busauth). No anonymous access.\n")
	fmt.Fprintf(&b, "server_name: %s\nlisten: %s\nmax_payload: 8MB\n\n", quote(c.ServerName), quote(c.Listen))
	b.WriteString("jetstream {\n")
	if c.StoreDir != "" {
		fmt.Fprintf(&b, "  store_dir: %s\n", quote(c.StoreDir))
	}
	b.WriteString("  max_memory_store: 256MB\n}\n\n")
	if c.TLSCert != "" {
		b.WriteString("tls {\n")
		fmt.Fprintf(&b, "  cert_file: %s\n  key_file: %s\n", quote(c.TLSCert), quote(c.TLSKey))
		if c.TLSCA != "" {
			fmt.Fprintf(&b, "  ca_file: %s\n  verify: true\n", quote(c.TLSCA))
		}
		b.WriteString("}\n\n")
	}
	b.WriteString("authorization {\n  users: [\n")
	for _, name := range Identities() {
		id, ok := ids[name]
		if !ok {
			return "", fmt.Errorf("busauth: no identity %q", name)
		}
		p, _ := For(name)
		fmt.Fprintf(&b, "    # %s\n    {\n      nkey: %s\n      permissions: {\n", name, id.PublicKey)
		fmt.Fprintf(&b, "        publish: { allow: %s }\n", list(p.Publish))
		fmt.Fprintf(&b, "        subscribe: { allow: %s }\n", list(p.Subscribe))
		if r := p.Responses; r != nil {
			fmt.Fprintf(&b, "        allow_responses: { max: %d, expires: %s }\n", r.MaxMsgs, quote(r.Expires.String()))
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func list(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func quote(s string) string { return strconv.Quote(s) }
