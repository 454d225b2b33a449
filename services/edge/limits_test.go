package edge_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/services/edge"
)

// rawConn dials the edge without an HTTP client: the tests write exactly
// what a hostile or careless client would. The deadline only keeps a broken
// test from hanging; no assertion depends on it.
func (h *harness) rawConn() (net.Conn, *bufio.Reader) {
	h.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		h.t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	h.t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// readAPIError reads one HTTP response and checks it is an OpenAI-shaped
// error with status and code.
func readAPIError(t *testing.T, br *bufio.Reader, status int, code string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	apiError(t, response{status: resp.StatusCode, header: resp.Header, body: b}, status, code)
}

func TestModelNameBoundAndUnknownLabel(t *testing.T) {
	h := startEdge(t, nil)
	h.registerModel("chat")
	secret, _ := h.tenantKey("acme")

	long := strings.Repeat("m", 257)
	e := apiError(t, h.do("POST", "/v1/chat/completions", secret, chatBody(long, false), nil), http.StatusBadRequest, "invalid_request")
	if e["param"] != "model" || strings.Contains(e["message"].(string), long) {
		t.Fatalf("long model name: %v", e)
	}
	var names []string
	for i := range 20 {
		name := fmt.Sprintf("no-such-model-%02d-%s", i, strings.Repeat("x", 200))
		names = append(names, name)
		apiError(t, h.do("POST", "/v1/chat/completions", secret, chatBody(name, false), nil), http.StatusNotFound, "model_not_found")
	}
	m := string(h.do("GET", "/metrics", "", nil, nil).body)
	for _, name := range append(names, long) {
		if strings.Contains(m, name) {
			t.Fatalf("/metrics has a series for the unserved model %q", name[:20])
		}
	}
	if !strings.Contains(m, `aiforge_edge_requests_total{endpoint="chat.completions",model="unknown",status="404"} 20`) {
		t.Fatalf("unknown models are not counted under one label:\n%s", grepLines(m, "aiforge_edge_requests_total"))
	}
}

// A keep-alive connection that sends nothing more is closed after
// IdleTimeout.
func TestIdleConnectionClosed(t *testing.T) {
	h := startEdge(t, func(c *edge.Config) { c.IdleTimeout = 100 * time.Millisecond })
	c, br := h.rawConn()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	// The next read ends when the edge closes the idle connection.
	if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: read %d, %v; want EOF from the edge closing it", n, err)
	}
}

// A request body that stops arriving is answered 408, not held for ever.
func TestSlowBodyTimesOut(t *testing.T) {
	h := startEdge(t, func(c *edge.Config) { c.BodyGrace = 100 * time.Millisecond; c.MinBodyRate = 1 << 20 })
	h.registerModel("chat")
	secret, _ := h.tenantKey("acme")
	c, br := h.rawConn()
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer " + secret +
		"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
	if _, err := io.WriteString(c, head+`{"model":"chat","messages":[`); err != nil {
		t.Fatal(err)
	}
	readAPIError(t, br, http.StatusRequestTimeout, "request_timeout")
}

// Beyond MaxConnections a connection gets an OpenAI-shaped 503 at once.
func TestConnectionCap(t *testing.T) {
	h := startEdge(t, func(c *edge.Config) { c.MaxConnections = 3 })
	http.DefaultClient.CloseIdleConnections()
	served := 0
	for i := range 10 {
		c, br := h.rawConn()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			served++ // stays open (keep-alive)
			continue
		}
		apiError(t, response{status: resp.StatusCode, header: resp.Header, body: b}, http.StatusServiceUnavailable, "overloaded")
		if served > 3 {
			t.Fatalf("%d connections served with MaxConnections 3", served)
		}
		return
	}
	t.Fatalf("10 connections open with MaxConnections 3, none refused")
}

// net/http's own answers to requests it cannot parse are OpenAI-shaped.
func TestMalformedRequestsAnsweredOpenAIShaped(t *testing.T) {
	h := startEdge(t, nil)
	c, br := h.rawConn()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\n\r\n"); err != nil { // no Host
		t.Fatal(err)
	}
	readAPIError(t, br, http.StatusBadRequest, "invalid_request")

	c, br = h.rawConn()
	go func() {
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: edge\r\nX-Big: "+strings.Repeat("a", 70<<10)+"\r\n\r\n")
	}()
	readAPIError(t, br, http.StatusRequestHeaderFieldsTooLarge, "request_headers_too_large")
}

// A client that writes a whole body over the limit before it reads (as
// SDKs do) gets the 413, not a reset connection.
func TestBodyOverLimitGets413(t *testing.T) {
	h := startEdge(t, func(c *edge.Config) { c.MaxBodyBytes = 1 << 20 })
	h.registerModel("chat")
	secret, _ := h.tenantKey("acme")
	body := `{"model":"chat","messages":[{"role":"user","content":"` + strings.Repeat("x", 40<<20) + `"}]}`
	for _, path := range []string{"/v1/chat/completions", "/v1/responses"} {
		c, br := h.rawConn()
		head := "POST " + path + " HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer " + secret +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		if _, err := io.WriteString(c, head+body); err != nil {
			t.Fatalf("%s: writing the body: %v (the edge closed before reading it)", path, err)
		}
		readAPIError(t, br, http.StatusRequestEntityTooLarge, "request_too_large")
	}
	// The Go client, which reads while it writes, sees it too.
	r := h.do("POST", "/v1/chat/completions", secret, body, nil)
	e := apiError(t, r, http.StatusRequestEntityTooLarge, "request_too_large")
	if _, err := json.Marshal(e); err != nil {
		t.Fatal(err)
	}
}
