package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/services/retriever/index/qdrantfake"
)

const guide = `# Device guide

## Installation

Unpack the router and place it near a power outlet. Plug the power cable into the back.
Keep the box: it has the serial number, which support asks for. Mount the router on a wall
with the two screws supplied, or stand it upright on a shelf away from metal objects and
microwave ovens, which weaken the signal. Wait two minutes for the lights to turn steady green.

## Connecting devices

To connect a laptop or a phone, open the wireless settings, choose the network printed on the label
and type the password. Wired devices connect through the yellow ports. Up to thirty devices
can be connected at the same time; printers and televisions work the same way. A second network
for guests can be switched on in the app, so that visitors never see your own devices.

## Troubleshooting

If the lights blink red, the router is overheating: switch it off and let it cool for ten minutes.
If the lights blink orange, the cable from the wall is loose or the line is down; call your
provider. A reset to factory settings takes a paper clip pressed into the hole for ten seconds,
and erases the password and every setting you made.
`

// TestDocumentsToSearch: a Markdown file goes through ingest, embedder and
// retriever with no embedding engine, and keyword search finds a
// paraphrased question, with the heading path; with an embedding model the
// store gets dense vectors from the workers too.
func TestDocumentsToSearch(t *testing.T) {
	documentsToSearch(t, stackOpts{})
}

// TestDocumentsToSearchOnQdrant runs the same flow with the retriever on the
// Qdrant adapter (--vector-index qdrant), against the protocol-level fake
// served in-process: the chunks are upserted into and searched in the
// collection, and no embedded index is opened.
func TestDocumentsToSearchOnQdrant(t *testing.T) {
	srv, err := qdrantfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	dataDir := t.TempDir()
	documentsToSearch(t, stackOpts{dataDir: dataDir, mutate: func(o *app.Options) {
		o.Retriever = app.RetrieverOptions{Index: app.IndexQdrant, QdrantURL: "http://" + srv.Addr}
		o.Retriever.Qdrant.Dim = 16 // the simulator's embedding size
	}})
	calls := map[string]int{}
	for _, r := range srv.Requests() {
		calls[r.Method]++
	}
	if calls["Points/Upsert"] == 0 || calls["Points/Query"] == 0 || calls["Points/Delete"] == 0 {
		t.Fatalf("the retriever did not index, search and delete in Qdrant: calls %v", calls)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "index")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an embedded index was opened as well: %v", err)
	}
}

func documentsToSearch(t *testing.T, o stackOpts) {
	_, base := sim(t, enginesim.Config{Models: []string{"embed-up"}, EmbeddingDims: 16})
	s := startStack(t, o)
	key, _ := s.tenantKey("acme")
	other, _ := s.tenantKey("globex")
	s.register("embedder", base, "embed-up")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))

	file, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(guide), "guide.md", "text/markdown"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"", "embedder"} {
		params := openai.VectorStoreNewParams{Name: openai.String("support " + model)}
		opts := []option.RequestOption{}
		if model != "" {
			opts = append(opts, option.WithJSONSet("embedding_model", model))
		}
		vs, err := client.VectorStores.New(ctx, params, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.VectorStores.Files.New(ctx, vs.ID, openai.VectorStoreFileNewParams{FileID: file.ID,
			ChunkingStrategy: openai.FileChunkingStrategyParamUnion{OfStatic: &openai.StaticFileChunkingStrategyObjectParam{
				Static: openai.StaticFileChunkingStrategyParam{MaxChunkSizeTokens: 100, ChunkOverlapTokens: 0}}},
			Attributes: map[string]openai.VectorStoreFileNewParamsAttributeUnion{"product": {OfString: openai.String("router")}}}); err != nil {
			t.Fatal(err)
		}
		var last *openai.VectorStoreFile
		eventually(t, 20*time.Second, func() bool {
			last, err = client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
			return err == nil && last.Status != openai.VectorStoreFileStatusInProgress
		}, "file processed")
		if last.Status != openai.VectorStoreFileStatusCompleted {
			t.Fatalf("store %q: file %s: %+v", model, last.Status, last.LastError)
		}
		page, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
			Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("How do I connect my phone?")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) == 0 {
			t.Fatalf("store %q: no results", model)
		}
		top := page.Data[0]
		if top.FileID != file.ID || top.Filename != "guide.md" || !strings.Contains(top.Content[0].Text, "wireless settings") {
			t.Fatalf("store %q: top result %+v", model, top)
		}
		if top.Attributes["product"].OfString != "router" || !strings.Contains(top.Attributes["heading_path"].OfString, "Connecting devices") {
			t.Fatalf("store %q: attributes %+v", model, top.Attributes)
		}
		// A filter that excludes the file leaves nothing.
		page, err = client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
			Query:   openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("connect phone")},
			Filters: openai.VectorStoreSearchParamsFiltersUnion{OfComparisonFilter: &openai.ComparisonFilterParam{Key: "product", Type: openai.ComparisonFilterTypeNe, Value: openai.ComparisonFilterValueUnionParam{OfString: openai.String("router")}}},
		})
		if err != nil || len(page.Data) != 0 {
			t.Fatalf("store %q: filtered search: %v %d results", model, err, len(page.Data))
		}
		// Another tenant cannot search the store.
		oc := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(other), option.WithMaxRetries(0))
		if _, err := oc.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("connect")}}); err == nil {
			t.Fatalf("store %q: another tenant searched it", model)
		}
		if model != "" {
			// Embedding work is metered like any other request.
			metered := false
			for _, evs := range usageEvents(t, s.app.NATS()) {
				for _, u := range evs {
					if u.Tenant == "acme" && u.KeyID == "system:embedder" && u.Endpoint == "embeddings" && u.PromptTokens > 0 {
						metered = true
					}
				}
			}
			if !metered {
				t.Fatal("no usage event for the embedding of the chunks")
			}
		}
		// Removing the file removes its chunks.
		if _, err := client.VectorStores.Files.Delete(ctx, vs.ID, file.ID); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, func() bool {
			p, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("connect phone")}})
			return err == nil && len(p.Data) == 0
		}, "chunks removed")
	}
}

// TestFileBatchAndCancel: a batch adds several files at once and reports
// their counts; a cancelled batch's unfinished files end cancelled and are
// not searchable.
func TestFileBatchAndCancel(t *testing.T) {
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	var ids []string
	for i, text := range []string{"Lighthouses guide ships along rocky coasts.", "Glaciers carve valleys over thousands of years."} {
		f, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(text), fmt.Sprintf("n%d.txt", i), "text/plain"), Purpose: openai.FilePurposeAssistants})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, f.ID)
	}
	vs, err := client.VectorStores.New(ctx, openai.VectorStoreNewParams{Name: openai.String("nature")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.VectorStores.FileBatches.New(ctx, vs.ID, openai.VectorStoreFileBatchNewParams{FileIDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	if b.FileCounts.Total != 2 || !strings.HasPrefix(b.ID, "vsfb_") {
		t.Fatalf("batch = %+v", b)
	}
	eventually(t, 20*time.Second, func() bool {
		got, err := client.VectorStores.FileBatches.Get(ctx, vs.ID, b.ID)
		return err == nil && got.Status == openai.VectorStoreFileBatchStatusCompleted && got.FileCounts.Completed == 2
	}, "batch completed")
	page, err := client.VectorStores.FileBatches.ListFiles(ctx, vs.ID, b.ID, openai.VectorStoreFileBatchListFilesParams{})
	if err != nil || len(page.Data) != 2 {
		t.Fatalf("batch files: %v %+v", err, page)
	}
	res, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("glacier valley")}})
	if err != nil || len(res.Data) == 0 || res.Data[0].FileID != ids[1] {
		t.Fatalf("search: %v %+v", err, res)
	}
	// Cancelling a finished batch changes nothing; a missing file refuses the whole batch.
	if got, err := client.VectorStores.FileBatches.Cancel(ctx, vs.ID, b.ID); err != nil || got.FileCounts.Completed != 2 || got.Status != openai.VectorStoreFileBatchStatusCompleted {
		t.Fatalf("cancel: %v %+v", err, got)
	}
	if _, err := client.VectorStores.FileBatches.New(ctx, vs.ID, openai.VectorStoreFileBatchNewParams{FileIDs: []string{ids[0], "file-nope"}}); err == nil {
		t.Fatal("a batch with a missing file was accepted")
	}
}

// TestEngineDownAndRestartDuringIngest: while the embedding engine fails,
// the file waits (in_progress, retried); aiforge is restarted in the
// middle; when the engine is back the file completes. Nothing is stuck or
// lost.
func TestEngineDownAndRestartDuringIngest(t *testing.T) {
	engine, base := sim(t, enginesim.Config{Models: []string{"embed-up"}, EmbeddingDims: 8})
	engine.SetFailure(enginesim.Failure{Mode: enginesim.FailBeforeFirstToken})
	dir := t.TempDir()
	s := startStack(t, stackOpts{dataDir: dir, noCleanup: true})
	key, _ := s.tenantKey("acme")
	s.register("embedder", base, "embed-up")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	file, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(guide), "guide.md", "text/markdown"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := client.VectorStores.New(ctx, openai.VectorStoreNewParams{FileIDs: []string{file.ID}}, option.WithJSONSet("embedding_model", "embedder"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() bool { return engine.Stats().Failed >= 2 }, "the embedder tried the failing engine")
	if f, err := client.VectorStores.Files.Get(ctx, vs.ID, file.ID); err != nil || f.Status != openai.VectorStoreFileStatusInProgress {
		t.Fatalf("while the engine is down the file must wait: %v %+v", err, f)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	s2 := startStack(t, stackOpts{dataDir: dir})
	client = openai.NewClient(option.WithBaseURL(s2.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	engine.SetFailure(enginesim.Failure{})
	var f *openai.VectorStoreFile
	eventually(t, 60*time.Second, func() bool {
		f, err = client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
		return err == nil && f.Status != openai.VectorStoreFileStatusInProgress
	}, "file completed after the restart")
	if f.Status != openai.VectorStoreFileStatusCompleted {
		t.Fatalf("file %s: %+v", f.Status, f.LastError)
	}
	res, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("router overheating lights")}})
	if err != nil || len(res.Data) == 0 {
		t.Fatalf("search after restart: %v %+v", err, res)
	}
}

// TestChunkingClampedToTheEmbeddingWindow: a chunk size above the embedding
// model's input window is clamped, with a warning, never truncated
// silently.
func TestChunkingClampedToTheEmbeddingWindow(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"embed-up"}, EmbeddingDims: 8})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	if err := s.admin.Do(ctx, "POST", "/admin/v1/models", map[string]any{"name": "small-embedder",
		"engine": map[string]any{"base_url": base, "model": "embed-up", "max_input_tokens": 256}}, nil); err != nil {
		t.Fatal(err)
	}
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	file, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(guide), "guide.md", "text/markdown"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := client.VectorStores.New(ctx, openai.VectorStoreNewParams{}, option.WithJSONSet("embedding_model", "small-embedder"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := client.VectorStores.Files.New(ctx, vs.ID, openai.VectorStoreFileNewParams{FileID: file.ID})
	if err != nil {
		t.Fatal(err)
	}
	if f.ChunkingStrategy.Static.MaxChunkSizeTokens != 256 || f.ChunkingStrategy.Static.ChunkOverlapTokens != 128 ||
		!strings.Contains(f.RawJSON(), "input window") {
		t.Fatalf("not clamped with a warning: %s", f.RawJSON())
	}
}

// TestReingestIsIdempotent: adding the same file to a store again leaves
// exactly the chunks it had (deterministic ids, content-hash keyed work).
func TestReingestIsIdempotent(t *testing.T) {
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	file, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(guide), "guide.md", "text/markdown"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := client.VectorStores.New(ctx, openai.VectorStoreNewParams{})
	if err != nil {
		t.Fatal(err)
	}
	static := openai.FileChunkingStrategyParamUnion{OfStatic: &openai.StaticFileChunkingStrategyObjectParam{
		Static: openai.StaticFileChunkingStrategyParam{MaxChunkSizeTokens: 100, ChunkOverlapTokens: 0}}}
	count := func() int {
		res, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
			Query:         openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("router lights password network power")},
			MaxNumResults: openai.Int(50)})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, r := range res.Data {
			if seen[r.Content[0].Text] {
				t.Fatalf("duplicate chunk: %q", r.Content[0].Text)
			}
			seen[r.Content[0].Text] = true
		}
		return len(res.Data)
	}
	var first int
	for round := 0; round < 2; round++ {
		if _, err := client.VectorStores.Files.New(ctx, vs.ID, openai.VectorStoreFileNewParams{FileID: file.ID, ChunkingStrategy: static}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, func() bool {
			f, err := client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
			return err == nil && f.Status == openai.VectorStoreFileStatusCompleted
		}, "file indexed")
		n := count()
		if round == 0 {
			first = n
			if n < 2 {
				t.Fatalf("only %d chunks", n)
			}
		} else if n != first {
			t.Fatalf("re-ingest changed the chunks: %d then %d", first, n)
		}
	}
}
