package batch

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	dispatched *prometheus.CounterVec
	completed  *prometheus.CounterVec
	failed     *prometheus.CounterVec
	retried    *prometheus.CounterVec
	waiting    *prometheus.GaugeVec
	wait       *prometheus.HistogramVec
	duration   *prometheus.HistogramVec
	finished   *prometheus.CounterVec
	webhooks   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_batch_lines_dispatched_total", Help: "Batch lines sent to a worker (every attempt), by model.",
		}, []string{"model"}),
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_batch_lines_completed_total", Help: "Batch lines answered 2xx (they go to the output file), by model.",
		}, []string{"model"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_batch_lines_failed_total", Help: "Batch lines that ended in the error file after running, by model.",
		}, []string{"model"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_batch_lines_retried_total", Help: "Batch line attempts that failed retryably and were handed back for a later retry, by model.",
		}, []string{"model"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aiforge_batch_queue_waiting_lines", Help: "Batch lines taken from the stream and waiting for admission, by model.",
		}, []string{"model"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aiforge_batch_dispatch_wait_seconds", Help: "Time from a line taken from the stream to its dispatch to a worker, by model.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"model"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aiforge_batch_line_duration_seconds", Help: "Time from a line's dispatch to its answer, by model.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"model"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_batch_batches_finished_total", Help: "Batches that reached a final status, by status.",
		}, []string{"status"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_batch_webhooks_total", Help: "Webhook deliveries, by result: delivered, failed, skipped.",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.dispatched, m.completed, m.failed, m.retried, m.waiting, m.wait, m.duration, m.finished, m.webhooks} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
