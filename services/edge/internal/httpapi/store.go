package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/kv"
)

// BusRetryAfter is the Retry-After of an answer to a request the event
// bus could not serve for a moment: about how long a JetStream stream or
// bucket takes to elect a new leader after a node is lost.
const BusRetryAfter = 2 * time.Second

// StoreError answers a failure of the bus behind a request: a KV bucket, a
// JetStream stream, or a request to another service over NATS. When the
// bus was only unavailable for a moment (kv.Unavailable: no stream leader
// or responder, a call past its own bound, a reconnecting connection) it
// is 503 service_unavailable naming what (e.g. "file store") with a
// Retry-After, which clients and load balancers retry; any other error is
// the 500 internal_error with the message internal, as is an error that
// came of ctx (the request's) ending. The error itself is never in the
// answer: log it.
func StoreError(ctx context.Context, err error, what, internal string) *contracts.Error {
	if ctx.Err() == nil && kv.Unavailable(err) {
		return &contracts.Error{Status: http.StatusServiceUnavailable, Type: contracts.TypeServer, Code: contracts.CodeServiceUnavailable,
			Message:    "The " + what + " is unavailable for a moment (the event bus is electing a leader or reconnecting); retry.",
			RetryAfter: BusRetryAfter}
	}
	return contracts.ErrInternal(internal)
}
