// Package supervise holds what the loops of a worker supervisor share: the
// status words they report and a bounded backoff.
package supervise

import (
	"context"
	"time"
)

// Statuses of a supervised model, adapter or deployment.
const (
	StatusServing  = "serving"
	StatusStarting = "starting"
	// StatusErrorPrefix starts the status of a loop whose last try failed;
	// the error follows.
	StatusErrorPrefix = "error: "
)

// Backoff doubles a wait from min(100ms, retry) up to 8 retry intervals.
type Backoff struct{ cur, max time.Duration }

// NewBackoff returns a Backoff for loops that retry every retry interval.
func NewBackoff(retry time.Duration) *Backoff {
	return &Backoff{cur: min(100*time.Millisecond, retry), max: 8 * retry}
}

// Next returns the wait before the next try and doubles the one after.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return d
}

// Wait sleeps for Next; it reports false when ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
