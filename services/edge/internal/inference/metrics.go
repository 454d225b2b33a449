package inference

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics follow the OpenTelemetry GenAI semantic conventions and vLLM's
// names where one exists (time to first token, inter-token latency), in
// Prometheus form, labelled by the served model name.
type Metrics struct {
	requests  *prometheus.CounterVec
	errors    *prometheus.CounterVec
	inFlight  *prometheus.GaugeVec
	duration  *prometheus.HistogramVec
	ttft      *prometheus.HistogramVec
	itl       *prometheus.HistogramVec
	failovers *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	cooldowns *prometheus.CounterVec
	guard     *guardMetrics
}

var (
	latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	itlBuckets     = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 10}
)

func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_edge_requests_total", Help: "Requests answered by the edge, by model, endpoint and HTTP status.",
		}, []string{"model", "endpoint", "status"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_edge_request_errors_total", Help: "Requests that ended in an error, by model and error code.",
		}, []string{"model", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aiforge_edge_requests_in_flight", Help: "Requests in progress at the edge.",
		}, []string{"model"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aiforge_edge_request_duration_seconds", Help: "End-to-end request latency seen by the edge (gen_ai.server.request.duration).",
			Buckets: latencyBuckets,
		}, []string{"model", "endpoint"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aiforge_edge_time_to_first_token_seconds", Help: "Time to first streamed token seen by the edge (gen_ai.server.time_to_first_token).",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aiforge_edge_inter_token_latency_seconds", Help: "Time between streamed chunks seen by the edge (gen_ai.server.time_per_output_token).",
			Buckets: itlBuckets,
		}, []string{"model"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_edge_failovers_total", Help: "Requests retried on another worker replica after an engine failure before the first token.",
		}, []string{"model"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_edge_fallbacks_total", Help: "Requests answered by one of the requested model's fallbacks, by requested and served model.",
		}, []string{"model", "served"}),
		cooldowns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aiforge_edge_engine_cooldowns_total", Help: "Times this edge put an engine in cooldown after consecutive failures, by model and engine id.",
		}, []string{"model", "engine"}),
	}
	m.guard = newGuardMetrics()
	for _, c := range append([]prometheus.Collector{m.requests, m.errors, m.inFlight, m.duration, m.ttft, m.itl, m.failovers, m.fallbacks, m.cooldowns}, m.guard.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
