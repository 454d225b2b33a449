package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/aiforge/aiforge/pkg/telemetry"
)

// Headers added to a dead-lettered copy of a message, beside its original
// data and headers.
const (
	HeaderDLQReason     = "Aiforge-Dlq-Reason"     // why it was given up on (error text, one line)
	HeaderDLQStream     = "Aiforge-Dlq-Stream"     // stream it came from
	HeaderDLQSequence   = "Aiforge-Dlq-Sequence"   // its sequence in that stream
	HeaderDLQDeliveries = "Aiforge-Dlq-Deliveries" // deliveries made, the last included
	HeaderDLQSubject    = "Aiforge-Dlq-Subject"    // its original subject
	HeaderDLQConsumer   = "Aiforge-Dlq-Consumer"   // durable that gave up
)

// Consumer defaults.
const (
	DefaultMaxDeliver    = 5
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 1000
)

// DefaultBackoff is the redelivery delay schedule used when
// ConsumerConfig.Backoff is empty.
var DefaultBackoff = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second}

const (
	// maxBuffered bounds how many messages the client pulls ahead of the
	// handler. Handling is sequential, so a deeper buffer only delays
	// other replicas and inflates delivery counts at shutdown.
	maxBuffered = 100
	// dlqPublishTimeout bounds the wait for the dead-letter stream's ack.
	dlqPublishTimeout = 5 * time.Second
	// drainTimeout bounds how long Run hands buffered messages back at
	// shutdown before it gives up and lets AckWait redeliver them.
	drainTimeout = 5 * time.Second
	// maxReasonLen bounds the Aiforge-Dlq-Reason header.
	maxReasonLen = 1024
)

// ConsumerConfig configures a durable consumer. The zero value of every
// optional field selects its default; Validate reports what is wrong.
type ConsumerConfig struct {
	// Stream to consume. Required.
	Stream string
	// Durable names the consumer after service and event, e.g.
	// "usage-ledger". Required; replicas of one service share it.
	Durable string
	// FilterSubjects restricts the subjects delivered; empty takes all.
	FilterSubjects []string
	// MaxDeliver is the number of deliveries after which a message that
	// still fails is dead-lettered. Default 5.
	MaxDeliver int
	// Backoff is the delay before redelivery n at index n-1; the last
	// entry repeats. Default 100ms, 500ms, 2s, 5s.
	Backoff []time.Duration
	// AckWait is how long the server waits for an ack before redelivering;
	// the handler's context is bounded by it too. Default 30s.
	AckWait time.Duration
	// MaxAckPending bounds unacknowledged messages (handled ones and those
	// waiting for a delayed redelivery) across all replicas. Default 1000.
	MaxAckPending int
	// DeadLetterSubject receives what is given up on. Default
	// DeadLetter(Stream, Durable), captured by the DEADLETTER stream.
	DeadLetterSubject string
	// DeliverPolicy is where a new durable starts. Default DeliverAll.
	// Policies that need a start sequence or time are not supported.
	DeliverPolicy jetstream.DeliverPolicy
	// Concurrency is how many messages are handled at once. Default 1
	// (sequential). Above 1, set MaxAckPending to it too, so that no message
	// waits in the pull buffer behind busy handlers.
	Concurrency int
	// OrderKey, with Concurrency above 1, names what must be handled in
	// delivery order: messages with the same non-empty key are handled one
	// after another (a file's versions, say), others concurrently. It is
	// given the decoded event; nil orders nothing.
	OrderKey func(Envelope, Event) string
	// Logger receives the consumer's logs. Default discards.
	Logger *slog.Logger
	// Tracer, when set, starts a consumer span around each handled
	// delivery, a child of the trace context in the message's headers (the
	// publisher's span). Without it the handler's context still carries
	// that remote parent, so what it publishes stays in the same trace.
	Tracer trace.Tracer
	// Metrics, when set, counts the consumer's deliveries by outcome and
	// records its backlog and lag (NewConsumerMetrics).
	Metrics *ConsumerMetrics
}

// Validate reports every problem of c, joined with errors.Join. It never
// mutates c.
func (c ConsumerConfig) Validate() error {
	var errs []error
	if err := validName("stream", c.Stream); err != nil {
		errs = append(errs, err)
	}
	if err := validName("durable", c.Durable); err != nil {
		errs = append(errs, err)
	}
	for i, s := range c.FilterSubjects {
		if err := validSubject(s, true); err != nil {
			errs = append(errs, fmt.Errorf("filter subject %d: %w", i, err))
		}
	}
	if c.MaxDeliver < 0 {
		errs = append(errs, fmt.Errorf("max deliver %d is negative", c.MaxDeliver))
	}
	for i, d := range c.Backoff {
		if d < 0 {
			errs = append(errs, fmt.Errorf("backoff %d (%s) is negative", i, d))
		}
	}
	if c.AckWait < 0 {
		errs = append(errs, fmt.Errorf("ack wait %s is negative", c.AckWait))
	}
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency %d is negative", c.Concurrency))
	}
	if c.MaxAckPending < 0 {
		errs = append(errs, fmt.Errorf("max ack pending %d is negative", c.MaxAckPending))
	}
	if c.DeadLetterSubject != "" {
		if err := validSubject(c.DeadLetterSubject, false); err != nil {
			errs = append(errs, fmt.Errorf("dead letter subject: %w", err))
		}
	}
	switch c.DeliverPolicy {
	case jetstream.DeliverAllPolicy, jetstream.DeliverLastPolicy, jetstream.DeliverNewPolicy, jetstream.DeliverLastPerSubjectPolicy:
	default:
		errs = append(errs, fmt.Errorf("deliver policy %s is not supported (all, last, new, last_per_subject)", c.DeliverPolicy))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("events: consumer config: %w", err)
	}
	return nil
}

// withDefaults returns a copy of c with defaults applied; Backoff and
// FilterSubjects are copied so the caller may reuse its slices.
func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if len(c.Backoff) == 0 {
		c.Backoff = DefaultBackoff
	}
	c.Backoff = slices.Clone(c.Backoff)
	c.FilterSubjects = slices.Clone(c.FilterSubjects)
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.DeadLetterSubject == "" {
		c.DeadLetterSubject = DeadLetter(c.Stream, c.Durable)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// backoff returns the delay before the redelivery that follows delivery n
// (n counts from 1).
func (c ConsumerConfig) backoff(n uint64) time.Duration {
	if len(c.Backoff) == 0 {
		return 0
	}
	n = max(n, 1)
	i := len(c.Backoff) - 1
	if n-1 < uint64(i) {
		i = int(n - 1)
	}
	return c.Backoff[i]
}

// validName checks a stream or consumer name: one subject token, no path
// separators.
func validName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is required", what)
	}
	if strings.ContainsAny(s, ".*>/\\") || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("%s %q must not contain '.', '*', '>', '/', '\\' or whitespace", what, s)
	}
	return nil
}

// validSubject checks a subject: non-empty tokens, no whitespace, wildcards
// only as whole tokens and only where allowed, '>' last.
func validSubject(s string, wildcards bool) error {
	if s == "" {
		return errors.New("subject is empty")
	}
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("subject %q contains whitespace", s)
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return fmt.Errorf("subject %q has an empty token", s)
		case t == "*" || t == ">":
			if !wildcards {
				return fmt.Errorf("subject %q must not contain wildcards", s)
			}
			if t == ">" && i != len(toks)-1 {
				return fmt.Errorf("subject %q has '>' before its last token", s)
			}
		case strings.ContainsAny(t, "*>"):
			return fmt.Errorf("subject %q has a wildcard inside a token", s)
		}
	}
	return nil
}

// Handler handles one decoded event. A nil error acks it; an error (or a
// panic) has it redelivered after a backoff until MaxDeliver, then
// dead-lettered. Handlers must be idempotent: delivery is at least once.
//
// ctx is not canceled when Run's context is, so a handler in progress can finish at
// shutdown, and expires after AckWait, when the server redelivers anyway.
type Handler func(ctx context.Context, env Envelope, ev Event) error

// ConsumerStats counts what a Consumer did with its messages.
type ConsumerStats struct {
	Handled      uint64 // handler succeeded; acked
	Failed       uint64 // handler failed or panicked (every attempt)
	Retried      uint64 // negatively acked for a delayed redelivery
	DeadLettered uint64 // copied to the dead-letter subject and terminated
	Unknown      uint64 // event type not in the registry; acked unhandled
	Invalid      uint64 // undecodable or invalid event; dead-lettered at once
}

// Consumer runs a Handler on a durable JetStream consumer.
//
// Each message passes through these layers, outermost first:
//
//  1. Dead-letter. When the handler fails on a delivery whose count
//     (NumDelivered) has reached MaxDeliver, a copy of the message (data,
//     headers, and the Aiforge-Dlq-* headers) is published to
//     DeadLetterSubject through JetStream, waiting for the stream's ack,
//     and the original is terminated. It is outermost so that every way of
//     giving up ends in one place, and it publishes before it terminates
//     so that nothing is lost: if the publish fails the message is
//     negatively acked and comes back. The copy's Nats-Msg-Id is
//     "dlq-<stream>-<stream seq>", so a message dead-lettered twice (the
//     Term lost, the publish retried) is stored once. The server's own
//     MaxDeliver is unlimited for the same reason: a message the server
//     stopped delivering on its own would vanish without a dead letter.
//  2. Unknown type. An event type missing from the registry is acked and
//     counted, not retried: a consumer deployed before a producer's new
//     event (or version) must keep going, and retrying cannot help.
//  3. Invalid. A body that does not decode or validate is poison: it will
//     fail the same way on every delivery, so it is dead-lettered at once
//     instead of occupying MaxDeliver slots and backoff time. A message
//     without a type is treated as invalid: it was not published through
//     Marshal.
//  4. Recoverer. A panic in the handler becomes an error, so one bad
//     message cannot crash the service and takes the retry path below.
//  5. Retry. A handler error negatively acks the message with the backoff
//     for its delivery count, so the server redelivers it later (to any
//     replica) without the handler sleeping.
//  6. Success acks the message.
//
// Handling is sequential, one message at a time per Consumer, unless
// Concurrency says otherwise (with OrderKey keeping the order of related
// messages). Run a Consumer per replica (same Durable) to scale out.
type Consumer struct {
	js  jetstream.JetStream
	reg *Registry
	cfg ConsumerConfig
	h   Handler
	log *slog.Logger

	// retryDelay is the wait before the consumer is set up again after
	// the server ended consumption (the consumer was deleted, say).
	retryDelay time.Duration
	// heartbeat is the idle heartbeat asked of the server; two missed
	// ones make Run check that the consumer still exists.
	heartbeat time.Duration

	running atomic.Bool
	sem     chan struct{}  // handler slots when Concurrency > 1
	wg      sync.WaitGroup // handlers running when Concurrency > 1
	mu      sync.Mutex
	keys    map[string][]jetstream.Msg // OrderKey → messages waiting behind the one being handled
	stats   struct {
		handled, failed, retried, deadLettered, unknown, invalid atomic.Uint64
	}
}

// NewConsumer validates cfg and returns a Consumer; nothing is created on
// the server until Run.
func NewConsumer(js jetstream.JetStream, reg *Registry, cfg ConsumerConfig, h Handler) (*Consumer, error) {
	var errs []error
	if js == nil {
		errs = append(errs, errors.New("events: new consumer: JetStream is nil"))
	}
	if reg == nil {
		errs = append(errs, errors.New("events: new consumer: registry is nil"))
	}
	if h == nil {
		errs = append(errs, errors.New("events: new consumer: handler is nil"))
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Consumer{
		js:         js,
		reg:        reg,
		cfg:        cfg,
		h:          h,
		log:        cfg.Logger.With("stream", cfg.Stream, "durable", cfg.Durable),
		retryDelay: time.Second,
		heartbeat:  5 * time.Second,
	}, nil
}

// Stats returns a snapshot of the counters. Each counter is read
// atomically; the snapshot as a whole is not one instant.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{
		Handled:      c.stats.handled.Load(),
		Failed:       c.stats.failed.Load(),
		Retried:      c.stats.retried.Load(),
		DeadLettered: c.stats.deadLettered.Load(),
		Unknown:      c.stats.unknown.Load(),
		Invalid:      c.stats.invalid.Load(),
	}
}

// consumerConfig is the server-side definition of the durable.
func (c *Consumer) consumerConfig() jetstream.ConsumerConfig {
	cc := jetstream.ConsumerConfig{
		Durable:       c.cfg.Durable,
		Description:   "aiforge events consumer " + c.cfg.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.AckWait,
		MaxDeliver:    -1, // dead-lettering is ours; see Consumer
		MaxAckPending: c.cfg.MaxAckPending,
		DeliverPolicy: c.cfg.DeliverPolicy,
	}
	switch len(c.cfg.FilterSubjects) {
	case 0:
	case 1:
		cc.FilterSubject = c.cfg.FilterSubjects[0]
	default:
		cc.FilterSubjects = c.cfg.FilterSubjects
	}
	return cc
}

// Run creates or updates the durable consumer (explicit ack) and handles
// messages until ctx is done. Then it stops pulling, waits for the handler
// in progress, hands messages pulled but not yet handled back to the server
// (Nak, so another replica gets them now rather than after AckWait) and
// returns nil. It returns an error if the first setup fails, if the
// connection is closed, or if Run is already running. Should the server
// end consumption later (the consumer deleted, say), Run sets it up again.
//
// Run may be called again after it returns; it leaves no goroutines behind.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("events: consumer %s/%s: already running", c.cfg.Stream, c.cfg.Durable)
	}
	defer c.running.Store(false)

	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, c.consumerConfig())
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while setting up: not a failure
		}
		return fmt.Errorf("events: consumer %s/%s: %w", c.cfg.Stream, c.cfg.Durable, err)
	}
	for {
		err := c.consume(ctx, cons)
		c.wg.Wait()
		if ctx.Err() != nil {
			return nil
		}
		if c.js.Conn().IsClosed() {
			return fmt.Errorf("events: consumer %s/%s: %w", c.cfg.Stream, c.cfg.Durable, nats.ErrConnectionClosed)
		}
		c.log.Error("events: consuming ended; setting the consumer up again", "err", err)
		for {
			if !sleep(ctx, c.retryDelay) {
				return nil
			}
			cons, err = c.js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, c.consumerConfig())
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil
			}
			if c.js.Conn().IsClosed() {
				return fmt.Errorf("events: consumer %s/%s: %w", c.cfg.Stream, c.cfg.Durable, nats.ErrConnectionClosed)
			}
			c.log.Error("events: set up consumer", "err", err)
		}
	}
}

// consume pulls and handles messages until ctx is done (it returns nil) or
// the iterator ends (it returns why).
func (c *Consumer) consume(ctx context.Context, cons jetstream.Consumer) error {
	it, err := cons.Messages(
		jetstream.PullMaxMessages(min(c.cfg.MaxAckPending, maxBuffered)),
		jetstream.PullHeartbeat(c.heartbeat),
		jetstream.WithMessagesErrOnMissingHeartbeat(true),
	)
	if err != nil {
		return err
	}
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				c.drain(it, nil)
				return nil
			}
			if errors.Is(err, jetstream.ErrNoHeartbeat) {
				// Silence: a network hiccup, or pull requests going to a
				// consumer deleted before they arrived (no 409 then).
				// Only the latter needs a new consumer; the iterator
				// pulls again by itself.
				_, ierr := cons.Info(ctx)
				if !errors.Is(ierr, jetstream.ErrConsumerNotFound) {
					c.log.Warn("events: missed heartbeats", "info_err", ierr)
					continue
				}
				err = fmt.Errorf("%w: %w", err, ierr)
			}
			it.Stop()
			return err
		}
		if ctx.Err() != nil {
			c.drain(it, msg)
			return nil
		}
		if c.cfg.Concurrency > 1 {
			c.dispatch(ctx, msg)
		} else {
			c.process(ctx, msg)
		}
	}
}

// dispatch handles msg in a goroutine once a slot is free, after the
// messages of its OrderKey delivered before it.
func (c *Consumer) dispatch(ctx context.Context, msg jetstream.Msg) {
	key := ""
	if c.cfg.OrderKey != nil {
		if env, ev, err := c.reg.Decode(msg.Headers(), msg.Data()); err == nil {
			key = c.cfg.OrderKey(env, ev)
		}
	}
	c.mu.Lock()
	if c.sem == nil {
		c.sem = make(chan struct{}, c.cfg.Concurrency)
		c.keys = map[string][]jetstream.Msg{}
	}
	if q, busy := c.keys[key]; busy && key != "" {
		c.keys[key] = append(q, msg)
		c.mu.Unlock()
		return
	}
	if key != "" {
		c.keys[key] = nil
	}
	c.mu.Unlock()
	c.sem <- struct{}{}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			c.process(ctx, msg)
			<-c.sem
			if key == "" {
				return
			}
			c.mu.Lock()
			q := c.keys[key]
			if len(q) == 0 {
				delete(c.keys, key)
				c.mu.Unlock()
				return
			}
			msg, c.keys[key] = q[0], q[1:]
			if ctx.Err() != nil { // shutting down: hand the rest back
				delete(c.keys, key)
				c.mu.Unlock()
				for _, m := range q {
					_ = m.Nak()
				}
				return
			}
			c.mu.Unlock()
			c.sem <- struct{}{}
		}
	}()
}

// drain stops pulling and hands back what was pulled but not handled,
// pending (if not nil) first. The hand-back waits until the iterator's
// subscription is drained: the server has then seen it unsubscribe, so it
// cannot redeliver a handed-back message into this iterator's inbox while
// it is going away (where it would be dropped and wait for AckWait).
func (c *Consumer) drain(it jetstream.MessagesContext, pending jetstream.Msg) {
	it.Drain()
	var back []jetstream.Msg
	if pending != nil {
		back = append(back, pending)
	}
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	for {
		msg, err := it.Next(jetstream.NextContext(dctx))
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				c.log.Warn("events: drain at shutdown", "err", err)
			}
			break
		}
		back = append(back, msg)
	}
	it.Stop()
	for _, msg := range back {
		if err := msg.Nak(); err != nil {
			c.log.Warn("events: hand back at shutdown", "subject", msg.Subject(), "err", err)
		}
	}
}

// process runs the layers described on Consumer for one message.
func (c *Consumer) process(ctx context.Context, msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing can be acked.
		c.log.Error("events: message without JetStream metadata", "subject", msg.Subject(), "err", err)
		return
	}
	log := c.log.With("subject", msg.Subject(), "seq", md.Sequence.Stream, "deliveries", md.NumDelivered)

	env, ev, err := c.reg.Decode(msg.Headers(), msg.Data())
	if errors.Is(err, ErrUnknownType) && env.Type == "" {
		err = fmt.Errorf("%w: no %s header", ErrInvalid, HeaderType)
	}
	log = log.With("type", env.Type, "id", env.ID)
	c.cfg.Metrics.delivered(c.cfg.Durable, md.NumPending, env.Time, time.Now())
	switch {
	case errors.Is(err, ErrUnknownType):
		c.stats.unknown.Add(1)
		c.cfg.Metrics.outcome(c.cfg.Durable, OutcomeUnknown)
		log.Debug("events: unknown event type; acked")
		c.ack(log, msg)
		return
	case errors.Is(err, ErrInvalid):
		c.stats.invalid.Add(1)
		c.cfg.Metrics.outcome(c.cfg.Durable, OutcomeInvalid)
		log.Warn("events: invalid event; dead-lettering", "err", err)
		c.deadLetter(log, msg, md, err)
		return
	case err != nil:
		// Decode returns nothing else today; retry like a handler failure.
	default:
		err = c.call(ctx, msg, env, ev)
		if err == nil {
			c.stats.handled.Add(1)
			c.cfg.Metrics.outcome(c.cfg.Durable, OutcomeHandled)
			c.ack(log, msg)
			return
		}
	}

	c.stats.failed.Add(1)
	if md.NumDelivered >= uint64(c.cfg.MaxDeliver) {
		log.Warn("events: handler failed on the last delivery; dead-lettering", "err", err)
		c.cfg.Metrics.outcome(c.cfg.Durable, OutcomeDeadLettered)
		c.deadLetter(log, msg, md, err)
		return
	}
	delay := c.cfg.backoff(md.NumDelivered)
	log.Info("events: handler failed; retrying", "err", err, "delay", delay)
	c.cfg.Metrics.outcome(c.cfg.Durable, OutcomeRetried)
	c.retry(log, msg, delay)
}

// call runs the handler with a context that carries the envelope, survives
// Run's cancellation and expires after AckWait, unless the handler extends
// it with InProgress; a panic becomes an error.
func (c *Consumer) call(ctx context.Context, msg jetstream.Msg, env Envelope, ev Event) (err error) {
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	l := &lease{msg: msg, wait: c.cfg.AckWait}
	l.timer = time.AfterFunc(c.cfg.AckWait, func() { cancel(context.DeadlineExceeded) })
	defer l.timer.Stop()
	hctx = context.WithValue(hctx, leaseKey{}, l)
	hctx = telemetry.Propagator.Extract(hctx, telemetry.NATSCarrier(msg.Headers()))
	if c.cfg.Tracer != nil {
		var span trace.Span
		hctx, span = c.cfg.Tracer.Start(hctx, c.cfg.Durable+" process", trace.WithSpanKind(trace.SpanKindConsumer))
		if span.IsRecording() {
			span.SetAttributes(
				attribute.String("messaging.system", "nats"),
				attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.destination.name", msg.Subject()),
				attribute.String("messaging.consumer.group.name", c.cfg.Durable),
				attribute.String("messaging.message.id", env.ID),
				attribute.String("aiforge.event.type", env.Type),
				attribute.String("aiforge.tenant.id", env.Tenant),
			)
			if md, merr := msg.Metadata(); merr == nil {
				span.SetAttributes(attribute.Int64("messaging.nats.delivery_count", int64(md.NumDelivered)))
			}
		}
		defer func() {
			if err != nil {
				span.SetStatus(codes.Error, "handler failed")
				span.SetAttributes(attribute.String("error.type", fmt.Sprintf("%T", err)))
			}
			span.End()
		}()
	}
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("events: handler panic", "type", env.Type, "id", env.ID, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("events: handler panic: %v", r)
		}
	}()
	return c.h(hctx, env, ev)
}

type leaseKey struct{}

// lease is a handler's hold on its message: the server redelivers after
// AckWait unless the handler says it is still working.
type lease struct {
	msg   jetstream.Msg
	wait  time.Duration
	timer *time.Timer
}

// InProgress tells the server that the handler whose context this is is
// still working on its message, resetting both the server's AckWait and the
// handler context's expiry; long handlers (a model download) call it as they
// make progress. It returns an error when ctx is not a handler's context or
// the server could not be told; the handler's context is extended only when
// the server was told.
func InProgress(ctx context.Context) error {
	l, ok := ctx.Value(leaseKey{}).(*lease)
	if !ok {
		return errors.New("events: InProgress outside a consumer handler")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.msg.InProgress(); err != nil {
		return fmt.Errorf("events: in progress: %w", err)
	}
	l.timer.Reset(l.wait)
	return nil
}

func (c *Consumer) ack(log *slog.Logger, msg jetstream.Msg) {
	if err := msg.Ack(); err != nil {
		log.Warn("events: ack", "err", err)
	}
}

func (c *Consumer) retry(log *slog.Logger, msg jetstream.Msg, delay time.Duration) {
	c.stats.retried.Add(1)
	if err := msg.NakWithDelay(delay); err != nil {
		// The server redelivers after AckWait anyway.
		log.Warn("events: nak", "err", err)
	}
}

// deadLetter publishes a copy of msg to the dead-letter subject and
// terminates msg; if the publish fails, msg is redelivered instead.
func (c *Consumer) deadLetter(log *slog.Logger, msg jetstream.Msg, md *jetstream.MsgMetadata, reason error) {
	dl := nats.NewMsg(c.cfg.DeadLetterSubject)
	dl.Data = msg.Data()
	for k, v := range msg.Headers() {
		// Nats-* headers are JetStream directives for the original stream
		// (expected sequences, rollups, TTLs, the original Nats-Msg-Id);
		// replayed on the dead-letter stream they would be wrong, or make
		// the publish fail forever.
		if len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") {
			continue
		}
		dl.Header[k] = slices.Clone(v)
	}
	dl.Header.Set(HeaderDLQReason, headerValue(reason.Error()))
	dl.Header.Set(HeaderDLQStream, md.Stream)
	dl.Header.Set(HeaderDLQSequence, strconv.FormatUint(md.Sequence.Stream, 10))
	dl.Header.Set(HeaderDLQDeliveries, strconv.FormatUint(md.NumDelivered, 10))
	dl.Header.Set(HeaderDLQSubject, msg.Subject())
	dl.Header.Set(HeaderDLQConsumer, md.Consumer)
	dl.Header.Set(nats.MsgIdHdr, fmt.Sprintf("dlq-%s-%d", md.Stream, md.Sequence.Stream))

	pctx, cancel := context.WithTimeout(context.Background(), dlqPublishTimeout)
	defer cancel()
	if _, err := c.js.PublishMsg(pctx, dl); err != nil {
		log.Error("events: dead-letter publish failed; redelivering", "dlq", c.cfg.DeadLetterSubject, "err", err)
		c.retry(log, msg, c.cfg.backoff(md.NumDelivered))
		return
	}
	c.stats.deadLettered.Add(1)
	if err := msg.TermWithReason("dead-lettered to " + c.cfg.DeadLetterSubject); err != nil {
		// Redelivered after AckWait and dead-lettered again; the
		// Nats-Msg-Id stores it once.
		log.Warn("events: term", "err", err)
	}
}

// headerValue makes s safe as one header value: control characters (the
// newlines of errors.Join among them) become "; " and it is truncated.
func headerValue(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxReasonLen {
		cut := maxReasonLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
