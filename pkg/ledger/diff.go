package ledger

import (
	"slices"
	"time"
)

// Difference is one bucket on which two ledgers disagree. A bucket missing
// from one side counts as all zeros there.
type Difference struct {
	Start int64 `json:"start"`
	Dims
	Stored     Counters `json:"stored"`
	Recomputed Counters `json:"recomputed"`
}

// Compare is Diff that also counts the buckets compared (the union of both
// sides' buckets in range).
func Compare(stored, recomputed *Ledger, from, to time.Time) (diffs []Difference, compared int) {
	type key struct {
		m int64
		Dims
	}
	seen := map[key]struct{}{}
	visit := func(a, b *Ledger, aIsStored bool) {
		for _, m := range a.minuteRange(from, to) {
			for d, p := range a.minutes[m] {
				k := key{m, d}
				if _, done := seen[k]; done {
					continue
				}
				seen[k] = struct{}{}
				compared++
				var q Counters
				if ob, ok := b.minutes[m]; ok {
					if c, ok := ob[d]; ok {
						q = *c
					}
				}
				if *p == q {
					continue
				}
				df := Difference{Start: m * 60, Dims: d}
				if aIsStored {
					df.Stored, df.Recomputed = *p, q
				} else {
					df.Stored, df.Recomputed = q, *p
				}
				diffs = append(diffs, df)
			}
		}
	}
	visit(stored, recomputed, true)
	visit(recomputed, stored, false)
	slices.SortFunc(diffs, func(a, b Difference) int {
		return compareBuckets(Bucket{Start: a.Start, Dims: a.Dims}, Bucket{Start: b.Start, Dims: b.Dims})
	})
	return diffs, compared
}
