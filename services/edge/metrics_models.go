package edge

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/directory"
	"github.com/aiforge/aiforge/pkg/registry"
)

// modelMetrics exports, at each scrape, what the edge's directory knows of
// the registered models' worker replicas: how many are in each state (a
// model with no serving worker answers 503 model_unavailable), their slots
// and what holds or waits for them. Read from the live view, they cannot
// drift; every edge replica reports the same values (aggregate with max).
type modelMetrics struct {
	view atomic.Pointer[directory.View]

	workers, slots, inFlight, queued *prometheus.Desc
}

// workerStates are the states reported for every model, zero included,
// so that "no serving worker" is a value, not a missing series.
var workerStates = []string{registry.WorkerServing, registry.WorkerStarting, registry.WorkerDraining,
	registry.WorkerUnreachable, registry.WorkerUnhealthy, registry.WorkerUnauthorized, registry.WorkerMisnamed}

func newModelMetrics(reg prometheus.Registerer) (*modelMetrics, error) {
	m := &modelMetrics{
		workers: prometheus.NewDesc("aiforge_edge_model_workers",
			"Live worker replicas of a registered model, by state (serving: answering requests).", []string{"model", "state"}, nil),
		slots: prometheus.NewDesc("aiforge_edge_model_slots",
			"Concurrency slots of a model's serving worker replicas.", []string{"model"}, nil),
		inFlight: prometheus.NewDesc("aiforge_edge_model_slots_in_use",
			"Requests holding a slot on a model's worker replicas, as they last reported.", []string{"model"}, nil),
		queued: prometheus.NewDesc("aiforge_edge_model_requests_queued",
			"Requests waiting for a slot on a model's worker replicas, as they last reported.", []string{"model"}, nil),
	}
	return m, reg.Register(m)
}

func (m *modelMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.workers
	ch <- m.slots
	ch <- m.inFlight
	ch <- m.queued
}

func (m *modelMetrics) Collect(ch chan<- prometheus.Metric) {
	v := m.view.Load()
	if v == nil || !v.Synced() {
		return
	}
	for _, model := range v.ServedModels() {
		count := make(map[string]int, len(workerStates))
		var slots, inFlight, queued int
		for _, w := range v.Workers(model.Name) {
			count[w.State]++
			if w.State == registry.WorkerServing {
				slots += w.MaxConcurrency
			}
			inFlight += w.InFlight
			queued += w.Queued
		}
		for _, st := range workerStates {
			ch <- prometheus.MustNewConstMetric(m.workers, prometheus.GaugeValue, float64(count[st]), model.Name, st)
		}
		ch <- prometheus.MustNewConstMetric(m.slots, prometheus.GaugeValue, float64(slots), model.Name)
		ch <- prometheus.MustNewConstMetric(m.inFlight, prometheus.GaugeValue, float64(inFlight), model.Name)
		ch <- prometheus.MustNewConstMetric(m.queued, prometheus.GaugeValue, float64(queued), model.Name)
	}
}
