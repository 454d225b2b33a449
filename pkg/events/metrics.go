package events

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ConsumerMetrics are the Prometheus metrics of a process's consumers,
// labelled by durable ("consumer"): what became of each delivery, the
// backlog behind the last one, and how long events waited. One value
// serves every consumer of a process; NewConsumerMetrics on a registry that
// has them already returns those.
type ConsumerMetrics struct {
	messages *prometheus.CounterVec
	pending  *prometheus.GaugeVec
	lag      *prometheus.HistogramVec
}

// Consumer outcomes (label "outcome" of aiforge_consumer_messages_total).
const (
	OutcomeHandled      = "handled"
	OutcomeRetried      = "retried"
	OutcomeDeadLettered = "dead_lettered"
	OutcomeUnknown      = "unknown"
	OutcomeInvalid      = "invalid"
)

// lagBuckets span a busy bus (milliseconds) to a backlog of hours.
var lagBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200}

// NewConsumerMetrics registers the consumer metrics with reg, or returns
// the ones registered there already.
func NewConsumerMetrics(reg prometheus.Registerer) (*ConsumerMetrics, error) {
	m := &ConsumerMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_consumer_messages_total",
			Help: "Deliveries of a durable consumer by outcome: handled (acked), retried (handler failed, redelivered later), dead_lettered (given up on), unknown (type not known, acked), invalid (dead-lettered unread).",
		}, []string{"consumer", "outcome"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aiforge_consumer_pending_messages",
			Help: "Messages of the stream not yet delivered to the consumer, as of its last delivery (the consumer's backlog).",
		}, []string{"consumer"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "aiforge_consumer_lag_seconds",
			Help:    "Time from an event's publication (its envelope time) to the start of its handling, per delivery.",
			Buckets: lagBuckets,
		}, []string{"consumer"}),
	}
	var err error
	if m.messages, err = register(reg, m.messages); err != nil {
		return nil, err
	}
	if m.pending, err = register(reg, m.pending); err != nil {
		return nil, err
	}
	if m.lag, err = register(reg, m.lag); err != nil {
		return nil, err
	}
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m *ConsumerMetrics) outcome(durable, outcome string) {
	if m != nil {
		m.messages.WithLabelValues(durable, outcome).Inc()
	}
}

func (m *ConsumerMetrics) delivered(durable string, pending uint64, published, now time.Time) {
	if m == nil {
		return
	}
	m.pending.WithLabelValues(durable).Set(float64(pending))
	if !published.IsZero() {
		m.lag.WithLabelValues(durable).Observe(max(now.Sub(published).Seconds(), 0))
	}
}
