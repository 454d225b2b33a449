package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
)

// ServerConfig configures the worker side of the bridge.
type ServerConfig struct {
	// Model is the model name served; it picks the subjects.
	Model string
	// WorkerID identifies this replica; unique per process.
	WorkerID string
	// MaxConcurrency bounds requests handled at once; further requests wait
	// for a slot (the queue depth). Default 64. A freed slot goes to the
	// waiting tenant (Request.Tenant) that holds the fewest slots, so one
	// tenant's many slow requests do not starve another's; and to a
	// waiting real-time request before any batch line (PriorityOf).
	MaxConcurrency int
	// MaxQueue bounds requests waiting for a slot, per priority class;
	// beyond it a request is refused as overloaded so the edge can try
	// another replica. Default 1024.
	MaxQueue int
	// HeartbeatInterval is how often an idle request gets a heartbeat frame.
	// Default 1s; the edge's HeartbeatTimeout must be a few times larger.
	HeartbeatInterval time.Duration
	// CreditTimeout ends a request whose edge stopped granting credit (the
	// edge died, or the client stopped reading for this long). Default 2m.
	CreditTimeout time.Duration
	Logger        *slog.Logger
}

func (c ServerConfig) validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("model is required"))
	}
	if c.WorkerID == "" {
		errs = append(errs, errors.New("WorkerID is required"))
	}
	if c.MaxConcurrency < 0 || c.MaxQueue < 0 || c.HeartbeatInterval < 0 || c.CreditTimeout < 0 {
		errs = append(errs, errors.New("limits must not be negative"))
	}
	return errors.Join(errs...)
}

// Request is an inference request as a worker receives it.
type Request struct {
	ID           string
	Tenant       string
	KeyID        string
	Endpoint     string
	Stream       bool
	IncludeUsage bool
	Body         []byte
	Header       nats.Header
	ReceivedAt   time.Time
	// Reservations are the budget reservations the edge made for it.
	Reservations []events.Reservation
	// Attempt counts from 1; a failure on the last attempt (MaxAttempts) is
	// final, so a worker records its usage even when nothing was spent.
	Attempt int
	// Family is the subject family the request came on: FamilyBatch for a
	// batch line (events.UsageRecordedV3, lower slot priority).
	Family Family
}

// FinalAttempt reports whether no retry will follow a failure.
func (r *Request) FinalAttempt() bool { return r.Attempt >= MaxAttempts }

// Handler serves one request, writing frames through w. Its ctx ends when
// the edge cancels, the credit timeout passes, or the server shuts down.
type Handler func(ctx context.Context, req *Request, w *ResponseWriter)

// Server is the worker side: it takes requests for one model from the queue
// group and hands them to a Handler with bounded concurrency.
type Server struct {
	nc      *nats.Conn
	cfg     ServerConfig
	handler Handler
	log     *slog.Logger

	control string
	ctlSub  *nats.Subscription

	subMu  sync.Mutex
	subs   []*nats.Subscription
	paused bool

	mu       sync.Mutex
	active   map[string]*ResponseWriter
	stopping bool

	slots   *fairSlots
	running atomic.Int64
	wg      sync.WaitGroup

	baseCtx   context.Context
	cancelAll context.CancelFunc
	stopHB    chan struct{}
	closeOnce sync.Once
}

// NewServer validates cfg and returns a stopped server.
func NewServer(nc *nats.Conn, cfg ServerConfig, h Handler) (*Server, error) {
	if nc == nil || h == nil {
		return nil, errors.New("bridge: server needs a connection and a handler")
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bridge: server config: %w", err)
	}
	if cfg.MaxConcurrency == 0 {
		cfg.MaxConcurrency = 64
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 1024
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.CreditTimeout == 0 {
		cfg.CreditTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		nc: nc, cfg: cfg, handler: h, log: cfg.Logger,
		control: events.InferControl(cfg.WorkerID),
		active:  make(map[string]*ResponseWriter),
		slots:   newFairSlots(cfg.MaxConcurrency),
		baseCtx: ctx, cancelAll: cancel,
		stopHB: make(chan struct{}),
	}, nil
}

// Waiting is the number of requests waiting for a slot (the queue depth).
func (s *Server) Waiting() int64 { return int64(s.slots.waiting()) }

// Running is the number of requests being handled.
func (s *Server) Running() int64 { return s.running.Load() }

// Slots returns the slots held by requests of priority p (PriorityBatch:
// batch lines; PriorityRealtime: everything else) and the number of them
// waiting for a slot.
func (s *Server) Slots(p Priority) (running, waiting int64) {
	if p < 0 || p >= numPriorities {
		return 0, 0
	}
	r, q := s.slots.counts(p)
	return int64(r), int64(q)
}

// Start subscribes and begins taking requests.
func (s *Server) Start() error {
	sub, err := s.nc.Subscribe(s.control, s.onControl)
	if err != nil {
		return fmt.Errorf("bridge: subscribe control: %w", err)
	}
	s.ctlSub = sub
	if err := s.Resume(); err != nil {
		return err
	}
	go s.heartbeats()
	return s.nc.Flush()
}

// Resume (re)subscribes to the model's subjects; Pause unsubscribes, so a
// replica whose engine is unhealthy stops receiving work while its requests
// in flight finish.
func (s *Server) Resume() error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if len(s.subs) > 0 {
		return nil
	}
	var subs []*nats.Subscription
	fail := func(what string, f Family, err error) error {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		return fmt.Errorf("bridge: subscribe %s (%v): %w", what, f, err)
	}
	// Every family's requests share the model's queue group: one replica
	// takes each, whichever family it came on.
	for _, f := range Families {
		on := s.requestHandler(f)
		q, err := s.nc.QueueSubscribe(f.Subject(s.cfg.Model), events.InferQueue(s.cfg.Model), on)
		if err != nil {
			return fail("requests", f, err)
		}
		subs = append(subs, q)
		d, err := s.nc.Subscribe(f.Direct(s.cfg.Model, s.cfg.WorkerID), on)
		if err != nil {
			return fail("direct", f, err)
		}
		subs = append(subs, d)
		p, err := s.nc.Subscribe(f.Ping(s.cfg.Model), s.onPing)
		if err != nil {
			return fail("ping", f, err)
		}
		subs = append(subs, p)
	}
	s.subs = subs
	s.paused = false
	return nil
}

// Pause stops taking new requests. Requests already delivered to this
// connection are still served (the subscriptions drain), so none is
// dropped between the server and the handler.
func (s *Server) Pause() {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for _, sub := range s.subs {
		_ = sub.Drain()
	}
	s.subs = nil
	s.paused = true
}

// Shutdown stops taking requests, waits for those in flight until ctx ends,
// then cancels the rest (their edges get an error frame) and returns.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.Pause()
	_ = s.nc.Flush()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.cancelAll()
		<-done
	}
	s.closeOnce.Do(func() {
		close(s.stopHB)
		s.cancelAll()
		if s.ctlSub != nil {
			_ = s.ctlSub.Unsubscribe()
		}
	})
	_ = s.nc.Flush()
	return err
}

func (s *Server) onPing(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	r := nats.NewMsg(m.Reply)
	r.Header.Set(HdrWorker, s.cfg.WorkerID)
	_ = s.nc.PublishMsg(r)
}

// requestHandler handles the requests of one family.
func (s *Server) requestHandler(f Family) nats.MsgHandler {
	return func(m *nats.Msg) { s.onRequest(f, m) }
}

func (s *Server) onRequest(f Family, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	h := m.Header
	req := &Request{
		ID:           h.Get(HdrRequestID),
		Tenant:       h.Get(HdrTenant),
		KeyID:        h.Get(HdrKeyID),
		Endpoint:     h.Get(HdrEndpoint),
		Stream:       h.Get(HdrStream) == "1",
		IncludeUsage: h.Get(HdrIncludeUsage) == "1",
		Body:         m.Data,
		Header:       h,
		ReceivedAt:   time.Now(),
		Attempt:      1,
		Family:       f,
	}
	if a, err := strconv.Atoi(h.Get(HdrAttempt)); err == nil && a > 0 {
		req.Attempt = a
	}
	if v := h.Get(HdrReservations); v != "" {
		_ = json.Unmarshal([]byte(v), &req.Reservations)
	}
	window := DefaultWindow
	if v, err := strconv.Atoi(h.Get(HdrWindow)); err == nil && v > 0 {
		window = v
	}
	ctx, cancel := context.WithCancel(s.baseCtx)
	w := &ResponseWriter{s: s, reply: m.Reply, id: req.ID, cancel: cancel, notify: make(chan struct{}, 1)}
	w.credits.Store(int64(window))
	w.touch()
	if req.ID == "" {
		_ = w.Fail(&Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "request without id"})
		cancel()
		return
	}
	if !f.allows(req.Endpoint) {
		// Whoever may publish on this family may not generate anything
		// else: refused before the handler runs, so nothing is billed.
		s.log.Warn("bridge: endpoint refused on this subject family", "request_id", req.ID,
			"family", f.String(), "endpoint", req.Endpoint)
		_ = w.Fail(&Error{Status: http.StatusForbidden, Code: contracts.CodeEndpointNotAllowed,
			Message: fmt.Sprintf("the %s subjects serve the %s endpoint only, not %q", f, f.only(), req.Endpoint)})
		cancel()
		return
	}
	s.mu.Lock()
	if s.stopping {
		// Delivered while the subscriptions drain: hand it back so the edge
		// retries it on another replica.
		s.mu.Unlock()
		_ = w.Fail(&Error{Status: http.StatusServiceUnavailable, Code: "shutting_down", Retryable: true,
			Message: fmt.Sprintf("worker %s is shutting down", s.cfg.WorkerID)})
		cancel()
		return
	}
	s.active[req.ID] = w
	s.wg.Add(1)
	s.mu.Unlock()
	ack := nats.NewMsg(m.Reply)
	ack.Header.Set(HdrFrame, FrameAck)
	ack.Header.Set(HdrWorker, s.cfg.WorkerID)
	_ = s.nc.PublishMsg(ack)
	go s.serve(ctx, req, w)
}

func (s *Server) serve(ctx context.Context, req *Request, w *ResponseWriter) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.active, req.ID)
		s.mu.Unlock()
		w.cancel()
	}()
	prio := PriorityOf(req.Family)
	waiter, ok, full := s.slots.tryAcquire(req.Tenant, prio, s.cfg.MaxQueue)
	if full {
		_ = w.Fail(&Error{Status: http.StatusTooManyRequests, Code: "overloaded", Retryable: true,
			Message: fmt.Sprintf("worker %s of %s is at capacity", s.cfg.WorkerID, s.cfg.Model)})
		return
	}
	if !ok && !s.slots.wait(ctx, waiter) {
		_ = w.Fail(&Error{Status: http.StatusServiceUnavailable, Code: "canceled", Message: "request canceled while queued"})
		return
	}
	s.running.Add(1)
	defer func() {
		s.running.Add(-1)
		s.slots.release(req.Tenant, prio)
	}()
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("bridge: handler panic", "request_id", req.ID, "panic", fmt.Sprint(r))
				_ = w.Fail(&Error{Status: http.StatusInternalServerError, Code: "internal_error", Message: "worker handler failed"})
			}
		}()
		s.handler(ctx, req, w)
	}()
	if !w.finished.Load() {
		_ = w.Fail(&Error{Status: http.StatusBadGateway, Code: "engine_error", Message: "worker ended the request without a response"})
	}
}

func (s *Server) onControl(m *nats.Msg) {
	id := m.Header.Get(HdrRequestID)
	s.mu.Lock()
	w := s.active[id]
	s.mu.Unlock()
	if w == nil {
		return
	}
	switch m.Header.Get(HdrControl) {
	case ControlCancel:
		w.canceled.Store(true)
		w.cancel()
	case ControlCredit:
		n, _ := strconv.Atoi(m.Header.Get(HdrCredit))
		if n > 0 {
			w.credits.Add(int64(n))
			select {
			case w.notify <- struct{}{}:
			default:
			}
		}
	}
}

func (s *Server) heartbeats() {
	t := time.NewTicker(s.cfg.HeartbeatInterval / 2)
	defer t.Stop()
	var due []*ResponseWriter
	for {
		select {
		case <-s.stopHB:
			return
		case now := <-t.C:
			due = due[:0]
			limit := now.Add(-s.cfg.HeartbeatInterval).UnixNano()
			s.mu.Lock()
			for _, w := range s.active {
				if w.last.Load() <= limit && !w.blocked.Load() && !w.finished.Load() {
					due = append(due, w)
				}
			}
			s.mu.Unlock()
			for _, w := range due {
				m := nats.NewMsg(w.reply)
				m.Header.Set(HdrFrame, FrameHB)
				_ = s.nc.PublishMsg(m)
				w.touch()
			}
		}
	}
}

// ResponseWriter sends the frames of one request.
type ResponseWriter struct {
	s        *Server
	reply    string
	id       string
	cancel   context.CancelFunc
	credits  atomic.Int64
	notify   chan struct{}
	last     atomic.Int64
	blocked  atomic.Bool
	finished atomic.Bool
	canceled atomic.Bool
	sent     int
}

func (w *ResponseWriter) touch() { w.last.Store(time.Now().UnixNano()) }

// Sent is the number of data frames sent so far.
func (w *ResponseWriter) Sent() int { return w.sent }

// Canceled reports whether the edge canceled the request.
func (w *ResponseWriter) Canceled() bool { return w.canceled.Load() }

// ErrCreditTimeout is returned by Data when the edge granted no credit for
// CreditTimeout.
var ErrCreditTimeout = errors.New("bridge: edge granted no credit in time")

// Data sends one data frame, waiting for credit when the window is used up.
func (w *ResponseWriter) Data(ctx context.Context, p []byte) error {
	if w.finished.Load() {
		return errors.New("bridge: response already finished")
	}
	for w.credits.Add(-1) < 0 {
		w.credits.Add(1)
		w.blocked.Store(true)
		t := time.NewTimer(w.s.cfg.CreditTimeout)
		select {
		case <-w.notify:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			w.blocked.Store(false)
			return context.Cause(ctx)
		case <-t.C:
			w.blocked.Store(false)
			return ErrCreditTimeout
		}
		w.blocked.Store(false)
	}
	m := &nats.Msg{Subject: w.reply, Data: p}
	if err := w.s.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("bridge: send data: %w", err)
	}
	w.sent++
	w.touch()
	return nil
}

// Body sends a whole non-streamed response: data frames of at most
// MaxPartSize, then the end frame with status and content type.
func (w *ResponseWriter) Body(ctx context.Context, status int, contentType string, body []byte) error {
	for len(body) > 0 {
		n := min(len(body), MaxPartSize)
		if err := w.Data(ctx, body[:n]); err != nil {
			return err
		}
		body = body[n:]
	}
	return w.End(status, contentType)
}

// End finishes the response successfully (for a stream: [DONE]).
func (w *ResponseWriter) End(status int, contentType string) error {
	if !w.finished.CompareAndSwap(false, true) {
		return nil
	}
	m := nats.NewMsg(w.reply)
	m.Header.Set(HdrFrame, FrameEnd)
	m.Header.Set(HdrStatus, strconv.Itoa(status))
	if contentType != "" {
		m.Header.Set(HdrContentType, contentType)
	}
	return w.s.nc.PublishMsg(m)
}

// Fail finishes the response with an error. Retryable is dropped once data
// frames were sent: the edge never replays a partial answer.
func (w *ResponseWriter) Fail(e *Error) error {
	if !w.finished.CompareAndSwap(false, true) {
		return nil
	}
	m := nats.NewMsg(w.reply)
	m.Header.Set(HdrFrame, FrameError)
	m.Header.Set(HdrStatus, strconv.Itoa(e.Status))
	m.Header.Set(HdrCode, e.Code)
	m.Header.Set(HdrRetryable, boolHdr(e.Retryable && w.sent == 0))
	if e.RetryAfter > 0 {
		m.Header.Set(HdrRetryAfter, strconv.FormatInt(e.RetryAfter.Milliseconds(), 10))
	}
	if len(e.Body) > 0 {
		m.Data = e.Body
	} else {
		m.Data = []byte(e.Message)
	}
	return w.s.nc.PublishMsg(m)
}
