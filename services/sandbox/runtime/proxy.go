package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// Egress of an allow-list sandbox. The sandbox still runs with
// --network=none: its only way out is a unix socket of the host, bind-mounted
// read-only at /opt/egress/proxy.sock (runsc --host-uds=open lets the code
// connect to it). The agent listens on 127.0.0.1:3128 inside the sandbox and
// forwards each connection to that socket, and the code gets
// HTTP_PROXY/HTTPS_PROXY (both cases) pointing there.
//
// On the host, egressProxy speaks HTTP CONNECT (https and anything else over
// TCP) and plain-HTTP proxy requests (absolute http:// URLs, one request per
// connection). Each target host must be a name on the sandbox's allow-list
// (sandbox.DomainAllowed; never an IP literal); the name is resolved here
// and every address is checked (loopback, link-local, private, CGNAT,
// multicast, unspecified, reserved, NAT64 are refused, so a name that
// resolves to 127.0.0.1 or 169.254.169.254 is refused); the NATS ports are
// refused; then the checked address is dialed, never the name, so a second
// resolution cannot change the answer.

type egressProxy struct {
	cfg     EgressConfig
	ln      net.Listener
	log     *slog.Logger
	allowed atomic.Pointer[[]string]

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// maxProxyHeader bounds a proxy request's head.
const maxProxyHeader = 64 << 10

// maxProxyConns bounds the connections of one sandbox through the proxy.
const maxProxyConns = 64

func newEgressProxy(cfg EgressConfig, dir string, log *slog.Logger) (*egressProxy, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "proxy.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// uid 1000 inside the sandbox connects to it.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	p := &egressProxy{cfg: cfg, ln: ln, log: log, conns: map[net.Conn]struct{}{}}
	empty := []string{}
	p.allowed.Store(&empty)
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *egressProxy) setAllowed(domains []string) {
	d := make([]string, 0, len(domains))
	for _, x := range domains {
		if n, err := sandbox.NormalizeDomain(x); err == nil {
			d = append(d, n)
		}
	}
	p.allowed.Store(&d)
}

func (p *egressProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *egressProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.conns) >= maxProxyConns {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *egressProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *egressProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			defer c.Close()
			p.handle(c)
		}()
	}
}

// limitedReader reads at most n bytes while n >= 0; n < 0 is unlimited.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(b []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(b)
	}
	if l.n == 0 {
		return 0, errors.New("proxy request head too large")
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.r.Read(b)
	l.n -= int64(n)
	return n, err
}

func refuse(c net.Conn, status int, why string) {
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n",
		status, http.StatusText(status), len(why)+1, why)
}

func (p *egressProxy) handle(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	lr := &limitedReader{r: c, n: maxProxyHeader}
	br := bufio.NewReader(lr)
	req, err := http.ReadRequest(br)
	if err != nil {
		refuse(c, http.StatusBadRequest, "not a proxy request")
		return
	}
	lr.n = -1
	var hostport string
	if req.Method == http.MethodConnect {
		hostport = req.Host
	} else {
		if req.URL.Scheme != "http" || req.URL.Host == "" {
			refuse(c, http.StatusBadRequest, "plain proxy requests need an absolute http:// URL; use CONNECT for https")
			return
		}
		hostport = req.URL.Host
		if req.URL.Port() == "" {
			hostport = net.JoinHostPort(req.URL.Hostname(), "80")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	up, err := p.dial(ctx, hostport)
	cancel()
	if err != nil {
		p.log.Info("sandbox egress refused", "target", hostport, "why", err.Error())
		refuse(c, http.StatusForbidden, err.Error())
		return
	}
	defer up.Close()
	_ = c.SetDeadline(time.Time{})
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
	} else {
		req.Close = true
		req.Header.Del("Proxy-Connection")
		req.Header.Del("Proxy-Authorization")
		if err := req.Write(up); err != nil {
			return
		}
	}
	done := make(chan struct{})
	go func() {
		// what the client already sent beyond the head, then the rest
		_, _ = io.Copy(up, br)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, up)
	c.Close()
	<-done
}

// dial checks a target and connects to one of its checked addresses.
func (p *egressProxy) dial(ctx context.Context, hostport string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, errors.New("the target needs a host and a port")
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return nil, errors.New("not a port")
	}
	for _, d := range p.cfg.DeniedPorts {
		if port == d {
			return nil, fmt.Errorf("port %d is not reachable from a sandbox", port)
		}
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return nil, errors.New("addresses are not allowed, only names on the allow-list")
	}
	if !sandbox.DomainAllowed(*p.allowed.Load(), host) {
		return nil, fmt.Errorf("%s is not on the sandbox's allow-list", host)
	}
	addrs, err := p.cfg.Resolve(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("%s does not resolve", host)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s has no address", host)
	}
	for _, a := range addrs {
		if why := forbiddenAddr(a); why != "" {
			return nil, fmt.Errorf("%s resolves to a %s address", host, why)
		}
	}
	var last error
	for _, a := range addrs {
		c, err := p.cfg.Dial(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, fmt.Errorf("%s: cannot connect: %v", host, last)
}

var forbiddenPrefixes = []struct {
	p   netip.Prefix
	why string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "reserved"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

// forbiddenAddr says why a sandbox may not reach an address, or "".
func forbiddenAddr(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case a.IsPrivate():
		return "private"
	case a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	}
	for _, f := range forbiddenPrefixes {
		if f.p.Contains(a) {
			return f.why
		}
	}
	return ""
}
