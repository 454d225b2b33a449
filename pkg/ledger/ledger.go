// Package ledger folds usage events into per-minute spend buckets and
// answers reports from them. It is pure: no I/O, no clocks, no goroutines.
// The usage service folds the USAGE stream into one Ledger and its audit
// recomputes another from the raw stream with the same PriceBook; Diff
// compares the two.
//
// Money is int64 nano-USD (1e-9 USD). A bucket is one tenant × API key ×
// model × endpoint × minute (the unix minute of the request's StartedAt, or
// of a correction's At). Every event id is remembered for good, so an event
// republished after JetStream's duplicate window is still counted once.
//
// A Ledger is not safe for concurrent use; callers that read while another
// goroutine folds must lock (reads may run concurrently with each other).
package ledger

import (
	"crypto/sha256"
	"slices"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
)

// Dims are the dimensions of a bucket besides its minute.
type Dims struct {
	Tenant   string `json:"tenant"`
	KeyID    string `json:"key_id"`
	Model    string `json:"model"`
	Endpoint string `json:"endpoint"`
}

func (d Dims) compare(o Dims) int {
	if c := strings.Compare(d.Tenant, o.Tenant); c != 0 {
		return c
	}
	if c := strings.Compare(d.KeyID, o.KeyID); c != 0 {
		return c
	}
	if c := strings.Compare(d.Model, o.Model); c != 0 {
		return c
	}
	return strings.Compare(d.Endpoint, o.Endpoint)
}

// Counters are what a bucket counts.
type Counters struct {
	Requests          int64 `json:"requests"`
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	// Errors counts requests whose status is not "ok".
	Errors   int64 `json:"errors"`
	CostNano int64 `json:"cost_nano"`
	// Unpriced counts requests folded while their model had no price in
	// force; they cost 0.
	Unpriced int64 `json:"unpriced"`
}

// Add adds o to c.
func (c *Counters) Add(o Counters) {
	c.Requests += o.Requests
	c.InputTokens += o.InputTokens
	c.CachedInputTokens += o.CachedInputTokens
	c.OutputTokens += o.OutputTokens
	c.Errors += o.Errors
	c.CostNano += o.CostNano
	c.Unpriced += o.Unpriced
}

// IsZero reports whether every counter is 0.
func (c Counters) IsZero() bool { return c == Counters{} }

// Bucket is one minute bucket: Start is the unix second the minute starts.
type Bucket struct {
	Start int64 `json:"start"`
	Dims
	Counters
}

// Time is the start of the bucket's minute.
func (b Bucket) Time() time.Time { return time.Unix(b.Start, 0).UTC() }

// ID is the form an event id is remembered in: the first 128 bits of its
// SHA-256, a quarter of the memory of a typical id string with a collision
// chance that never matters (2^-64 after 2^32 ids).
type ID [16]byte

// EventID returns the ID of an event id.
func EventID(id string) ID {
	sum := sha256.Sum256([]byte(id))
	var out ID
	copy(out[:], sum[:16])
	return out
}

type minuteBuckets = map[Dims]*Counters

// Ledger is the folded state: minute buckets, the ids of every event
// applied, and the last stream sequence folded.
type Ledger struct {
	minutes map[int64]minuteBuckets // unix minute → buckets
	order   []int64                 // the keys of minutes, ascending
	nb      int                     // buckets in all
	seen    map[ID]struct{}
	lastSeq uint64
	applied uint64

	// cache of the last minute touched: events arrive roughly in order.
	lastMin int64
	lastMB  minuteBuckets
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{minutes: map[int64]minuteBuckets{}, seen: map[ID]struct{}{}}
}

// LastSeq is the last stream sequence folded (0 for none).
func (l *Ledger) LastSeq() uint64 { return l.lastSeq }

// Applied is how many events changed the ledger.
func (l *Ledger) Applied() uint64 { return l.applied }

// Seen is how many event ids the ledger remembers.
func (l *Ledger) Seen() int { return len(l.seen) }

// Len is the number of minute buckets.
func (l *Ledger) Len() int { return l.nb }

// HasSeen reports whether the event id was applied.
func (l *Ledger) HasSeen(eventID string) bool {
	_, ok := l.seen[EventID(eventID)]
	return ok
}

// SetLastSeq records that the stream was folded up to seq without an event
// to apply (for example a message that is not a usage event). It never
// moves LastSeq back.
func (l *Ledger) SetLastSeq(seq uint64) {
	if seq > l.lastSeq {
		l.lastSeq = seq
	}
}

// Apply folds one event read at stream sequence seq with envelope id
// eventID, costing it with pb, and reports whether it changed the ledger.
//
// UsageRecordedV1 and V2 add one request to the bucket of their StartedAt
// minute; UsageCorrectedV1 adds its deltas, and the cost of its token
// deltas, to the bucket of the corrected request (its At). Other event types
// are ignored. An event whose id was applied before is skipped whatever its
// sequence; so is a sequence at or below LastSeq (seq 0 means "no
// sequence": only the id is checked). LastSeq is advanced in every case.
func (l *Ledger) Apply(seq uint64, eventID string, ev events.Event, pb *PriceBook) bool {
	ok, _ := l.ApplyCost(seq, eventID, ev, pb)
	return ok
}

// ApplyCost is Apply that also returns the cost folded (for budget
// settlement): the request's cost, or a correction's cost delta.
func (l *Ledger) ApplyCost(seq uint64, eventID string, ev events.Event, pb *PriceBook) (applied bool, costNano int64) {
	if seq != 0 {
		if seq <= l.lastSeq {
			return false, 0
		}
		l.lastSeq = seq
	}
	var rec *events.UsageRecordedV1
	var cor *events.UsageCorrectedV1
	switch e := ev.(type) {
	case *events.UsageRecordedV2:
		if e != nil {
			rec = &e.UsageRecordedV1
		}
	case *events.UsageRecordedV1:
		rec = e
	case events.UsageRecordedV2:
		rec = &e.UsageRecordedV1
	case events.UsageRecordedV1:
		rec = &e
	case *events.UsageCorrectedV1:
		cor = e
	case events.UsageCorrectedV1:
		cor = &e
	}
	switch {
	case rec != nil:
		if eventID == "" {
			eventID = rec.RequestID
		}
		if !l.markSeen(eventID) {
			return false, 0
		}
		c := RecordCounters(rec, pb)
		l.add(minuteOf(rec.StartedAt), Dims{Tenant: rec.Tenant, KeyID: rec.KeyID, Model: rec.Model, Endpoint: rec.Endpoint}, c)
		l.applied++
		return true, c.CostNano
	case cor != nil:
		if eventID == "" {
			eventID = cor.CorrectionID
		}
		if !l.markSeen(eventID) {
			return false, 0
		}
		c := CorrectionCounters(cor, pb)
		l.add(minuteOf(cor.At), Dims{Tenant: cor.Tenant, KeyID: cor.KeyID, Model: cor.Model, Endpoint: cor.Endpoint}, c)
		l.applied++
		return true, c.CostNano
	}
	return false, 0
}

// RecordCounters is what one recorded request adds to its bucket.
func RecordCounters(u *events.UsageRecordedV1, pb *PriceBook) Counters {
	c := Counters{
		Requests:          1,
		InputTokens:       u.PromptTokens,
		CachedInputTokens: u.CachedPromptTokens,
		OutputTokens:      u.CompletionTokens,
	}
	if u.Status != events.UsageStatusOK {
		c.Errors = 1
	}
	cost, ok := pb.CostNano(u.Model, u.Endpoint, u.StartedAt, u.PromptTokens, u.CachedPromptTokens, u.CompletionTokens)
	if ok {
		c.CostNano = cost
	} else {
		c.Unpriced = 1
	}
	return c
}

// CorrectionCounters is what a correction adds to the corrected bucket.
func CorrectionCounters(u *events.UsageCorrectedV1, pb *PriceBook) Counters {
	cost, _ := pb.CostNano(u.Model, u.Endpoint, u.At, u.DeltaPromptTokens, u.DeltaCachedPromptTokens, u.DeltaCompletionTokens)
	return Counters{
		Requests:          u.DeltaRequests,
		InputTokens:       u.DeltaPromptTokens,
		CachedInputTokens: u.DeltaCachedPromptTokens,
		OutputTokens:      u.DeltaCompletionTokens,
		Errors:            u.DeltaErrors,
		CostNano:          cost,
	}
}

func (l *Ledger) markSeen(eventID string) bool {
	id := EventID(eventID)
	if _, dup := l.seen[id]; dup {
		return false
	}
	l.seen[id] = struct{}{}
	return true
}

// minuteOf is the unix minute containing t (floor division, so times before
// 1970 stay in the right minute).
func minuteOf(t time.Time) int64 {
	s := t.Unix()
	m := s / 60
	if s%60 < 0 {
		m--
	}
	return m
}

func (l *Ledger) add(minute int64, d Dims, c Counters) {
	mb := l.lastMB
	if mb == nil || minute != l.lastMin {
		var ok bool
		mb, ok = l.minutes[minute]
		if !ok {
			mb = make(minuteBuckets, 8)
			l.minutes[minute] = mb
			i, _ := slices.BinarySearch(l.order, minute)
			l.order = slices.Insert(l.order, i, minute)
		}
		l.lastMin, l.lastMB = minute, mb
	}
	if p, ok := mb[d]; ok {
		p.Add(c)
		return
	}
	cc := c
	mb[d] = &cc
	l.nb++
}

// minuteRange returns the minutes with buckets whose start lies in
// [from, to); zero times leave that end open.
func (l *Ledger) minuteRange(from, to time.Time) []int64 {
	lo, hi := 0, len(l.order)
	if !from.IsZero() {
		lo, _ = slices.BinarySearch(l.order, ceilMinute(from))
	}
	if !to.IsZero() {
		hi, _ = slices.BinarySearch(l.order, ceilMinute(to))
	}
	if lo > hi {
		return nil
	}
	return l.order[lo:hi]
}

// ceilMinute is the first unix minute starting at or after t.
func ceilMinute(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	m := s / 60 // truncates toward zero: the ceiling for negative s
	if s%60 > 0 {
		m++
	}
	return m
}

// Range calls fn for every bucket whose minute starts in [from, to), in
// minute order and, within a minute, in dimension order; fn returns false
// to stop. Zero times leave that end open.
func (l *Ledger) Range(from, to time.Time, fn func(Bucket) bool) {
	var dims []Dims
	for _, m := range l.minuteRange(from, to) {
		mb := l.minutes[m]
		dims = dims[:0]
		for d := range mb {
			dims = append(dims, d)
		}
		slices.SortFunc(dims, Dims.compare)
		for _, d := range dims {
			if !fn(Bucket{Start: m * 60, Dims: d, Counters: *mb[d]}) {
				return
			}
		}
	}
}

// Buckets returns the buckets of Range, restricted to tenant scope when it
// is not empty.
func (l *Ledger) Buckets(from, to time.Time, scope string) []Bucket {
	var out []Bucket
	l.Range(from, to, func(b Bucket) bool {
		if scope == "" || b.Tenant == scope {
			out = append(out, b)
		}
		return true
	})
	return out
}

// Totals sums the buckets of Range (restricted to tenant scope when it is
// not empty).
func (l *Ledger) Totals(from, to time.Time, scope string) Counters {
	var c Counters
	for _, m := range l.minuteRange(from, to) {
		for d, p := range l.minutes[m] {
			if scope == "" || d.Tenant == scope {
				c.Add(*p)
			}
		}
	}
	return c
}

// Clone returns a deep copy of the buckets whose minute lies in [from, to)
// (zero times: all) and, when scope is not empty, whose tenant is scope,
// with the same LastSeq and Applied. The seen ids are copied only when
// withSeen is true.
func (l *Ledger) Clone(from, to time.Time, scope string, withSeen bool) *Ledger {
	c := New()
	c.lastSeq, c.applied = l.lastSeq, l.applied
	for _, m := range l.minuteRange(from, to) {
		for d, p := range l.minutes[m] {
			if scope == "" || d.Tenant == scope {
				c.add(m, d, *p)
			}
		}
	}
	if withSeen {
		c.seen = make(map[ID]struct{}, len(l.seen))
		for id := range l.seen {
			c.seen[id] = struct{}{}
		}
	}
	return c
}

// Width is a rollup bucket width.
type Width int64

// Rollup widths, in seconds.
const (
	Minute Width = 60
	Hour   Width = 3600
	Day    Width = 86400
)

// Valid reports whether w is one of Minute, Hour, Day.
func (w Width) Valid() bool { return w == Minute || w == Hour || w == Day }

// Duration is w as a time.Duration.
func (w Width) Duration() time.Duration { return time.Duration(w) * time.Second }

// Align is the start of the width-bucket containing the unix second s,
// aligned to the Unix epoch (so days start at UTC midnight).
func (w Width) Align(s int64) int64 {
	r := s % int64(w)
	if r < 0 {
		r += int64(w)
	}
	return s - r
}

// Rollup sums the minute buckets in [from, to) into buckets of width w
// (aligned to UTC: days start at midnight), one row per start and
// dimensions, sorted by start then dimensions. scope, when not empty,
// keeps one tenant.
func (l *Ledger) Rollup(w Width, from, to time.Time, scope string) []Bucket {
	type key struct {
		start int64
		Dims
	}
	sums := map[key]*Counters{}
	for _, m := range l.minuteRange(from, to) {
		start := w.Align(m * 60)
		for d, p := range l.minutes[m] {
			if scope != "" && d.Tenant != scope {
				continue
			}
			k := key{start, d}
			if s, ok := sums[k]; ok {
				s.Add(*p)
			} else {
				c := *p
				sums[k] = &c
			}
		}
	}
	out := make([]Bucket, 0, len(sums))
	for k, c := range sums {
		out = append(out, Bucket{Start: k.start, Dims: k.Dims, Counters: *c})
	}
	slices.SortFunc(out, compareBuckets)
	return out
}

func compareBuckets(a, b Bucket) int {
	if a.Start != b.Start {
		if a.Start < b.Start {
			return -1
		}
		return 1
	}
	return a.Dims.compare(b.Dims)
}

// Equal reports whether two ledgers hold the same buckets, seen ids, last
// sequence and applied count.
func Equal(a, b *Ledger) bool {
	if a.lastSeq != b.lastSeq || a.applied != b.applied || a.nb != b.nb || len(a.seen) != len(b.seen) ||
		!slices.Equal(a.order, b.order) {
		return false
	}
	for m, mb := range a.minutes {
		ob, ok := b.minutes[m]
		if !ok || len(ob) != len(mb) {
			return false
		}
		for d, p := range mb {
			q, ok := ob[d]
			if !ok || *p != *q {
				return false
			}
		}
	}
	for id := range a.seen {
		if _, ok := b.seen[id]; !ok {
			return false
		}
	}
	return true
}
