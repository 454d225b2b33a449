package edge

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/contracts"
)

// connMetrics count the edge's client connections.
type connMetrics struct {
	open    prometheus.Gauge
	refused prometheus.Counter
}

func newConnMetrics(reg prometheus.Registerer) (*connMetrics, error) {
	m := &connMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aiforge_edge_connections_open", Help: "Client connections open at the edge.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aiforge_edge_connections_refused_total", Help: "Client connections answered 503 and closed because MaxConnections were open.",
		}),
	}
	for _, c := range []prometheus.Collector{m.open, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// limitListener caps the connections open at once. A connection beyond the
// cap is answered at once with an OpenAI-shaped 503 and closed, rather than
// left waiting in the accept queue, so a client holding many idle
// connections cannot make others hang.
type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	metrics *connMetrics
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.metrics.refused.Inc()
			go refuseConn(c)
			continue
		}
		l.metrics.open.Inc()
		return &edgeConn{Conn: c, release: func() { l.open.Add(-1); l.metrics.open.Dec() }}, nil
	}
}

// refuseConn answers a connection over the cap with a 503 and closes it.
func refuseConn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	e := &contracts.Error{Status: http.StatusServiceUnavailable, Type: contracts.TypeServer, Code: contracts.CodeOverloaded,
		Message: "The server has too many open connections; retry later."}
	_, _ = c.Write(rawResponse(e, "Retry-After: 1\r\n"))
	if tc, ok := c.(*net.TCPConn); ok {
		// Read what the client sent until it closes (or the deadline):
		// closing with unread data would reset the connection and lose
		// the answer.
		_ = tc.CloseWrite()
		_, _ = io.CopyN(io.Discard, c, 1<<20)
	}
	_ = c.Close()
}

// rawResponse is a whole HTTP/1.1 answer carrying e that closes the
// connection.
func rawResponse(e *contracts.Error, extraHeaders string) []byte {
	body := e.Body()
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) + "\r\n")
	b.WriteString("Content-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n")
	b.WriteString(extraHeaders)
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	b.Write(body)
	return b.Bytes()
}

// edgeConn is a client connection: it releases its place under the cap on
// close, and turns the plain-text answers net/http writes to the connection
// itself (a request it could not parse: 400, headers over MaxHeaderBytes:
// 431, an unsupported transfer coding: 501) into OpenAI-shaped ones.
//
// What net/http does not let us shape: a connection it drops without an
// answer (headers not sent within HeaderTimeout, a read error), and
// answers over TLS or HTTP/2, which the edge does not serve itself (TLS
// ends in front of it). A "417 Expectation Failed" to an unknown Expect
// header goes through the normal response path with an empty body.
type edgeConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *edgeConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// plainErrorHeaders are the headers net/http's server puts on the answers it
// writes before a request reaches a handler (net/http/server.go, conn.serve).
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *edgeConn) Write(p []byte) (int, error) {
	if e, ok := parsePlainError(p); ok {
		if _, err := c.Conn.Write(rawResponse(e, "")); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// parsePlainError recognises one of net/http's own plain-text answers: one
// write of "HTTP/1.1 <status line>" + plainErrorHeaders + a one-line text.
// Answers of handlers always carry other headers (Date, Content-Length), so
// they never match.
func parsePlainError(p []byte) (*contracts.Error, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 3 || rest[0] < '4' || rest[0] > '5' {
		return nil, false
	}
	// The status line is followed at once by exactly these headers.
	eol := bytes.IndexByte(rest, '\r')
	if eol < 0 || !bytes.HasPrefix(rest[eol:], []byte(plainErrorHeaders)) {
		return nil, false
	}
	status, text := rest[:eol], rest[eol+len(plainErrorHeaders):]
	if bytes.ContainsAny(text, "\r\n") {
		return nil, false
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	e := &contracts.Error{Status: code, Type: contracts.TypeInvalidRequest, Code: contracts.CodeInvalidRequest}
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		e.Code = contracts.CodeHeadersTooLarge
		e.Message = "The request headers are too large."
	case http.StatusNotImplemented:
		e.Message = "The request's transfer encoding is not supported."
	default:
		// "400 Bad Request" or "400 Bad Request: missing required Host header".
		e.Message = "The HTTP request is malformed"
		if _, why, ok := bytes.Cut(text, []byte(": ")); ok && len(why) > 0 {
			e.Message += ": " + string(why[:min(len(why), 200)])
		}
		e.Message += "."
	}
	return e, true
}

// bodyDeadline bounds how long a request body may take to arrive: grace,
// plus the time its bytes need at minRate. A client that sends its body
// slower (or stops) has its connection's reads time out, so the handler's
// read fails instead of holding the request for ever. Once the body is read
// to its end the deadline is lifted, so a long stream is not cut.
func bodyDeadline(h http.Handler, grace time.Duration, minRate int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		b := &deadlineBody{rc: rc, body: r.Body, start: time.Now(), grace: grace, minRate: minRate}
		if b.extend() != nil {
			// The writer cannot set deadlines (not HTTP/1): serve as is.
			h.ServeHTTP(w, r)
			return
		}
		r.Body = b
		h.ServeHTTP(w, r)
	})
}

type deadlineBody struct {
	rc       *http.ResponseController
	body     io.ReadCloser
	start    time.Time
	grace    time.Duration
	minRate  int64
	read     int64
	deadline time.Time
	done     bool
}

// extend moves the read deadline to what the bytes read so far earn.
func (b *deadlineBody) extend() error {
	d := b.start.Add(b.grace)
	if b.minRate > 0 {
		d = d.Add(time.Duration(float64(b.read) / float64(b.minRate) * float64(time.Second)))
	}
	if d.Sub(b.deadline) < 100*time.Millisecond && !b.deadline.IsZero() {
		return nil
	}
	b.deadline = d
	return b.rc.SetReadDeadline(d)
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.read += int64(n)
	if b.done {
		return n, err
	}
	if err == io.EOF {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
		return n, err
	}
	if n > 0 {
		_ = b.extend()
	}
	return n, err
}

func (b *deadlineBody) Close() error { return b.body.Close() }
