package query

import (
	"encoding/json"
	"math"
	"testing"
)

func TestHybridSearchValidate(t *testing.T) {
	var none *HybridSearch
	if f, err := none.Validate(); f != "" || err != nil {
		t.Fatalf("nil: %q %v", f, err)
	}
	for _, c := range []struct {
		h     HybridSearch
		field string
	}{
		{HybridSearch{EmbeddingWeight: 0.7, TextWeight: 0.3}, ""},
		{HybridSearch{EmbeddingWeight: 1, Fusion: FusionWeighted, RRFK: 10}, ""},
		{HybridSearch{Fusion: FusionAgreement}, ""},
		{HybridSearch{EmbeddingWeight: -1}, "embedding_weight"},
		{HybridSearch{TextWeight: math.Inf(1)}, "text_weight"},
		{HybridSearch{Fusion: "max"}, "fusion"},
		{HybridSearch{RRFK: 20000}, "rrf_k"},
	} {
		if f, err := c.h.Validate(); f != c.field || (err != nil) != (c.field != "") {
			t.Errorf("%+v: field %q err %v, want field %q", c.h, f, err, c.field)
		}
	}
	var r SearchRequest
	if err := json.Unmarshal([]byte(`{"tenant":"t","hybrid_search":{"embedding_weight":0.2,"text_weight":0.8,"fusion":"weighted"}}`), &r); err != nil ||
		r.HybridSearch == nil || r.HybridSearch.TextWeight != 0.8 || r.HybridSearch.Fusion != FusionWeighted {
		t.Fatalf("decoded %+v, %v", r.HybridSearch, err)
	}
}
