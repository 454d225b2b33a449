// Package usage folds the USAGE stream into an in-memory ledger of spend
// buckets, settles each request's cost into the budget entries admission
// reads, and answers usage reports (OpenAI's organization usage and costs
// API), ledger dumps and audits over core NATS. The agent code sandboxes'
// usage (events.SandboxUsageV1) is folded the same way into sandbox
// buckets, and settled when operators price it (registry.SandboxPriceModel).
//
// Exactly once comes from the checkpoint, not from acks: the folder reads
// the stream in order with an ordered (ephemeral) consumer starting after
// the last sequence of the newest snapshot, the ledger remembers the event
// ids it applied, and snapshots are written only after every budget
// settlement up to their sequence is done (settlement is idempotent per
// budget entry by stream sequence). A crash between folding and
// snapshotting therefore re-folds from the checkpoint and counts nothing
// twice.
//
// Event ids are remembered for DedupHorizon (default 1h) of event time, not
// for ever (see pkg/ledger): duplicates come only from retried publishes,
// seconds apart, and from corrections or replays sent again with the same
// id, so memory and snapshots stay bounded under steady load (about the ids
// of DedupHorizon of traffic) instead of growing with every request served.
// The horizon runs on the ledger's own clock (the newest event minute
// folded), so the audit's replay and a restart from a snapshot forget the
// same ids. An event older than the horizon is still applied when its id is
// not remembered, and counted in aiforge_usage_dedup_beyond_horizon_total:
// a copy of it republished more than DedupHorizon after its original would
// count twice. aiforge_usage_dedup_ids is how many ids are remembered.
//
// Queries are core NATS requests on events.UsageQuery (queue group
// "usage"), a JSON query.UsageRequest {"op","scope","query","from","to"}:
//
//   - completions, embeddings, costs: query is the raw URL query string of
//     OpenAI's GET /v1/organization/usage/completions, .../embeddings or
//     /v1/organization/costs; the reply is OpenAI's page body.
//   - audit: from (required) and to, unix seconds; the reply is an
//     query.AuditReply.
//   - ledger: the minute buckets whose minute starts in [from, to), a
//     query.LedgerReply.
//   - prices: the price histories and discounts in force, a query.PricesReply.
//
// scope, when set, restricts any op to one tenant. A failure is an
// query.ErrorReply: OpenAI's {"error":{...}} plus "status", the HTTP status to
// answer with. Every reply carries the header Aiforge-Usage-Reply; use
// Request, which waits for it (the USAGE stream also answers, see Request).
package usage

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ledger"
)

// Defaults.
const (
	DefaultSnapshotBucket      = "aiforge_ledgers"
	DefaultSnapshotObject      = "ledger"
	DefaultSnapshotEvery       = 100_000
	DefaultSnapshotInterval    = 30 * time.Second
	DefaultFetchBatch          = 8192
	DefaultLateMargin          = 15 * time.Minute
	DefaultQueueGroup          = "usage"
	DefaultSource              = "usage"
	DefaultSettleConcurrency   = 8
	DefaultSettleInterval      = 50 * time.Millisecond
	DefaultSettleBatch         = 4096
	DefaultMaxConcurrentQuery  = 8
	DefaultShutdownTimeout     = 30 * time.Second
	DefaultAuditStallTimeout   = 10 * time.Second
	defaultIdleWait            = 100 * time.Millisecond
	snapshotBucketDescription  = "usage ledger snapshots: buckets, seen event ids and the last folded USAGE sequence"
	maxQueryRequestBytes       = 64 << 10
	defaultLedgerDumpMaxBucket = 200_000
	// DefaultDedupHorizon is how long in event time the ledger remembers
	// an applied event id.
	DefaultDedupHorizon = ledger.DefaultDedupHorizon
)

// Config configures the usage service.
type Config struct {
	// Streams are the stream options passed to events.Ensure at start.
	Streams events.StreamOptions
	// SnapshotBucket is the JetStream Object Store bucket of ledger
	// snapshots, created at start. Default "aiforge_ledgers".
	SnapshotBucket string
	// SnapshotObject is the object name of the snapshot. Default "ledger",
	// or "ledger-unsettled" with DisableSettlement: a replica that does not
	// settle must not replace the settling replica's checkpoint (whose
	// sequence promises that everything before it is settled).
	SnapshotObject string
	// SnapshotEvery saves a snapshot after this many stream messages
	// folded. Default 100000.
	SnapshotEvery int
	// SnapshotInterval saves a snapshot this long after the last one when
	// anything was folded since. Default 30s.
	SnapshotInterval time.Duration
	// FetchBatch is how many messages the folder keeps in flight from the
	// server. Default 8192.
	FetchBatch int
	// LateMargin is how far before an audit's from the replay starts (in
	// stream time), for events stored after their bucket's minute.
	// Default 15m.
	LateMargin time.Duration
	// DedupHorizon is how long in event time an applied event id is
	// remembered, so that a copy of the event is skipped (rounded up to
	// whole minutes; see the package doc). Memory, and every snapshot,
	// hold the ids of DedupHorizon of traffic: about 47 bytes of memory and
	// 22 bytes of snapshot each, so at 1000 requests/s the default hour
	// keeps 3.6M ids (~170 MB; 48h would be 173M, ~8 GB). Default 1h.
	DedupHorizon time.Duration
	// Discounts multiplies the cost of an endpoint's real-time requests
	// (for example {"embeddings": 0.5}); endpoints not listed pay full
	// price. Batch lines (UsageRecordedV3 with batch) pay their model's
	// batch factor instead (registry.Price.BatchDiscount, default half).
	Discounts map[string]float64
	// QueueGroup is the queue group of the query responder, so replicas
	// share queries. Default "usage".
	QueueGroup string
	// Source is the ce-source of the budget alerts published. Default
	// "usage".
	Source string
	// DisableSettlement turns budget settlement off. Settlement coalesces
	// the events of a batch per budget entry, which is exact with one
	// settling replica: run further replicas (which still fold and answer
	// queries) with DisableSettlement.
	DisableSettlement bool
	// SettleV1 also settles the cost of UsageRecordedV1 events (they carry
	// no reservations). Off by default: only V2 events are settled.
	SettleV1 bool
	// SettleConcurrency is how many budget entries are settled at once.
	// Default 8.
	SettleConcurrency int
	// SettleInterval is the longest a folded event waits before its
	// settlement starts. Default 50ms.
	SettleInterval time.Duration
	// SettleBatch hands settlement over after this many events even
	// sooner. Default 4096.
	SettleBatch int
	// MaxConcurrentQueries bounds the queries answered at once (audits run
	// one at a time). Default 8.
	MaxConcurrentQueries int
	// ShutdownTimeout bounds the final settlement and snapshot. Default 30s.
	ShutdownTimeout time.Duration
	// AuditStallTimeout fails an audit whose replay gets no message for
	// this long. Default 10s.
	AuditStallTimeout time.Duration
}

// Validate reports every problem of c at once; it never mutates c.
func (c Config) Validate() error {
	var errs []error
	for _, n := range []struct {
		name string
		v    int
	}{
		{"SnapshotEvery", c.SnapshotEvery}, {"FetchBatch", c.FetchBatch}, {"SettleConcurrency", c.SettleConcurrency},
		{"SettleBatch", c.SettleBatch}, {"MaxConcurrentQueries", c.MaxConcurrentQueries}, {"Streams.Replicas", c.Streams.Replicas},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", n.name))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"SnapshotInterval", c.SnapshotInterval}, {"LateMargin", c.LateMargin}, {"SettleInterval", c.SettleInterval},
		{"ShutdownTimeout", c.ShutdownTimeout}, {"AuditStallTimeout", c.AuditStallTimeout},
		{"DedupHorizon", c.DedupHorizon},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", d.name))
		}
	}
	for e, f := range c.Discounts {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			errs = append(errs, fmt.Errorf("the value of Discounts[%q] = %v must be a finite factor >= 0", e, f))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("usage config: %w", err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	if c.SnapshotBucket == "" {
		c.SnapshotBucket = DefaultSnapshotBucket
	}
	if c.SnapshotObject == "" {
		c.SnapshotObject = DefaultSnapshotObject
		if c.DisableSettlement {
			c.SnapshotObject = DefaultSnapshotObject + "-unsettled"
		}
	}
	if c.QueueGroup == "" {
		c.QueueGroup = DefaultQueueGroup
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	def(&c.SnapshotEvery, DefaultSnapshotEvery)
	def(&c.FetchBatch, DefaultFetchBatch)
	def(&c.SettleConcurrency, DefaultSettleConcurrency)
	def(&c.SettleBatch, DefaultSettleBatch)
	def(&c.MaxConcurrentQueries, DefaultMaxConcurrentQuery)
	defD(&c.SnapshotInterval, DefaultSnapshotInterval)
	defD(&c.LateMargin, DefaultLateMargin)
	defD(&c.SettleInterval, DefaultSettleInterval)
	defD(&c.ShutdownTimeout, DefaultShutdownTimeout)
	defD(&c.AuditStallTimeout, DefaultAuditStallTimeout)
	defD(&c.DedupHorizon, DefaultDedupHorizon)
	return c
}

// Deps are the service's collaborators.
type Deps struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Logger *slog.Logger
	// Registerer receives the service's metrics (never the global one).
	Registerer prometheus.Registerer
	// Now is the clock of reports (the default end_time); default
	// time.Now.
	Now func() time.Time
}

func (d Deps) validate() error {
	var errs []error
	if d.NC == nil {
		errs = append(errs, errors.New("Deps.NC is required"))
	}
	if d.JS == nil {
		errs = append(errs, errors.New("Deps.JS is required"))
	}
	if d.Registerer == nil {
		errs = append(errs, errors.New("Deps.Registerer is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("usage deps: %w", err)
	}
	return nil
}
