package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

// TestEmbeddingModelHybridDefault: an embedding model's binding carries the
// hybrid_search its stores' searches use when the request gives none. With
// the keyword list weighted 0 the search ranks by the embeddings alone, the
// same as a request that asks for that fusion itself, and not as the default
// fusion ranks.
func TestEmbeddingModelHybridDefault(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"embed-up"}, EmbeddingDims: 16})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	denseOnly := map[string]any{"fusion": "zscore", "embedding_weight": 1, "text_weight": 0}
	if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "embedder",
		"engine": map[string]any{"base_url": base, "model": "embed-up"}, "hybrid_search": denseOnly}, nil); err != nil {
		t.Fatal(err)
	}
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	vs, _, _ := storeFile(t, client, "guide.md", "text/markdown", []byte(guide), openai.VectorStoreNewParams{
		ChunkingStrategy: openai.FileChunkingStrategyParamUnion{OfStatic: &openai.StaticFileChunkingStrategyObjectParam{
			Static: openai.StaticFileChunkingStrategyParam{MaxChunkSizeTokens: 100, ChunkOverlapTokens: 0}}}},
		20*time.Second, option.WithJSONSet("embedding_model", "embedder"))
	search := func(hybrid map[string]any) []string {
		t.Helper()
		var opts []option.RequestOption
		if hybrid != nil {
			opts = append(opts, option.WithJSONSet("ranking_options", map[string]any{"hybrid_search": hybrid}))
		}
		page, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
			Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("How do I connect my phone?")}}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) < 2 {
			t.Fatalf("%v: %d results", hybrid, len(page.Data))
		}
		var out []string
		for _, r := range page.Data {
			out = append(out, r.Content[0].Text+"\x00"+strconv.FormatFloat(r.Score, 'g', -1, 64))
		}
		return out
	}
	byBinding, asked := search(nil), search(denseOnly)
	if strings.Join(byBinding, "\n") != strings.Join(asked, "\n") {
		t.Fatalf("the binding's fusion ranked\n%q\nthe same fusion asked for ranked\n%q", byBinding, asked)
	}
	agreement := search(map[string]any{"fusion": "agreement", "embedding_weight": 0.45, "text_weight": 1})
	if strings.Join(byBinding, "\n") == strings.Join(agreement, "\n") {
		t.Fatalf("the binding's fusion ranked as the default agreement fusion does: %q", byBinding)
	}
}
