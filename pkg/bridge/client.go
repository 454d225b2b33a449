package bridge

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/telemetry"
)

// ClientConfig configures the edge side of the bridge.
type ClientConfig struct {
	// NoWorkerWait is how long to wait for a worker to acknowledge a request
	// before answering 503. Default 2s.
	NoWorkerWait time.Duration
	// HeartbeatTimeout declares a worker lost when no frame arrived for this
	// long. Default 5s (workers send heartbeats every second).
	HeartbeatTimeout time.Duration
	// FailoverWait bounds the search for another replica. Default 250ms.
	FailoverWait time.Duration
	// Window is the number of data frames a worker may send ahead.
	Window int
	// Family picks the subjects requests go out on. The default,
	// FamilyInfer, is the edge's; the embedder and the retriever use
	// FamilyEmbed, the only one their bus credentials may publish on.
	Family Family
	Logger *slog.Logger
}

// Client is the edge side of the bridge. One Client multiplexes every
// request of a connection over a single inbox subscription.
type Client struct {
	nc     *nats.Conn
	cfg    ClientConfig
	log    *slog.Logger
	prefix string
	// replies is the client's events.BridgeReplies namespace.
	replies string
	sub     *nats.Subscription

	mu    sync.Mutex
	calls map[string]*pending
}

type pending struct {
	ch chan *nats.Msg
	// seen is when a heartbeat last arrived (unix nanos); heartbeats are
	// not queued, so a client that stops reading cannot fill the buffer
	// with them.
	seen     atomic.Int64
	overflow atomic.Bool
	canceled atomic.Bool
	id       string
}

// NewClient subscribes to a fresh inbox prefix on nc.
func NewClient(nc *nats.Conn, cfg ClientConfig) (*Client, error) {
	if nc == nil {
		return nil, errors.New("bridge: client needs a connection")
	}
	if cfg.NoWorkerWait == 0 {
		cfg.NoWorkerWait = 2 * time.Second
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = 5 * time.Second
	}
	if cfg.FailoverWait == 0 {
		cfg.FailoverWait = 250 * time.Millisecond
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if !cfg.Family.valid() {
		return nil, fmt.Errorf("bridge: unknown subject family %v", cfg.Family)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{nc: nc, cfg: cfg, log: cfg.Logger, calls: make(map[string]*pending)}
	c.replies = PingReplies(nc)
	c.prefix = c.replies + "." + replyToken() + "."
	sub, err := nc.Subscribe(c.prefix+"*", c.dispatch)
	if err != nil {
		return nil, fmt.Errorf("bridge: subscribe inbox: %w", err)
	}
	// Frames of thousands of streams share this subscription: never let the
	// client library drop them for a slow consumer; flow control bounds them.
	_ = sub.SetPendingLimits(-1, -1)
	c.sub = sub
	return c, nil
}

// Close unsubscribes the inbox.
func (c *Client) Close() error { return c.sub.Unsubscribe() }

func (c *Client) dispatch(m *nats.Msg) {
	tok := m.Subject[len(c.prefix):]
	c.mu.Lock()
	p := c.calls[tok]
	c.mu.Unlock()
	if p == nil {
		return
	}
	if p.canceled.Load() {
		if m.Header.Get(HdrFrame) == FrameAck {
			c.sendControl(m.Header.Get(HdrWorker), p.id, ControlCancel, 0)
		}
		return
	}
	if len(m.Header) > 0 && m.Header.Get(HdrFrame) == FrameHB {
		p.seen.Store(time.Now().UnixNano())
		return
	}
	select {
	case p.ch <- m:
	default:
		// A worker that ignores the window: refuse to buffer without bound.
		p.overflow.Store(true)
	}
}

func (c *Client) sendControl(worker, id, kind string, n int) {
	if worker == "" {
		return
	}
	m := nats.NewMsg(events.InferControl(worker))
	m.Header.Set(HdrRequestID, id)
	m.Header.Set(HdrControl, kind)
	if n > 0 {
		m.Header.Set(HdrCredit, strconv.Itoa(n))
	}
	_ = c.nc.PublishMsg(m)
}

// OutRequest is a request as the edge sends it.
type OutRequest struct {
	Model        string
	ID           string
	Tenant       string
	KeyID        string
	Endpoint     string
	Stream       bool
	IncludeUsage bool
	Body         []byte
	// Header carries extra headers, such as trace context.
	Header nats.Header
	// Reservations travel to the worker and back in the usage event.
	Reservations []events.Reservation
	// Worker, when set, names the worker replica the request goes to, on
	// its direct subject (Family.Direct) instead of the model's queue
	// group: the edge's choice among the model's replicas.
	Worker string
	// Flush, when set, is called whenever the data passed to the sink so far
	// should reach the client: before Do waits for the next frame. Frames
	// that arrived together are written with one flush; none is held back.
	Flush func() error
}

// Result describes a finished request.
type Result struct {
	WorkerID    string
	Status      int
	ContentType string
	DataFrames  int
	Retried     bool
}

// Do sends req, on the subjects of the client's Family, and passes every data frame to sink, in order, as it arrives.
// A sink error (the client went away) cancels the request at the worker. An
// error before any data frame that the worker marks retryable is retried
// once on another replica. Errors are *Error (wrapping ErrNoWorker where no
// worker took the request) or the context's cause.
func (c *Client) Do(ctx context.Context, req *OutRequest, sink func([]byte) error) (Result, error) {
	subject := c.subject(req)
	res, err := c.attempt(ctx, subject, req, 1, sink)
	var be *Error
	if err != nil && errors.As(err, &be) && be.Retryable && !be.AfterData && res.DataFrames == 0 {
		failed := res.WorkerID
		if other := c.findOther(ctx, req.Model, failed); other != "" {
			subject = c.cfg.Family.Direct(req.Model, other)
		}
		res, err = c.attempt(ctx, subject, req, MaxAttempts, sink)
		res.Retried = true
	}
	return res, err
}

// Once sends req once, to req.Worker or else the model's queue group,
// without retrying it: the caller picks where a retry goes. final marks
// the last attempt of the request id (bridge.Request.FinalAttempt): a
// worker records the usage of a failure only then, so an attempt after
// which the caller may retry under the same id must not be final.
func (c *Client) Once(ctx context.Context, req *OutRequest, final bool, sink func([]byte) error) (Result, error) {
	attempt := 1
	if final {
		attempt = MaxAttempts
	}
	return c.attempt(ctx, c.subject(req), req, attempt, sink)
}

func (c *Client) subject(req *OutRequest) string {
	if req.Worker != "" {
		return c.cfg.Family.Direct(req.Model, req.Worker)
	}
	return c.cfg.Family.Subject(req.Model)
}

// PingReplies is the events.BridgeReplies namespace of nc's inbox prefix:
// where workers may answer (a ping's replies too; a worker's bus
// credentials may publish nowhere else).
func PingReplies(nc *nats.Conn) string {
	inbox := nc.Opts.InboxPrefix
	if inbox == "" {
		inbox = strings.TrimSuffix(nats.InboxPrefix, ".")
	}
	return events.BridgeReplies(inbox)
}

func (c *Client) findOther(ctx context.Context, model, exclude string) string {
	// Under the replies namespace, where workers may publish, and outside
	// the prefix of the calls' frames.
	inbox := c.replies + "." + replyToken()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return ""
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.PublishRequest(c.cfg.Family.Ping(model), inbox, nil); err != nil {
		return ""
	}
	deadline := time.Now().Add(c.cfg.FailoverWait)
	for {
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return ""
		}
		m, err := sub.NextMsg(left)
		if err != nil {
			return ""
		}
		if id := m.Header.Get(HdrWorker); id != "" && id != exclude {
			return id
		}
	}
}

func (c *Client) attempt(ctx context.Context, subject string, req *OutRequest, attempt int, sink func([]byte) error) (Result, error) {
	var res Result
	tok := replyToken()
	p := &pending{ch: make(chan *nats.Msg, c.cfg.Window+32), id: req.ID}
	c.mu.Lock()
	c.calls[tok] = p
	c.mu.Unlock()
	release := func() {
		c.mu.Lock()
		delete(c.calls, tok)
		c.mu.Unlock()
	}

	m := &nats.Msg{Subject: subject, Reply: c.prefix + tok, Data: req.Body, Header: nats.Header{}}
	for k, v := range req.Header {
		m.Header[k] = v
	}
	if _, ok := m.Header[events.HeaderTraceParent]; !ok {
		// The caller's span, if any: the worker's span is its child.
		telemetry.Propagator.Inject(ctx, telemetry.NATSCarrier(m.Header))
	}
	m.Header.Set(HdrRequestID, req.ID)
	m.Header.Set(HdrTenant, req.Tenant)
	m.Header.Set(HdrKeyID, req.KeyID)
	m.Header.Set(HdrEndpoint, req.Endpoint)
	m.Header.Set(HdrStream, boolHdr(req.Stream))
	m.Header.Set(HdrIncludeUsage, boolHdr(req.IncludeUsage))
	m.Header.Set(HdrWindow, strconv.Itoa(c.cfg.Window))
	m.Header.Set(HdrAttempt, strconv.Itoa(attempt))
	if len(req.Reservations) > 0 {
		b, _ := json.Marshal(req.Reservations)
		m.Header.Set(HdrReservations, string(b))
	}
	if err := c.nc.PublishMsg(m); err != nil {
		release()
		return res, &Error{Status: http.StatusServiceUnavailable, Code: "model_unavailable", Message: "bus unavailable: " + err.Error()}
	}

	timer := time.NewTimer(c.cfg.NoWorkerWait)
	defer timer.Stop()
	acked := false
	consumed := 0
	half := max(c.cfg.Window/2, 1)
	lost := func() error {
		if !acked {
			return fmt.Errorf("%w: %w", ErrNoWorker, &Error{Status: http.StatusServiceUnavailable, Code: "model_unavailable",
				Message: "no worker acknowledged the request in time"})
		}
		return &Error{Status: http.StatusBadGateway, Code: "worker_lost", AfterData: res.DataFrames > 0,
			Message: "the worker stopped answering"}
	}
	dirty := false
	for {
		if dirty && len(p.ch) == 0 {
			dirty = false
			if err := req.Flush(); err != nil {
				p.canceled.Store(true)
				c.sendControl(res.WorkerID, req.ID, ControlCancel, 0)
				releaseLater(c, tok)
				return res, err
			}
		}
		select {
		case f := <-p.ch:
			if p.overflow.Load() {
				release()
				c.sendControl(res.WorkerID, req.ID, ControlCancel, 0)
				return res, &Error{Status: http.StatusBadGateway, Code: "engine_error", AfterData: res.DataFrames > 0,
					Message: "worker exceeded its flow-control window"}
			}
			if len(f.Header) == 0 {
				acked = true
				res.DataFrames++
				if err := sink(f.Data); err != nil {
					p.canceled.Store(true)
					c.sendControl(res.WorkerID, req.ID, ControlCancel, 0)
					releaseLater(c, tok)
					return res, err
				}
				dirty = req.Flush != nil
				consumed++
				if consumed >= half {
					c.sendControl(res.WorkerID, req.ID, ControlCredit, consumed)
					consumed = 0
				}
				timer.Reset(c.cfg.HeartbeatTimeout)
				continue
			}
			switch f.Header.Get(HdrFrame) {
			case "":
				if !acked && f.Header.Get("Status") == "503" { // no responders
					release()
					return res, fmt.Errorf("%w: %w", ErrNoWorker, &Error{Status: http.StatusServiceUnavailable,
						Code: "model_unavailable", Message: "no worker serves this model"})
				}
			case FrameAck:
				acked = true
				res.WorkerID = f.Header.Get(HdrWorker)
			case FrameHB:
			case FrameEnd:
				release()
				res.Status, _ = strconv.Atoi(f.Header.Get(HdrStatus))
				res.ContentType = f.Header.Get(HdrContentType)
				return res, nil
			case FrameError:
				release()
				e := errorFromFrame(f)
				e.AfterData = res.DataFrames > 0
				if e.AfterData {
					e.Retryable = false
				}
				return res, e
			}
			timer.Reset(c.cfg.HeartbeatTimeout)
		case <-timer.C:
			if idle := time.Since(time.Unix(0, p.seen.Load())); acked && idle < c.cfg.HeartbeatTimeout {
				timer.Reset(c.cfg.HeartbeatTimeout - idle)
				continue
			}
			release()
			return res, lost()
		case <-ctx.Done():
			p.canceled.Store(true)
			c.sendControl(res.WorkerID, req.ID, ControlCancel, 0)
			releaseLater(c, tok)
			return res, context.Cause(ctx)
		}
	}
}

// replyToken names one request under the client's prefix. Workers may
// publish anywhere under events.BridgeReplies, so the token is what keeps
// one worker from writing into a stream it was not given: 128 random bits.
func replyToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// releaseLater keeps a canceled call registered for a while so that a late
// ack can still be answered with a cancel.
func releaseLater(c *Client, tok string) {
	time.AfterFunc(c.cfg.NoWorkerWait, func() {
		c.mu.Lock()
		delete(c.calls, tok)
		c.mu.Unlock()
	})
}
