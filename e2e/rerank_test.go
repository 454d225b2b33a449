package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-pdf/fpdf"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/aiforge/aiforge/pkg/enginesim"
)

type rerankAnswer struct {
	Results []struct {
		Index          int     `json:"index"`
		RelevanceScore float64 `json:"relevance_score"`
	} `json:"results"`
	Usage struct {
		TotalTokens int64 `json:"total_tokens"`
		Estimated   bool  `json:"estimated"`
	} `json:"usage"`
}

const rerankGuide = `# Headset guide

## Pairing

To pair the wireless headset, open the Bluetooth settings of your phone and hold the headset button.

## Battery

The battery lasts ten hours and charges over USB in two hours.

## Billing

Invoices are emailed monthly to the account owner; the headset warranty is two years.
`

// TestRerankThroughWorkers: POST /v1/rerank on both engine protocols (the
// simulator's lexical reranker predicts the order), and the rerank stage
// of vector store search and file_search (ranking_options.ranker = a
// rerank model) through the official SDK: results carry the reranker's
// scores, in its order.
func TestRerankThroughWorkers(t *testing.T) {
	_, base := sim(t, enginesim.Config{Models: []string{"up-rr"}})
	_, chatBase := sim(t, enginesim.Config{Models: []string{"up"}})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	for _, m := range []map[string]any{
		{"name": "rr", "kind": "rerank", "engine": map[string]any{"base_url": base, "model": "up-rr"}},
		{"name": "rr-tei", "kind": "rerank", "engine": map[string]any{"base_url": base, "model": "up-rr", "rerank_api": "tei"}},
	} {
		if err := s.admin.Do(ctx, "POST", "/admin/v1/models", m, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.register("chat", chatBase, "up")
	s.waitServed(key, "chat")

	query := "how do I pair my wireless headset"
	docs := []string{"Invoices are emailed monthly.", "Pair the wireless headset from the Bluetooth settings.", "The headset battery lasts ten hours."}
	body, _ := json.Marshal(map[string]any{"model": "rr", "query": query, "documents": docs})
	for _, model := range []string{"rr", "rr-tei"} {
		b := bytes.Replace(body, []byte(`"rr"`), []byte(`"`+model+`"`), 1)
		var st int
		var raw []byte
		eventually(t, 10*time.Second, func() bool { st, raw = s.post(key, "/v1/rerank", string(b)); return st == http.StatusOK }, model+" served")
		var got rerankAnswer
		if err := json.Unmarshal(raw, &got); err != nil || len(got.Results) != 3 {
			t.Fatalf("%s: %s", model, raw)
		}
		for i, want := range []int{1, 2, 0} {
			if r := got.Results[i]; r.Index != want || r.RelevanceScore != enginesim.RerankScore(query, docs[want]) {
				t.Fatalf("%s: result %d = %+v, want document %d (%s)", model, i, r, want, raw)
			}
		}
		if got.Usage.TotalTokens <= 0 || got.Usage.Estimated != (model == "rr-tei") {
			t.Fatalf("%s usage: %s", model, raw)
		}
	}
	if st, raw := s.post(key, "/v1/rerank", `{"model":"chat","query":"q","documents":["a"]}`); st != 400 || !strings.Contains(string(raw), "model_kind_mismatch") {
		t.Fatalf("rerank on a chat model: %d %s", st, raw)
	}

	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	vs, _, _ := storeFile(t, client, "headset.md", "text/markdown", []byte(rerankGuide), openai.VectorStoreNewParams{
		ChunkingStrategy: openai.FileChunkingStrategyParamUnion{OfStatic: &openai.StaticFileChunkingStrategyObjectParam{
			Static: openai.StaticFileChunkingStrategyParam{MaxChunkSizeTokens: 100, ChunkOverlapTokens: 0}}}}, 20*time.Second)
	checkReranked := func(what string, texts []string, scores []float64) {
		t.Helper()
		if len(texts) == 0 || len(texts) > 2 {
			t.Fatalf("%s: %d results", what, len(texts))
		}
		for i := range texts {
			want := enginesim.RerankScore(query, texts[i])
			if math.Abs(scores[i]-want) > 1e-9 || i > 0 && scores[i] > scores[i-1] {
				t.Fatalf("%s: result %d score %v, reranker's %v (%q)", what, i, scores[i], want, texts[i])
			}
		}
		if !strings.Contains(texts[0], "pair the wireless headset") {
			t.Fatalf("%s: top result %q", what, texts[0])
		}
	}
	page, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
		Query:          openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String(query)},
		MaxNumResults:  openai.Int(2),
		RankingOptions: openai.VectorStoreSearchParamsRankingOptions{Ranker: "rr"}})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	var scores []float64
	for _, r := range page.Data {
		texts, scores = append(texts, r.Content[0].Text), append(scores, r.Score)
	}
	checkReranked("vector store search", texts, scores)

	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "chat", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(query)}, MaxOutputTokens: openai.Int(4),
		Tools: []responses.ToolUnionParam{{OfFileSearch: &responses.FileSearchToolParam{VectorStoreIDs: []string{vs.ID}, MaxNumResults: openai.Int(2),
			RankingOptions: responses.FileSearchToolRankingOptionsParam{Ranker: "rr-tei"}}}},
		Include: []responses.ResponseIncludable{responses.ResponseIncludableFileSearchCallResults},
	})
	if err != nil {
		t.Fatal(err)
	}
	call := resp.Output[0].AsFileSearchCall()
	texts, scores = nil, nil
	for _, r := range call.Results {
		texts, scores = append(texts, r.Text), append(scores, r.Score)
	}
	checkReranked("file_search", texts, scores)

	// A ranker that is not a rerank model is refused.
	_, err = client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
		Query:          openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String(query)},
		RankingOptions: openai.VectorStoreSearchParamsRankingOptions{Ranker: "chat"}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "model_kind_mismatch" {
		t.Fatalf("ranker chat: %v", err)
	}
}

// TestCitationsAtTheSentence: a three-page PDF in one chunk, and an answer
// of two sentences from pages 1 and 3: through the SDK, each
// file_citation sits at the end of its sentence and names its own page,
// not the chunk's three.
func TestCitationsAtTheSentence(t *testing.T) {
	pdf := fpdf.New("P", "mm", "A4", "")
	for _, text := range []string{
		"The warranty covers a broken screen for two years from the date of purchase.",
		"Batteries are replaced free of charge within the first year.",
		"Shipping to Europe takes five working days with tracking included.",
	} {
		pdf.AddPage()
		pdf.SetFont("Helvetica", "", 11)
		pdf.MultiCell(0, 6, text, "", "", false)
	}
	var buf bytes.Buffer
	if err := pdf.Output(&buf); err != nil {
		t.Fatal(err)
	}
	first := "A broken screen is covered by the warranty for two years."
	second := "Shipping to Europe takes five working days."
	answer := first + " " + second
	_, base := sim(t, enginesim.Config{Models: []string{"up"}, Reply: answer})
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	s.register("chat", base, "up")
	s.waitServed(key, "chat")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	vs, fileID, _ := storeFile(t, client, "policies.pdf", "application/pdf", buf.Bytes(), openai.VectorStoreNewParams{}, 20*time.Second)
	params := responses.ResponseNewParams{
		Model: "chat", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Is my broken screen covered, and how long is shipping?")},
		Tools: []responses.ToolUnionParam{{OfFileSearch: &responses.FileSearchToolParam{VectorStoreIDs: []string{vs.ID}}}},
	}
	check := func(what string, text string, raw string) {
		t.Helper()
		var msg struct {
			Content []struct {
				Text        string `json:"text"`
				Annotations []struct {
					Type     string `json:"type"`
					Index    int    `json:"index"`
					FileID   string `json:"file_id"`
					Filename string `json:"filename"`
					Pages    []int  `json:"pages"`
				} `json:"annotations"`
			} `json:"content"`
		}
		if err := json.Unmarshal([]byte(raw), &msg); err != nil || len(msg.Content) != 1 {
			t.Fatalf("%s: %s", what, raw)
		}
		ann := msg.Content[0].Annotations
		if text != answer || len(ann) != 2 {
			t.Fatalf("%s: text %q annotations %s", what, text, raw)
		}
		wantIdx := []int{utf8.RuneCountInString(first), utf8.RuneCountInString(answer)}
		wantPages := [][]int{{1}, {3}}
		for i := range ann {
			if ann[i].Type != "file_citation" || ann[i].FileID != fileID || ann[i].Filename != "policies.pdf" ||
				ann[i].Index != wantIdx[i] || !slices.Equal(ann[i].Pages, wantPages[i]) {
				t.Fatalf("%s: annotation %d = %+v, want index %d pages %v", what, i, ann[i], wantIdx[i], wantPages[i])
			}
		}
	}
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) != 2 {
		t.Fatalf("response %s", resp.RawJSON())
	}
	check("plain", resp.OutputText(), resp.Output[1].RawJSON())

	stream := client.Responses.NewStreaming(ctx, params)
	var done *responses.Response
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.completed" {
			r := ev.Response
			done = &r
		}
	}
	if err := stream.Err(); err != nil || done == nil || len(done.Output) != 2 {
		t.Fatalf("stream: %v %v", err, done)
	}
	check("streamed", done.OutputText(), done.Output[1].RawJSON())
}
