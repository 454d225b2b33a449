package kv

import (
	"context"
	"errors"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Unavailable reports whether err is the bus being unavailable for a
// moment rather than a fault: a stream or bucket electing a new leader
// after a NATS node is lost (no stream answers, no responders, a JetStream
// API call past its bound, a consumer's heartbeats or leader lost), a
// cluster without the quorum or resources to answer (a JetStream API error
// with status 503), or the connection to the bus reconnecting, closed or
// draining. A request that met one may succeed when retried in a few
// seconds; everything else (ErrNotFound, ErrExists, ErrConflict, a
// *DecodeError, a bad request) is not transient and is false. It sees
// through wrapping (errors.Is and errors.As), errors.Join included.
//
// context.DeadlineExceeded counts, since that is how a JetStream call past
// its own bound (the JetStream default timeout, an internal deadline of the
// caller) ends; but it is also how a caller's own context ends, which is
// not the bus's fault. A caller that holds the context of the request
// checks ctx.Err() first: when that is not nil, the request ended, not the
// bus. context.Canceled is never unavailability.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	for _, target := range transient {
		if errors.Is(err, target) {
			return true
		}
	}
	var jsErr *jetstream.APIError
	if errors.As(err, &jsErr) && jsErr.Code == http.StatusServiceUnavailable {
		return true
	}
	// The legacy JetStream API of nats.go (what some watchers and
	// consumers still use underneath) has its own error type.
	var natsErr *nats.APIError
	return errors.As(err, &natsErr) && natsErr.Code == http.StatusServiceUnavailable
}

// transient are the sentinels of Unavailable.
var transient = []error{
	// A write or direct get no stream leader or replica answered.
	jetstream.ErrNoStreamResponse,
	nats.ErrNoResponders,
	// A request, or a JetStream call, past its bound.
	nats.ErrTimeout,
	context.DeadlineExceeded,
	// A consumer (a watch, a listing, an export) whose server stopped
	// sending, or whose leader moved.
	jetstream.ErrNoHeartbeat,
	jetstream.ErrConsumerLeadershipChanged,
	// The connection to the bus is down: reconnecting to another node, or
	// closed or draining as the process stops.
	nats.ErrConnectionReconnecting,
	nats.ErrDisconnected,
	nats.ErrStaleConnection,
	nats.ErrConnectionClosed,
	nats.ErrConnectionDraining,
}
