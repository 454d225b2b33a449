package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/services/worker/internal/engineproc"
)

// trackedEngine is a supervised engine process exported by the metrics.
type trackedEngine struct {
	model, engineID string
}

// trackEngine adds a supervised engine to the engine metrics.
func (m *Metrics) trackEngine(model, engineID string, p *engineproc.Supervisor) {
	m.mu.Lock()
	m.engines[p] = trackedEngine{model, engineID}
	m.mu.Unlock()
}

func (m *Metrics) untrackEngine(p *engineproc.Supervisor) {
	m.mu.Lock()
	delete(m.engines, p)
	m.mu.Unlock()
}

var engineLabels = []string{"model", "engine", "engine_id"}

// enginePhases are the values of aiforge_engine_state's state label.
var enginePhases = []string{engineproc.PhaseStarting, engineproc.PhaseServing, engineproc.PhaseUnhealthy,
	engineproc.PhaseAsleep, engineproc.PhaseStopped}

// engineDescs are the metrics of supervised engine processes, each
// labelled with the served model, the engine kind and the engine id.
type engineDescs struct {
	up, restarts, state                      *prometheus.Desc
	cpuLayers, moeLayers, expertsUsed        *prometheus.Desc
	residentWeights, streamedWeights         *prometheus.Desc
	readBytes, majorFaults, minorFaults, rss *prometheus.Desc
}

func newEngineDescs() engineDescs {
	d := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(append([]string(nil), engineLabels...), extra...), nil)
	}
	return engineDescs{
		up:       d("aiforge_engine_up", "1 while the supervised engine process passes its health probes, else 0."),
		restarts: d("aiforge_engine_restarts_total", "Restarts of the supervised engine process (after a crash, a failed start or failed probes)."),
		state: d("aiforge_engine_state",
			"1 for the supervised engine's state (starting, serving, unhealthy, asleep: scaled to zero, stopped), 0 for the others.", "state"),
		cpuLayers: d("aiforge_engine_moe_cpu_layers",
			"Layers whose experts the engine keeps on the CPU, mmap'd from the model file (llama.cpp --n-cpu-moe); the placement decided at the last start.", "placement"),
		moeLayers:       d("aiforge_engine_moe_layers", "Layers of the model with routed experts."),
		expertsUsed:     d("aiforge_engine_moe_experts_used", "Experts per token: the model's own expert_used_count, never lowered by placement."),
		residentWeights: d("aiforge_engine_moe_resident_weight_bytes", "Weights kept resident by the placement: non-expert weights and the experts of the layers not on the CPU."),
		streamedWeights: d("aiforge_engine_moe_streamed_weight_bytes", "Expert weights left to mmap by the placement, read from disk as the page cache allows."),
		readBytes:       d("aiforge_engine_read_bytes_total", "Bytes the engine process group read from storage (/proc/<pid>/io read_bytes): experts streamed from disk."),
		majorFaults:     d("aiforge_engine_major_page_faults_total", "Page faults of the engine process group that read from disk (mmap'd weights not in the page cache)."),
		minorFaults:     d("aiforge_engine_minor_page_faults_total", "Page faults of the engine process group served from memory (the page cache hits of mmap'd weights)."),
		rss:             d("aiforge_engine_resident_memory_bytes", "Resident memory of the engine process group."),
	}
}

func (d engineDescs) names() map[string]bool {
	out := map[string]bool{}
	for _, x := range []string{"up", "restarts_total", "state", "cold_start_seconds", "cold_start_seconds_bucket",
		"cold_start_seconds_sum", "cold_start_seconds_count", "moe_cpu_layers", "moe_layers", "moe_experts_used",
		"moe_resident_weight_bytes", "moe_streamed_weight_bytes", "read_bytes_total",
		"major_page_faults_total", "minor_page_faults_total", "resident_memory_bytes"} {
		out[x] = true
	}
	return out
}

// engineCollector exports the supervised engines' state and what their
// engines offer (llama-server's /metrics, Colibrì's /health counters) as
// aiforge_engine_<name>. It is unchecked: the engines' names are known
// only once scraped.
type engineCollector struct{ m *Metrics }

func (engineCollector) Describe(chan<- *prometheus.Desc) {}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	d := m.engineDescs
	type item struct {
		p *engineproc.Supervisor
		t trackedEngine
	}
	m.mu.Lock()
	items := make([]item, 0, len(m.engines))
	for p, t := range m.engines {
		items = append(items, item{p, t})
	}
	m.mu.Unlock()
	reserved := d.names()
	for _, it := range items {
		lv := []string{it.t.model, it.p.Kind(), it.t.engineID}
		st := it.p.State()
		gauge := func(desc *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append(append([]string(nil), lv...), extra...)...)
		}
		counter := func(desc *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, lv...)
		}
		up := 0.0
		if st.Phase == engineproc.PhaseServing {
			up = 1
		}
		gauge(d.up, up)
		for _, phase := range enginePhases {
			v := 0.0
			if st.Phase == phase {
				v = 1
			}
			gauge(d.state, v, phase)
		}
		counter(d.restarts, float64(st.Restarts))
		if pl := st.Placement; pl.Mode != "" && pl.Mode != engineproc.PlacementNone {
			gauge(d.cpuLayers, float64(pl.CPULayers), pl.Mode)
			gauge(d.moeLayers, float64(pl.MoELayers))
			gauge(d.expertsUsed, float64(pl.ExpertUsedCount))
			gauge(d.residentWeights, float64(pl.ResidentBytes))
			gauge(d.streamedWeights, float64(pl.StreamedBytes))
		}
		if ps, ok := it.p.ProcStats(); ok {
			counter(d.readBytes, float64(ps.ReadBytes))
			counter(d.majorFaults, float64(ps.MajorFaults))
			counter(d.minorFaults, float64(ps.MinorFaults))
			gauge(d.rss, float64(ps.ResidentBytes))
		}
		for _, sm := range it.p.Samples() {
			if reserved[sm.Name] {
				continue
			}
			desc := prometheus.NewDesc("aiforge_engine_"+sm.Name, "Re-exported from the supervised engine's own metrics.", engineLabels, nil)
			vt := prometheus.GaugeValue
			if sm.Counter {
				vt = prometheus.CounterValue
			}
			if mt, err := prometheus.NewConstMetric(desc, vt, sm.Value, lv...); err == nil {
				ch <- mt
			}
		}
	}
}
