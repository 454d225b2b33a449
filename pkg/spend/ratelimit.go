package spend

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/kv"
)

// Window is the request and token count of one key in one minute.
type Window struct {
	Requests int64 `json:"requests"`
	Tokens   int64 `json:"tokens"`
}

// RateLimit is a key's limits per minute; zero means unlimited.
type RateLimit struct {
	RPM int64
	TPM int64
}

// RateDecision is the outcome of an admission against a rate limit, with
// what the x-ratelimit-* headers report.
type RateDecision struct {
	Allowed           bool
	LimitRequests     int64
	RemainingRequests int64
	LimitTokens       int64
	RemainingTokens   int64
	// Reset is how long until the window ends and counts start over.
	Reset time.Duration
	// Exceeded names what ran out: "requests" or "tokens".
	Exceeded string
}

// WindowKey names a key's counter for the minute containing t.
func WindowKey(keyID string, t time.Time) string {
	return "r." + keyID + "." + strconv.FormatInt(t.Unix()/60, 10)
}

// Admit counts one request of tokens tokens (saturating: a huge count is
// refused, never wrapped round) against the key's window of the
// current minute if both stay within the limits. It is exact across edge
// replicas: the window changes only by compare-and-set, so the requests
// admitted in a minute never exceed RPM.
func Admit(ctx context.Context, b jetstream.KeyValue, keyID string, lim RateLimit, tokens int64, now time.Time) (RateDecision, error) {
	key := WindowKey(keyID, now)
	windowEnd := time.Unix((now.Unix()/60+1)*60, 0)
	d := RateDecision{LimitRequests: lim.RPM, LimitTokens: lim.TPM, Reset: windowEnd.Sub(now)}
	w, written, err := kv.Update(ctx, b, key, func(w *Window, _ bool) error {
		// fn may run again after a lost race: decide afresh each time.
		d.Exceeded = ""
		if lim.RPM > 0 && AddSat(w.Requests, 1) > lim.RPM {
			d.Exceeded = "requests"
		} else if lim.TPM > 0 && AddSat(w.Tokens, tokens) > lim.TPM {
			d.Exceeded = "tokens"
		}
		if d.Exceeded != "" {
			d.RemainingRequests = SubFloor(lim.RPM, w.Requests)
			d.RemainingTokens = SubFloor(lim.TPM, w.Tokens)
			return kv.ErrNoChange
		}
		w.Requests = AddSat(w.Requests, 1)
		w.Tokens = AddSat(w.Tokens, tokens)
		return nil
	})
	switch {
	case err != nil:
		return d, storeErr(err)
	case !written:
		return d, nil
	}
	d.Allowed = true
	d.RemainingRequests = SubFloor(lim.RPM, w.Requests)
	d.RemainingTokens = SubFloor(lim.TPM, w.Tokens)
	return d, nil
}
