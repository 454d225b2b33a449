package worker

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/bridge"
	"github.com/aiforge/aiforge/services/worker/internal/engine"
	"github.com/aiforge/aiforge/services/worker/internal/engineproc"
)

// Histogram buckets after vLLM's (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	itlBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
		0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	// coldStartBuckets span a small model's start on a warm page cache
	// (tenths of a second) to a large one's load from disk (minutes).
	coldStartBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600}
	e2eBuckets       = []float64{0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
		20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// Metrics are the Prometheus metrics of every worker of a process, named
// after vLLM's and labelled with the served model name. Create one with
// NewMetrics and share it.
type Metrics struct {
	requests   *prometheus.CounterVec
	errors     *prometheus.CounterVec
	ttft       *prometheus.HistogramVec
	itl        *prometheus.HistogramVec
	e2e        *prometheus.HistogramVec
	prompt     *prometheus.CounterVec
	generation *prometheus.CounterVec
	coldStart  *prometheus.HistogramVec

	runningDesc      *prometheus.Desc
	waitingDesc      *prometheus.Desc
	batchRunningDesc *prometheus.Desc
	batchWaitingDesc *prometheus.Desc

	engineDescs engineDescs

	mu      sync.Mutex
	servers map[*bridge.Server]string // bridge server -> served model
	engines map[*engineproc.Supervisor]trackedEngine
}

// NewMetrics creates the metrics and registers them on reg (never on the
// global registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("worker: NewMetrics needs a registerer")
	}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_worker_requests_total",
			Help: "Requests finished by workers, by endpoint and outcome (ok, error, canceled).",
		}, []string{"model", "endpoint", "status"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_worker_request_errors_total",
			Help: "Failed requests by error code.",
		}, []string{"model", "code"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "aiforge_worker_time_to_first_token_seconds",
			Help:    "Time from the worker receiving a streamed request to its first chunk.",
			Buckets: ttftBuckets,
		}, []string{"model"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "aiforge_worker_inter_token_latency_seconds",
			Help:    "Time between consecutive chunks of a streamed response.",
			Buckets: itlBuckets,
		}, []string{"model"}),
		e2e: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "aiforge_worker_e2e_request_latency_seconds",
			Help:    "Time from the worker receiving a request to its last frame.",
			Buckets: e2eBuckets,
		}, []string{"model"}),
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_worker_prompt_tokens_total",
			Help: "Prompt tokens processed.",
		}, []string{"model"}),
		generation: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_worker_generation_tokens_total",
			Help: "Generation tokens produced.",
		}, []string{"model"}),
		coldStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "aiforge_engine_cold_start_seconds",
			Help:    "Time from a request waking a supervised engine scaled to zero (idle_stop) to the engine's first healthy probe.",
			Buckets: coldStartBuckets,
		}, engineLabels),
		runningDesc: prometheus.NewDesc("aiforge_worker_requests_running",
			"Requests being handled by an engine.", []string{"model"}, nil),
		waitingDesc: prometheus.NewDesc("aiforge_worker_requests_waiting",
			"Requests waiting for a concurrency slot (the queue depth).", []string{"model"}, nil),
		batchRunningDesc: prometheus.NewDesc("aiforge_worker_batch_requests_running",
			"Batch lines holding a concurrency slot (part of aiforge_worker_requests_running).", []string{"model"}, nil),
		batchWaitingDesc: prometheus.NewDesc("aiforge_worker_batch_requests_waiting",
			"Batch lines waiting for a concurrency slot, behind every waiting real-time request (part of aiforge_worker_requests_waiting).", []string{"model"}, nil),
		servers:     make(map[*bridge.Server]string),
		engines:     make(map[*engineproc.Supervisor]trackedEngine),
		engineDescs: newEngineDescs(),
	}
	for _, c := range []prometheus.Collector{m.requests, m.errors, m.ttft, m.itl, m.e2e, m.prompt, m.generation, m.coldStart, gauges{m}, engineCollector{m}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("worker: register metrics: %w", err)
		}
	}
	return m, nil
}

// track adds a bridge server to the running/waiting gauges of model.
func (m *Metrics) track(model string, s *bridge.Server) {
	m.mu.Lock()
	m.servers[s] = model
	m.mu.Unlock()
}

// untrack removes a bridge server from the gauges.
func (m *Metrics) untrack(s *bridge.Server) {
	m.mu.Lock()
	delete(m.servers, s)
	m.mu.Unlock()
}

// gauges exports running and waiting from the bridge servers themselves,
// summed per model, so they can never drift from the truth.
type gauges struct{ m *Metrics }

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.m.runningDesc
	ch <- g.m.waitingDesc
	ch <- g.m.batchRunningDesc
	ch <- g.m.batchWaitingDesc
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	type rw struct{ running, waiting, batchRunning, batchWaiting int64 }
	per := map[string]rw{}
	g.m.mu.Lock()
	for s, model := range g.m.servers {
		v := per[model]
		v.running += s.Running()
		v.waiting += s.Waiting()
		br, bw := s.Slots(bridge.PriorityBatch)
		v.batchRunning += br
		v.batchWaiting += bw
		per[model] = v
	}
	g.m.mu.Unlock()
	for model, v := range per {
		ch <- prometheus.MustNewConstMetric(g.m.runningDesc, prometheus.GaugeValue, float64(v.running), model)
		ch <- prometheus.MustNewConstMetric(g.m.waitingDesc, prometheus.GaugeValue, float64(v.waiting), model)
		ch <- prometheus.MustNewConstMetric(g.m.batchRunningDesc, prometheus.GaugeValue, float64(v.batchRunning), model)
		ch <- prometheus.MustNewConstMetric(g.m.batchWaitingDesc, prometheus.GaugeValue, float64(v.batchWaiting), model)
	}
}

// modelMetrics are the metrics of one served model with their labels
// resolved once, so the hot path does no label lookups.
type modelMetrics struct {
	m          *Metrics
	model      string
	requests   [engine.NumEndpoints][engine.NumOutcomes]prometheus.Counter
	ttft       prometheus.Observer
	itl        prometheus.Observer
	e2e        prometheus.Observer
	prompt     prometheus.Counter
	generation prometheus.Counter
}

func (m *Metrics) forModel(model string) *modelMetrics {
	mm := &modelMetrics{
		m:          m,
		model:      model,
		ttft:       m.ttft.WithLabelValues(model),
		itl:        m.itl.WithLabelValues(model),
		e2e:        m.e2e.WithLabelValues(model),
		prompt:     m.prompt.WithLabelValues(model),
		generation: m.generation.WithLabelValues(model),
	}
	for ep := range engine.NumEndpoints {
		for o := range engine.NumOutcomes {
			mm.requests[ep][o] = m.requests.WithLabelValues(model, ep.String(), o.String())
		}
	}
	return mm
}

func (mm *modelMetrics) errorCode(code string) {
	mm.m.errors.WithLabelValues(mm.model, code).Inc()
}
