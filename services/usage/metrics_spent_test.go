package usage

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/aiforge/aiforge/pkg/events"
)

func TestSpentCountsTokensAndCostPerTenant(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	v1 := events.UsageRecordedV1{Tenant: "acme", Model: "chat", PromptTokens: 10, CompletionTokens: 4}
	m.spent(&events.UsageRecordedV3{UsageRecordedV2: events.UsageRecordedV2{UsageRecordedV1: v1}}, 2_500_000_000)
	m.spent(&v1, 500_000_000)
	m.spent(&events.SandboxUsageV1{Tenant: "acme"}, 1_000_000_000)
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("acme", "chat", "input")); got != 20 {
		t.Errorf("input tokens %v", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("acme", "chat", "output")); got != 8 {
		t.Errorf("output tokens %v", got)
	}
	if got := testutil.ToFloat64(m.cost.WithLabelValues("acme", "chat")); got != 3 {
		t.Errorf("cost %v USD, want 3", got)
	}
	if got := testutil.ToFloat64(m.cost.WithLabelValues("acme", "sandbox")); got != 1 {
		t.Errorf("sandbox cost %v USD", got)
	}
}
