package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/telemetry"
)

// Envelope headers, after the CloudEvents NATS binding (binary mode). The id
// is also written as Nats-Msg-Id so JetStream drops a republished event.
const (
	HeaderID          = "ce-id"
	HeaderType        = "ce-type"
	HeaderSource      = "ce-source"
	HeaderTime        = "ce-time"
	HeaderSpecVersion = "ce-specversion"
	HeaderTenant      = "ce-tenant"
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	HeaderContentType = "content-type"
)

// Event is a versioned event type. EventType names subsystem, event and
// version ("aiforge.usage.recorded.v1"); a new version is a new Go type.
// Subject is where the event is published, computed from its own fields:
// Subject(EventType(), its tenant or model name). Validate never mutates.
type Event interface {
	EventType() string
	Subject() string
	Validate() error
}

// Envelope is the metadata carried in headers around an event.
type Envelope struct {
	ID          string
	Type        string
	Source      string
	Time        time.Time
	Tenant      string
	TraceParent string
	TraceState  string
}

// ErrUnknownType is returned by Registry.Decode for an event type the
// registry does not know; consumers ack and count such messages.
var ErrUnknownType = errors.New("events: unknown event type")

// ErrInvalid wraps validation failures.
var ErrInvalid = errors.New("events: invalid event")

// NewID returns a random 128-bit id in hex.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Marshal validates ev and builds the message for ev.Subject(): JSON body,
// envelope headers.
func Marshal(ev Event, env Envelope) (*nats.Msg, error) {
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, ev.EventType(), err)
	}
	if env.ID == "" {
		env.ID = NewID()
	}
	if env.Time.IsZero() {
		env.Time = time.Now()
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("events: marshal %s: %w", ev.EventType(), err)
	}
	m := nats.NewMsg(ev.Subject())
	m.Data = body
	h := m.Header
	h.Set(nats.MsgIdHdr, env.ID)
	h.Set(HeaderID, env.ID)
	h.Set(HeaderType, ev.EventType())
	h.Set(HeaderSpecVersion, "1.0")
	h.Set(HeaderContentType, "application/json")
	h.Set(HeaderTime, env.Time.UTC().Format(time.RFC3339Nano))
	if env.Source != "" {
		h.Set(HeaderSource, env.Source)
	}
	if env.Tenant != "" {
		h.Set(HeaderTenant, env.Tenant)
	}
	if env.TraceParent != "" {
		h.Set(HeaderTraceParent, env.TraceParent)
	}
	if env.TraceState != "" {
		h.Set(HeaderTraceState, env.TraceState)
	}
	return m, nil
}

// ReadEnvelope reads the envelope headers of a message.
func ReadEnvelope(h nats.Header) Envelope {
	env := Envelope{
		ID:          h.Get(HeaderID),
		Type:        h.Get(HeaderType),
		Source:      h.Get(HeaderSource),
		Tenant:      h.Get(HeaderTenant),
		TraceParent: h.Get(HeaderTraceParent),
		TraceState:  h.Get(HeaderTraceState),
	}
	if env.ID == "" {
		env.ID = h.Get(nats.MsgIdHdr)
	}
	if t, err := time.Parse(time.RFC3339Nano, h.Get(HeaderTime)); err == nil {
		env.Time = t
	}
	return env
}

// Publish validates and publishes ev on its own subject (ev.Subject()),
// waiting for the stream's acknowledgement. Publishing the same envelope id
// twice within the stream's duplicate window stores it once (ack.Duplicate
// is then true).
//
// An envelope without a traceparent takes the span in ctx, if any: an event
// published while handling a traced request or event continues its trace.
func Publish(ctx context.Context, js jetstream.JetStream, ev Event, env Envelope) (*jetstream.PubAck, error) {
	if env.TraceParent == "" {
		env.TraceParent = telemetry.TraceParent(ctx)
	}
	m, err := Marshal(ev, env)
	if err != nil {
		return nil, err
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("events: publish %s on %s: %w", ev.EventType(), m.Subject, err)
	}
	return ack, nil
}

// PublishAttemptTimeout bounds the wait for one acknowledgement in
// PublishRetry.
var PublishAttemptTimeout = 5 * time.Second

// PublishRetry is Publish retried with backoff (50 ms doubling to 1 s)
// until it is acknowledged, the event is invalid, or ctx ends: what a
// publisher that must not lose an event does while a stream elects a new
// leader (a publish without a leader fails at once, and an election on a
// cluster that lost a node takes seconds). The envelope id makes a retry
// that was in fact stored the first time a duplicate, stored once. It
// returns the last error and the number of attempts.
//
// Each attempt waits at most PublishAttemptTimeout for its
// acknowledgement: a publish that reached a leader which then lost its
// node is never answered, and one attempt waiting out all of ctx (as it
// did, for 30 s, in deploy/chaos.sh) is an event lost.
func PublishRetry(ctx context.Context, js jetstream.JetStream, ev Event, env Envelope) (*jetstream.PubAck, int, error) {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, PublishAttemptTimeout)
		ack, err := Publish(actx, js, ev, env)
		cancel()
		if err == nil || errors.Is(err, ErrInvalid) || ctx.Err() != nil {
			return ack, attempt, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, attempt, err
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Registry maps event type names to Go types, for decoding.
type Registry struct {
	types map[string]func() Event
}

// NewRegistry returns a registry that knows the given event types. Each
// proto must return a new pointer (func() Event { return new(T) }) for Decode
// to unmarshal into; anything else is a programming error and panics here,
// at start, rather than dead-lettering every message later.
func NewRegistry(protos ...func() Event) *Registry {
	r := &Registry{types: make(map[string]func() Event, len(protos))}
	for _, p := range protos {
		ev := p()
		if v := reflect.ValueOf(ev); !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
			panic(fmt.Sprintf("events: NewRegistry: proto must return a non-nil pointer, got %T", ev))
		}
		r.types[ev.EventType()] = p
	}
	return r
}

// Known reports whether typ is registered.
func (r *Registry) Known(typ string) bool { _, ok := r.types[typ]; return ok }

// Decode reads the envelope and body of msg into the registered type and
// validates it. Unknown types return ErrUnknownType without decoding.
func (r *Registry) Decode(h nats.Header, data []byte) (Envelope, Event, error) {
	env := ReadEnvelope(h)
	mk, ok := r.types[env.Type]
	if !ok {
		return env, nil, fmt.Errorf("%w: %q", ErrUnknownType, env.Type)
	}
	ev := mk()
	if err := json.Unmarshal(data, ev); err != nil {
		return env, nil, fmt.Errorf("%w: %s: decode: %w", ErrInvalid, env.Type, err)
	}
	if err := ev.Validate(); err != nil {
		return env, nil, fmt.Errorf("%w: %s: %w", ErrInvalid, env.Type, err)
	}
	return env, ev, nil
}
