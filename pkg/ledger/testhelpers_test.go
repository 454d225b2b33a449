package ledger

import "time"

// Diff compares the buckets whose minute starts in [from, to) (zero times
// leave that end open) and returns the differences in bucket order.
func Diff(stored, recomputed *Ledger, from, to time.Time) []Difference {
	d, _ := Compare(stored, recomputed, from, to)
	return d
}
