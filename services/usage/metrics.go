package usage

import (
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	folded    *prometheus.CounterVec
	applied   prometheus.Counter
	duplicate prometheus.Counter
	ignored   prometheus.Counter
	invalid   prometheus.Counter
	foldedSeq prometheus.Gauge
	// dedup: the ids the ledger remembers, and the events applied although
	// older than its dedup horizon.
	dedupIDs      prometheus.Gauge
	beyondHorizon prometheus.Counter
	lag           prometheus.Gauge
	snapshotDur   prometheus.Histogram
	snapshotB     prometheus.Gauge
	snapshotErr   prometheus.Counter
	audits        *prometheus.CounterVec
	auditDur      prometheus.Histogram
	settle        *prometheus.CounterVec
	settleOK      prometheus.Counter
	settleSkip    prometheus.Counter
	settleErr     prometheus.Counter
	alerts        prometheus.Counter
	queries       *prometheus.CounterVec
	// tokens and cost are what the fold applied, per tenant and model
	// (tenants and models are registered by operators: bounded).
	tokens *prometheus.CounterVec
	cost   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		folded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_usage_events_folded_total",
			Help: "USAGE stream messages folded, by result: applied, duplicate (event id seen before), ignored (not a usage event), invalid.",
		}, []string{"result"}),
		foldedSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aiforge_usage_folded_sequence", Help: "The last USAGE stream sequence folded into the ledger.",
		}),
		dedupIDs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aiforge_usage_dedup_ids",
			Help: "Event ids the ledger remembers to skip duplicates (those applied within the dedup horizon).",
		}),
		beyondHorizon: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aiforge_usage_dedup_beyond_horizon_total",
			Help: "Events applied although their time was older than the ledger's newest event minus the dedup horizon: an earlier copy, if any, could not be checked.",
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aiforge_usage_fold_lag_events", Help: "USAGE stream messages not folded yet (stream last sequence minus folded sequence).",
		}),
		snapshotDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "aiforge_usage_snapshot_duration_seconds", Help: "Time to save a ledger snapshot, settlement barrier included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		snapshotB: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aiforge_usage_snapshot_bytes", Help: "Size of the last ledger snapshot.",
		}),
		snapshotErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aiforge_usage_snapshot_errors_total", Help: "Ledger snapshots that failed to save.",
		}),
		audits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_usage_audits_total", Help: "Audits run, by result: clean, differences, error.",
		}, []string{"result"}),
		auditDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "aiforge_usage_audit_duration_seconds", Help: "Time to replay and compare one audit.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		settle: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_usage_settlements_total",
			Help: "Budget entry settlements, by result: ok, skipped (already settled), error (retried).",
		}, []string{"result"}),
		alerts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aiforge_usage_budget_alerts_total", Help: "Soft budget alerts published.",
		}),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_usage_queries_total", Help: "Queries answered, by op and status.",
		}, []string{"op", "status"}),
	}
	m.applied = m.folded.WithLabelValues("applied")
	m.duplicate = m.folded.WithLabelValues("duplicate")
	m.ignored = m.folded.WithLabelValues("ignored")
	m.invalid = m.folded.WithLabelValues("invalid")
	m.settleOK = m.settle.WithLabelValues("ok")
	m.settleSkip = m.settle.WithLabelValues("skipped")
	m.settleErr = m.settle.WithLabelValues("error")
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aiforge_usage_tokens_total",
		Help: "Tokens folded into the ledger, by tenant, model and type (input, output). Counted as folded: after a restart the events since the last snapshot are folded, and counted, again.",
	}, []string{"tenant", "model", "type"})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aiforge_usage_cost_usd_total",
		Help: "Cost folded into the ledger in USD at the price book in force, by tenant and model (\"sandbox\" for code execution). Counted as folded, like aiforge_usage_tokens_total.",
	}, []string{"tenant", "model"})
	for _, c := range []prometheus.Collector{m.folded, m.foldedSeq, m.dedupIDs, m.beyondHorizon, m.lag, m.snapshotDur, m.snapshotB, m.snapshotErr,
		m.audits, m.auditDur, m.settle, m.alerts, m.queries, m.tokens, m.cost} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// spent counts an applied event's tokens and cost per tenant and model.
func (m *metrics) spent(ev events.Event, costNano int64) {
	var u *events.UsageRecordedV1
	switch e := ev.(type) {
	case *events.UsageRecordedV1:
		u = e
	case *events.UsageRecordedV2:
		u = &e.UsageRecordedV1
	case *events.UsageRecordedV3:
		u = &e.UsageRecordedV1
	case *events.UsageRecordedV4:
		u = &e.UsageRecordedV1
	case *events.SandboxUsageV1:
		if costNano != 0 {
			m.cost.WithLabelValues(e.Tenant, "sandbox").Add(float64(costNano) / 1e9)
		}
		return
	default:
		return // corrections: their deltas are in the ledger, not here
	}
	if u.PromptTokens > 0 {
		m.tokens.WithLabelValues(u.Tenant, u.Model, "input").Add(float64(u.PromptTokens))
	}
	if u.CompletionTokens > 0 {
		m.tokens.WithLabelValues(u.Tenant, u.Model, "output").Add(float64(u.CompletionTokens))
	}
	if costNano > 0 {
		m.cost.WithLabelValues(u.Tenant, u.Model).Add(float64(costNano) / 1e9)
	}
}
