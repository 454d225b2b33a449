package runtime

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

func TestForbiddenAddr(t *testing.T) {
	for a, bad := range map[string]bool{
		"127.0.0.1": true, "169.254.169.254": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true,
		"100.64.0.1": true, "0.0.0.0": true, "::1": true, "fe80::1": true, "fc00::1": true, "224.0.0.1": true,
		"::ffff:127.0.0.1": true, "::ffff:169.254.169.254": true, "64:ff9b::a9fe:a9fe": true, "255.255.255.255": true,
		"203.0.113.10": false, "8.8.8.8": false, "2606:4700::1111": false,
	} {
		if got := forbiddenAddr(netip.MustParseAddr(a)) != ""; got != bad {
			t.Errorf("%s: forbidden %v, want %v", a, got, bad)
		}
	}
}

// TestEgressAllowlist: the code reaches an allowed name through the host
// proxy (the injected resolver and dialer stand for DNS and the internet);
// a name resolving to loopback or the metadata address, an unlisted name,
// an IP literal and a NATS port are refused, and the network stays closed
// to direct connections.
func TestEgressAllowlist(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	defer srv.Close()
	public := netip.MustParseAddr("203.0.113.10")
	names := map[string][]netip.Addr{
		"allowed.example.com":  {public},
		"api.allowed.org":      {public},
		"loopback.example.com": {netip.MustParseAddr("127.0.0.1")},
		"metadata.example.com": {netip.MustParseAddr("169.254.169.254")},
		"other.example.net":    {public},
	}
	rt := newTestRuntime(t, func(c *Config) {
		c.Egress.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			if a, ok := names[host]; ok {
				return a, nil
			}
			return nil, fmt.Errorf("no such host")
		}
		c.Egress.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if strings.HasPrefix(addr, public.String()+":") {
				var d net.Dialer
				return d.DialContext(ctx, network, srv.Listener.Addr().String())
			}
			return nil, fmt.Errorf("test dialer: %s is not the test server", addr)
		}
	})
	sb := startSandbox(t, rt, Spec{MemoryBytes: 256 << 20, Network: sandbox.NetworkPolicy{Type: sandbox.NetworkAllowlist}})
	sb.SetAllowedDomains([]string{"allowed.example.com", "*.allowed.org", "loopback.example.com", "metadata.example.com"})
	code := `
import urllib.request, socket
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except Exception as e:
        return "REFUSED " + str(e)
for url in ["http://allowed.example.com/x", "http://api.allowed.org/", "http://loopback.example.com/",
            "http://metadata.example.com/latest/meta-data/", "http://other.example.net/", "http://203.0.113.10/",
            "http://allowed.example.com:4222/"]:
    print(url, "=>", get(url))
s = socket.socket(); s.settimeout(3)
try:
    s.connect(("203.0.113.10", 80)); print("DIRECT CONNECTED")
except OSError as e:
    print("direct refused", e)
`
	res := run(t, sb, "python", code)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 8 {
		t.Fatalf("result %+v", res)
	}
	want := []string{"hello from allowed.example.com", "hello from api.allowed.org", "REFUSED", "REFUSED", "REFUSED", "REFUSED", "REFUSED", "direct refused"}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %q, want %q", i, lines[i], w)
		}
	}
	// https goes through CONNECT: the tunnel opens to the allowed name
	res = run(t, sb, "bash", `exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT allowed.example.com:443 HTTP/1.1\r\nHost: allowed.example.com:443\r\n\r\n' >&3; head -1 <&3`)
	if !strings.Contains(res.Stdout, "200") {
		t.Errorf("CONNECT: %+v", res)
	}
	sb.SetAllowedDomains(nil)
	res = run(t, sb, "python", `print(get("http://allowed.example.com/x"))`)
	if !strings.Contains(res.Stdout, "REFUSED") {
		t.Errorf("after the allow-list was emptied: %+v", res)
	}
}
