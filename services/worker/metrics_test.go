package worker

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func family(t testing.TB, h *harness, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

func findMetric(t testing.TB, h *harness, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	f := family(t, h, name)
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

func counterValue(t testing.TB, h *harness, name string, labels map[string]string) float64 {
	t.Helper()
	m := findMetric(t, h, name, labels)
	if m == nil {
		t.Fatalf("no %s%v", name, labels)
	}
	return m.GetCounter().GetValue()
}

func gaugeValueOK(t testing.TB, h *harness, name, model string) (float64, bool) {
	t.Helper()
	m := findMetric(t, h, name, map[string]string{"model": model})
	if m == nil {
		return 0, false
	}
	return m.GetGauge().GetValue(), true
}

func gaugeValue(t testing.TB, h *harness, name, model string) float64 {
	t.Helper()
	v, ok := gaugeValueOK(t, h, name, model)
	if !ok {
		t.Fatalf("no %s{model=%q}", name, model)
	}
	return v
}

func histogramCount(t testing.TB, h *harness, name, model string) uint64 {
	t.Helper()
	m := findMetric(t, h, name, map[string]string{"model": model})
	if m == nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

func TestMetricsNames(t *testing.T) {
	h := newHarness(t)
	_ = h.metrics.forModel("m")
	for _, name := range []string{
		"aiforge_worker_requests_total", "aiforge_worker_time_to_first_token_seconds",
		"aiforge_worker_inter_token_latency_seconds", "aiforge_worker_e2e_request_latency_seconds",
		"aiforge_worker_prompt_tokens_total", "aiforge_worker_generation_tokens_total",
	} {
		if family(t, h, name) == nil {
			t.Errorf("metric %s not registered", name)
		}
	}
	if _, err := NewMetrics(h.reg); err == nil {
		t.Fatal("registering twice must fail")
	}
	if _, err := NewMetrics(nil); err == nil {
		t.Fatal("NewMetrics(nil) must fail")
	}
}
