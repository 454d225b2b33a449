package edge_test

import (
	"net/http"
	"testing"
)

// Without an object store the APIs that keep files say so:
// storage_unavailable, not a model's unavailability.
func TestNoObjectStoreIsStorageUnavailable(t *testing.T) {
	h := startEdge(t, nil)
	secret, _ := h.tenantKey("acme")
	apiError(t, h.do("GET", "/v1/files", secret, nil, nil), http.StatusServiceUnavailable, "storage_unavailable")
	apiError(t, h.do("POST", "/v1/vector_stores", secret, map[string]any{"name": "docs"}, nil), http.StatusServiceUnavailable, "storage_unavailable")
	apiError(t, h.admin("POST", "/admin/v1/uploads", map[string]any{"name": "m"}), http.StatusServiceUnavailable, "storage_unavailable")
	// The key is checked first: a stranger learns nothing.
	apiError(t, h.do("GET", "/v1/files", "sk-nope", nil, nil), http.StatusUnauthorized, "invalid_api_key")
}

// A search with no retriever running is service_unavailable.
func TestNoRetrieverIsServiceUnavailable(t *testing.T) {
	h := startModelEdge(t)
	secret, _ := h.tenantKey("acme")
	r := h.do("POST", "/v1/vector_stores", secret, map[string]any{"name": "docs"}, nil)
	if r.status != http.StatusOK {
		t.Fatalf("create store: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	apiError(t, h.do("POST", "/v1/vector_stores/"+id+"/search", secret, map[string]any{"query": "q"}, nil), http.StatusServiceUnavailable, "service_unavailable")
	h.registerModel("chat")
	apiError(t, h.do("POST", "/v1/responses", secret, map[string]any{"model": "chat", "input": "q",
		"tools": []map[string]any{{"type": "file_search", "vector_store_ids": []string{id}}}}, nil), http.StatusServiceUnavailable, "service_unavailable")
}

// Without a usage service a usage report is service_unavailable.
func TestNoUsageServiceIsServiceUnavailable(t *testing.T) {
	h := startEdge(t, nil)
	apiError(t, h.admin("GET", "/v1/organization/costs?start_time=0", nil), http.StatusServiceUnavailable, "service_unavailable")
}
