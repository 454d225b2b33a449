// Package ledger folds usage events into per-minute spend buckets and
// answers reports from them. It is pure: no I/O, no clocks, no goroutines.
// The usage service folds the USAGE stream into one Ledger and its audit
// recomputes another from the raw stream with the same PriceBook; Diff
// compares the two.
//
// Money is int64 nano-USD (1e-9 USD). A bucket is one tenant × API key ×
// model × endpoint × batch flag × minute (the unix minute of the request's
// StartedAt, or of a correction's At). Lines of Batch API batches
// (UsageRecordedV3 with Batch set) have buckets of their own, priced at
// their model's batch discount (PriceBook.BatchCostNano). The agent code
// sandboxes' usage (SandboxUsageV1) has buckets of its own too: endpoint
// EndpointSandbox, no model, the Sandbox counters.
//
// # Deduplication horizon
//
// An event whose id was applied before is skipped. Duplicates reach the
// ledger only from retried publishes (seconds apart; JetStream drops most
// of them within its own 2-minute window) and from corrections or replays
// published again with the same id, so ids are not remembered for ever but
// for a dedup horizon H of event time (WithDedupHorizon, default
// DefaultDedupHorizon). The ledger's clock is the newest event minute it
// has applied: it depends only on the events folded, never on a wall clock,
// so folding the same stream (from scratch, or from a snapshot taken
// midway) always gives the same ledger, forgotten ids included. Each
// applied id is remembered with the clock's minute after folding it (the
// event's own minute, or the newer clock for an event older than the
// newest folded), and when the clock moves past minute m + H every id
// remembered at m is forgotten, a whole minute at a time (amortised O(1)
// per event). Memory is therefore bounded by the ids applied during H of
// event time (about 47 bytes each: a flat open-addressing set, which keeps
// no tombstones however many ids it forgets, and the per-minute lists), not
// by the ids applied since the stream began.
//
// An event whose minute is within H of the clock is checked exactly: any
// earlier copy of it is still remembered. An event older than that (a late
// correction of an old request, a producer with a slow clock) cannot be
// fully checked, since an earlier copy folded more than H of clock progress
// ago would have been forgotten; it is applied when its id is not
// remembered, remembered from then on like any other, and counted in
// BeyondHorizon. Rejecting it instead would silently drop usage that was
// really spent (every correction of a request older than H, for a start),
// while applying it double counts only a copy republished more than H
// after its original, which no producer here does (they retry for
// seconds). A producer whose clock runs
// ahead moves the clock with it: ids are then kept until the clock has
// moved H past them again, and the events of correct producers count as
// beyond the horizon, so BeyondHorizon rising is the sign to look for.
//
// A Ledger is not safe for concurrent use; callers that read while another
// goroutine folds must lock (reads may run concurrently with each other).
package ledger

import (
	"crypto/sha256"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/events"
)

// EndpointSandbox is the endpoint of sandbox buckets: the agent code
// sandboxes' usage (events.SandboxUsageV1), with no model. Their counters
// are the Sandbox ones and their cost; they count no requests or tokens.
const EndpointSandbox = "sandbox"

// Dims are the dimensions of a bucket besides its minute.
type Dims struct {
	Tenant   string `json:"tenant"`
	KeyID    string `json:"key_id"`
	Model    string `json:"model"`
	Endpoint string `json:"endpoint"`
	// Batch is true for the lines of Batch API batches. Absent from the
	// JSON when false, so buckets without batch usage read and write as
	// before it existed.
	Batch bool `json:"batch,omitempty"`
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
	if c := strings.Compare(d.Endpoint, o.Endpoint); c != 0 {
		return c
	}
	switch {
	case d.Batch == o.Batch:
		return 0
	case !d.Batch:
		return -1
	}
	return 1
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

	// Sandbox usage, counted in sandbox buckets only (EndpointSandbox; see
	// SandboxCounters). Absent from the JSON when 0, so token buckets read
	// and write as before sandboxes existed.
	//
	// SandboxExecs counts code execs and SandboxErrors those whose status
	// is not "ok"; SandboxWallMS, SandboxCPUMS and SandboxMicroGBSeconds
	// (gigabyte-seconds × 1e6, rounded per exec) are what the execs used.
	SandboxExecs          int64 `json:"sandbox_execs,omitempty"`
	SandboxErrors         int64 `json:"sandbox_errors,omitempty"`
	SandboxWallMS         int64 `json:"sandbox_wall_ms,omitempty"`
	SandboxCPUMS          int64 `json:"sandbox_cpu_ms,omitempty"`
	SandboxMicroGBSeconds int64 `json:"sandbox_micro_gb_seconds,omitempty"`
	// SandboxSessions counts containers (code interpreter sessions) that
	// ended, SandboxSessionMS and SandboxSessionMicroGBSeconds their
	// whole lives.
	SandboxSessions              int64 `json:"sandbox_sessions,omitempty"`
	SandboxSessionMS             int64 `json:"sandbox_session_ms,omitempty"`
	SandboxSessionMicroGBSeconds int64 `json:"sandbox_session_micro_gb_seconds,omitempty"`
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
	c.SandboxExecs += o.SandboxExecs
	c.SandboxErrors += o.SandboxErrors
	c.SandboxWallMS += o.SandboxWallMS
	c.SandboxCPUMS += o.SandboxCPUMS
	c.SandboxMicroGBSeconds += o.SandboxMicroGBSeconds
	c.SandboxSessions += o.SandboxSessions
	c.SandboxSessionMS += o.SandboxSessionMS
	c.SandboxSessionMicroGBSeconds += o.SandboxSessionMicroGBSeconds
}

// HasSandbox reports whether c counts any sandbox usage.
func (c Counters) HasSandbox() bool {
	return c.SandboxExecs != 0 || c.SandboxErrors != 0 || c.SandboxWallMS != 0 || c.SandboxCPUMS != 0 ||
		c.SandboxMicroGBSeconds != 0 || c.SandboxSessions != 0 || c.SandboxSessionMS != 0 || c.SandboxSessionMicroGBSeconds != 0
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

// DefaultDedupHorizon is how long in event time an applied event id is
// remembered when New is given no WithDedupHorizon. Duplicates arrive
// seconds apart (publish retries; JetStream's own window is 2 minutes and
// requests last at most minutes), so an hour is a wide margin, and it
// bounds the ids held to an hour of traffic: about 170 MB at 1000
// requests per second (47 bytes an id), where 48 hours would be 8 GB.
const DefaultDedupHorizon = time.Hour

// idGroup is the ids remembered at one minute, in the order they were
// applied.
type idGroup struct {
	minute int64
	ids    []ID
}

// Ledger is the folded state: minute buckets, the ids of the events applied
// within the dedup horizon, the clock (the newest event minute applied)
// and the last stream sequence folded.
type Ledger struct {
	minutes map[int64]minuteBuckets // unix minute → buckets
	order   []int64                 // the keys of minutes, ascending
	nb      int                     // buckets in all
	lastSeq uint64
	applied uint64

	// Deduplication: seen holds every remembered id; groups holds the same
	// ids by the minute they are remembered at, ascending (ids are always
	// remembered at the clock, so only the last group grows).
	horizon  time.Duration // 0: DefaultDedupHorizon; < 0: for ever
	seen     idSet
	groups   []idGroup
	clock    int64 // the newest event minute applied, when hasClock
	hasClock bool
	beyond   uint64 // events applied older than the horizon

	// cache of the last minute touched: events arrive roughly in order.
	lastMin int64
	lastMB  minuteBuckets
}

// Option configures a Ledger.
type Option func(*Ledger)

// WithDedupHorizon sets how long in event time an applied event id is
// remembered (see the package doc), rounded up to whole minutes; d <= 0
// remembers every id for ever.
func WithDedupHorizon(d time.Duration) Option {
	return func(l *Ledger) {
		if d <= 0 {
			l.horizon = -1
			return
		}
		l.horizon = (d + time.Minute - 1).Truncate(time.Minute)
	}
}

// New returns an empty ledger.
func New(opts ...Option) *Ledger {
	l := &Ledger{minutes: map[int64]minuteBuckets{}}
	for _, o := range opts {
		o(l)
	}
	return l
}

// DedupHorizon is how long in event time an applied id is remembered; 0
// for ever.
func (l *Ledger) DedupHorizon() time.Duration {
	switch {
	case l.horizon == 0:
		return DefaultDedupHorizon
	case l.horizon < 0:
		return 0
	}
	return l.horizon
}

// horizonMinutes is the horizon in minutes, or -1 for ever.
func (l *Ledger) horizonMinutes() int64 {
	if d := l.DedupHorizon(); d > 0 {
		return int64(d / time.Minute)
	}
	return -1
}

// Clock is the start of the newest event minute applied (the zero time
// before any).
func (l *Ledger) Clock() time.Time {
	if !l.hasClock {
		return time.Time{}
	}
	return time.Unix(l.clock*60, 0).UTC()
}

// BeyondHorizon is how many events were applied although their minute was
// older than the dedup horizon allows to check (see the package doc).
func (l *Ledger) BeyondHorizon() uint64 { return l.beyond }

// LastSeq is the last stream sequence folded (0 for none).
func (l *Ledger) LastSeq() uint64 { return l.lastSeq }

// Applied is how many events changed the ledger.
func (l *Ledger) Applied() uint64 { return l.applied }

// Seen is how many event ids the ledger remembers (those applied within the
// dedup horizon).
func (l *Ledger) Seen() int { return l.seen.len() }

// Len is the number of minute buckets.
func (l *Ledger) Len() int { return l.nb }

// HasSeen reports whether the event id was applied and is still
// remembered.
func (l *Ledger) HasSeen(eventID string) bool {
	return l.seen.has(EventID(eventID))
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
// UsageRecordedV1, V2 and V3 add one request to the bucket of their
// StartedAt minute (a V3 batch line to its batch bucket, priced with its
// model's batch discount instead of the endpoint's); UsageCorrectedV1 adds its deltas, and the cost of its token
// deltas, to the bucket of the corrected request (its At); SandboxUsageV1
// adds an exec or a session to its tenant's and key's sandbox bucket (see
// SandboxCounters and SandboxTime). Other event types are ignored. An event whose id was applied before (and is still
// remembered: see the package doc) is skipped whatever its sequence; so is
// a sequence at or below LastSeq (seq 0 means "no sequence": only the id is
// checked). LastSeq is advanced in every case.
func (l *Ledger) Apply(seq uint64, eventID string, ev events.Event, pb *PriceBook) bool {
	ok, _ := l.ApplyCost(seq, eventID, ev, pb)
	return ok
}

// ApplyCost is Apply that also returns the cost folded (for budget
// settlement): the request's cost, a correction's cost delta, or a sandbox
// exec's or session's cost.
func (l *Ledger) ApplyCost(seq uint64, eventID string, ev events.Event, pb *PriceBook) (applied bool, costNano int64) {
	if seq != 0 {
		if seq <= l.lastSeq {
			return false, 0
		}
		l.lastSeq = seq
	}
	var rec *events.UsageRecordedV1
	var cor *events.UsageCorrectedV1
	var sbx *events.SandboxUsageV1
	batch := false
	switch e := ev.(type) {
	case *events.UsageRecordedV3:
		if e != nil {
			rec, batch = &e.UsageRecordedV1, e.Batch
		}
	case events.UsageRecordedV3:
		rec, batch = &e.UsageRecordedV1, e.Batch
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
	case *events.SandboxUsageV1:
		sbx = e
	case events.SandboxUsageV1:
		sbx = &e
	}
	switch {
	case rec != nil:
		if eventID == "" {
			eventID = rec.RequestID
		}
		m := minuteOf(rec.StartedAt)
		if !l.markSeen(eventID, m) {
			return false, 0
		}
		c := recordCounters(rec, batch, pb)
		l.add(m, Dims{Tenant: rec.Tenant, KeyID: rec.KeyID, Model: rec.Model, Endpoint: rec.Endpoint, Batch: batch}, c)
		l.applied++
		return true, c.CostNano
	case cor != nil:
		if eventID == "" {
			eventID = cor.CorrectionID
		}
		m := minuteOf(cor.At)
		if !l.markSeen(eventID, m) {
			return false, 0
		}
		c := CorrectionCounters(cor, pb)
		l.add(m, Dims{Tenant: cor.Tenant, KeyID: cor.KeyID, Model: cor.Model, Endpoint: cor.Endpoint}, c)
		l.applied++
		return true, c.CostNano
	case sbx != nil:
		if eventID == "" {
			eventID = sbx.ID
		}
		m := minuteOf(SandboxTime(sbx))
		if !l.markSeen(eventID, m) {
			return false, 0
		}
		c := SandboxCounters(sbx, pb)
		l.add(m, SandboxDims(sbx), c)
		l.applied++
		return true, c.CostNano
	}
	return false, 0
}

// SandboxDims are the dimensions of a sandbox usage event's bucket.
func SandboxDims(u *events.SandboxUsageV1) Dims {
	return Dims{Tenant: u.Tenant, KeyID: u.KeyID, Endpoint: EndpointSandbox}
}

// SandboxTime is the time a sandbox usage event is counted at: an exec's
// start, like a request's; a container's end, when its session is billed
// (a container may live longer than the dedup horizon, and its event is
// published when it ends).
func SandboxTime(u *events.SandboxUsageV1) time.Time {
	if u.Kind == events.SandboxUsageContainer {
		return u.FinishedAt
	}
	return u.StartedAt
}

// SandboxCounters is what one sandbox usage event adds to its bucket: an
// exec its counts, seconds and gigabyte-seconds, costed at the sandbox
// price per gigabyte-second; a container one session, its life, costed at
// the price per session (PriceBook.SandboxCostNano). A container's own
// gigabyte-seconds are counted, not charged: its execs are.
func SandboxCounters(u *events.SandboxUsageV1, pb *PriceBook) Counters {
	gb := microGBSeconds(u.GBSeconds)
	at := SandboxTime(u)
	if u.Kind == events.SandboxUsageContainer {
		return Counters{SandboxSessions: 1, SandboxSessionMS: u.WallMS, SandboxSessionMicroGBSeconds: gb,
			CostNano: pb.SandboxCostNano(at, 0, 1)}
	}
	c := Counters{SandboxExecs: 1, SandboxWallMS: u.WallMS, SandboxCPUMS: u.CPUMS, SandboxMicroGBSeconds: gb,
		CostNano: pb.SandboxCostNano(at, gb, 0)}
	if u.Status != events.UsageStatusOK {
		c.SandboxErrors = 1
	}
	return c
}

// microGBSeconds is gigabyte-seconds in millionths, rounded: integers, so
// sums are exact and the same in any order.
func microGBSeconds(g float64) int64 { return int64(math.Round(g * 1e6)) }

// RecordCounters is what one recorded real-time request adds to its
// bucket.
func RecordCounters(u *events.UsageRecordedV1, pb *PriceBook) Counters {
	return recordCounters(u, false, pb)
}

// BatchRecordCounters is what one recorded batch line adds to its bucket.
func BatchRecordCounters(u *events.UsageRecordedV1, pb *PriceBook) Counters {
	return recordCounters(u, true, pb)
}

func recordCounters(u *events.UsageRecordedV1, batch bool, pb *PriceBook) Counters {
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
	if batch {
		cost, ok = pb.BatchCostNano(u.Model, u.StartedAt, u.PromptTokens, u.CachedPromptTokens, u.CompletionTokens)
	}
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

// markSeen reports whether eventID is new and, if so, remembers it for an
// event of the given minute, moving the clock and forgetting the minutes
// that fall out of the horizon.
func (l *Ledger) markSeen(eventID string, minute int64) bool {
	id := EventID(eventID)
	if l.seen.has(id) {
		return false
	}
	hm := l.horizonMinutes()
	switch {
	case !l.hasClock || minute > l.clock:
		l.clock, l.hasClock = minute, true
		l.prune(hm)
	case hm >= 0 && minute < l.clock-hm:
		l.beyond++
	}
	l.remember(id)
	return true
}

// remember adds id to seen and to the group of the clock's minute.
func (l *Ledger) remember(id ID) {
	l.seen.add(id)
	n := len(l.groups)
	if n == 0 || l.groups[n-1].minute != l.clock {
		if n > 0 {
			// The previous minute is closed: drop its append slack.
			if g := &l.groups[n-1]; cap(g.ids)-len(g.ids) > len(g.ids)/8 {
				g.ids = slices.Clone(g.ids)
			}
		}
		l.groups = append(l.groups, idGroup{minute: l.clock, ids: make([]ID, 0, 64)})
		n++
	}
	g := &l.groups[n-1]
	g.ids = append(g.ids, id)
}

// prune forgets the ids remembered at minutes older than the clock minus
// the horizon (hm minutes, -1 for ever).
func (l *Ledger) prune(hm int64) {
	if hm < 0 || !l.hasClock {
		return
	}
	cut := l.clock - hm
	k := 0
	for k < len(l.groups) && l.groups[k].minute < cut {
		for _, id := range l.groups[k].ids {
			l.seen.del(id)
		}
		k++
	}
	if k > 0 {
		l.groups = slices.Delete(l.groups, 0, k)
		l.seen.shrink()
	}
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
// with the same LastSeq, Applied, BeyondHorizon, clock and dedup horizon.
// The remembered ids are copied only when withSeen is true.
func (l *Ledger) Clone(from, to time.Time, scope string, withSeen bool) *Ledger {
	c := New()
	c.lastSeq, c.applied = l.lastSeq, l.applied
	c.horizon, c.clock, c.hasClock, c.beyond = l.horizon, l.clock, l.hasClock, l.beyond
	for _, m := range l.minuteRange(from, to) {
		for d, p := range l.minutes[m] {
			if scope == "" || d.Tenant == scope {
				c.add(m, d, *p)
			}
		}
	}
	if withSeen {
		c.seen = idSet{slots: slices.Clone(l.seen.slots), n: l.seen.n, zero: l.seen.zero}
		c.groups = make([]idGroup, len(l.groups))
		for i, g := range l.groups {
			c.groups[i] = idGroup{minute: g.minute, ids: slices.Clone(g.ids)}
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

// Equal reports whether two ledgers hold the same buckets, remembered ids
// (each at the same minute), clock, last sequence, applied and
// beyond-horizon counts. Two ledgers that folded the same stream with the
// same dedup horizon are Equal, however each was built (from scratch, from a
// snapshot, or by Clone with the seen ids).
func Equal(a, b *Ledger) bool {
	if a.lastSeq != b.lastSeq || a.applied != b.applied || a.nb != b.nb || a.seen.len() != b.seen.len() ||
		a.beyond != b.beyond || a.hasClock != b.hasClock || a.clock != b.clock || len(a.groups) != len(b.groups) ||
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
	for i, g := range a.groups {
		h := b.groups[i]
		if g.minute != h.minute || len(g.ids) != len(h.ids) {
			return false
		}
		if slices.Equal(g.ids, h.ids) {
			continue
		}
		set := make(map[ID]struct{}, len(h.ids))
		for _, id := range h.ids {
			set[id] = struct{}{}
		}
		for _, id := range g.ids {
			if _, ok := set[id]; !ok {
				return false
			}
		}
	}
	return true
}
