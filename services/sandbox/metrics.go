package sandbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/services/sandbox/runtime"
)

type metrics struct {
	requests   *prometheus.CounterVec
	execs      *prometheus.CounterVec
	execTime   *prometheus.HistogramVec
	containers prometheus.Gauge
	ended      *prometheus.CounterVec
	replaced   *prometheus.CounterVec
	usageFail  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, stats func() runtime.PoolStats) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_sandbox_requests_total", Help: "Sandbox calls answered, by operation and HTTP status.",
		}, []string{"op", "status"}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_sandbox_execs_total", Help: "Execs run, by language and outcome (ok, or the error code: exec_timeout, memory_limit_exceeded, ...).",
		}, []string{"language", "status"}),
		execTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aiforge_sandbox_exec_duration_seconds", Help: "Wall time of an exec inside its sandbox, by language.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"language"}),
		containers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aiforge_sandbox_containers", Help: "Live containers on this replica.",
		}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_sandbox_containers_ended_total", Help: "Containers ended, by status: deleted or expired.",
		}, []string{"status"}),
		replaced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_sandbox_sandboxes_replaced_total", Help: "Sandboxes of a container replaced by a fresh one after they died, by the reason (the error code).",
		}, []string{"reason"}),
		usageFail: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aiforge_sandbox_usage_publish_failures_total", Help: "Usage events that could not be published after retries (logged).",
		}),
	}
	live := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "aiforge_sandbox_sandboxes_live", Help: "Sandboxes running on this replica: warm, in use and starting.",
	}, func() float64 { return float64(stats().Live) })
	warm := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "aiforge_sandbox_sandboxes_warm", Help: "Warm sandboxes ready in the pool, all classes.",
	}, func() float64 {
		n := 0
		for _, w := range stats().Warm {
			n += w
		}
		return float64(n)
	})
	started := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "aiforge_sandbox_sandboxes_started_total", Help: "Sandboxes started (warm pool refills and cold starts).",
	}, func() float64 { return float64(stats().Started) })
	cold := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "aiforge_sandbox_cold_starts_total", Help: "Sandboxes started for a call that found none warm.",
	}, func() float64 { return float64(stats().ColdStarts) })
	for _, c := range []prometheus.Collector{m.requests, m.execs, m.execTime, m.containers, m.ended, m.replaced, m.usageFail, live, warm, started, cold} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
