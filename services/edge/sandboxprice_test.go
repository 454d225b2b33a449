package edge_test

import (
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/registry"
)

// The sandboxes' price is set like a model's, on the reserved name
// registry.SandboxPriceModel, which no model binding may take; the
// sandbox prices are refused on any other name.
func TestSandboxPrice(t *testing.T) {
	h := startEdge(t, nil)
	if r := h.admin("POST", "/admin/v1/prices", map[string]any{"model": registry.SandboxPriceModel, "per_gb_second_usd": 0.00002, "per_session_usd": 0.03}); r.status != 201 {
		t.Fatalf("sandbox price: %d %s", r.status, r.body)
	}
	if r := h.admin("GET", "/admin/v1/prices", nil); !strings.Contains(r.String(), `"per_gb_second_usd":0.00002,"per_session_usd":0.03`) {
		t.Fatalf("prices %s", r.body)
	}
	apiError(t, h.admin("POST", "/admin/v1/prices", map[string]any{"model": "m", "per_session_usd": 1}), 400, "invalid_request")
	apiError(t, h.admin("POST", "/admin/v1/prices", map[string]any{"model": registry.SandboxPriceModel, "per_gb_second_usd": -1}), 400, "invalid_request")
	apiError(t, h.admin("POST", "/admin/v1/models", map[string]any{"name": registry.SandboxPriceModel, "engine": map[string]any{"model": "x", "base_url": "http://a/v1"}}), 400, "invalid_request")
}
