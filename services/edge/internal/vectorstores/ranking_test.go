package vectorstores

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestRankingOptions(t *testing.T) {
	var none *RankingOptions
	if r, e := none.Ranking("ranking_options"); e != nil || r.ScoreThreshold != 0 || r.HybridSearch != nil {
		t.Fatalf("nil options: %+v %v", r, e)
	}
	var o RankingOptions
	body := `{"ranker":"auto","score_threshold":0.25,"hybrid_search":{"embedding_weight":0.6,"text_weight":0.4,"fusion":"weighted","rrf_k":30}}`
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatal(err)
	}
	r, e := o.Ranking("ranking_options")
	if e != nil || r.ScoreThreshold != 0.25 || r.HybridSearch.EmbeddingWeight != 0.6 || r.HybridSearch.RRFK != 30 {
		t.Fatalf("ranking %+v %v", r, e)
	}
	if err := json.Unmarshal([]byte(`{"hybrid_search":{"embedding_weight":-1,"text_weight":1}}`), &o); err != nil {
		t.Fatal(err)
	}
	_, e = o.Ranking("tools.ranking_options")
	if e == nil || e.Status != http.StatusBadRequest || e.Param != "tools.ranking_options.hybrid_search.embedding_weight" {
		t.Fatalf("bad weight: %+v", e)
	}
}
