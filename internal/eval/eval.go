// Package eval scores retrieval: queries with the passages that answer
// them, run against the same chunking, analyzer and index the retriever
// uses, for sparse, dense and hybrid search, as recall@k, MRR and nDCG@10.
package eval

import (
	"bytes"
	"context"
	embedfs "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/aiforge/aiforge/pkg/embedding"
	"github.com/aiforge/aiforge/pkg/lexical"
	"github.com/aiforge/aiforge/services/ingest/chunk"
	"github.com/aiforge/aiforge/services/ingest/extract"
	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded"
)

// Query is one evaluation question with its relevant passages, each named
// by file and the last heading of its section.
type Query struct {
	Query    string      `json:"query"`
	Relevant [][2]string `json:"relevant"`
}

// Dataset is the bundled evaluation set (dataset/, CC0): compiled into the
// binary, so `aiforge eval retrieval` runs from any directory.
//
//go:embed dataset/corpus dataset/queries.json
var Dataset embedfs.FS

// Options configure a run.
type Options struct {
	// CorpusDir is a directory of documents and QueriesFile a JSON list of
	// Query; either left empty takes the bundled set's.
	CorpusDir   string
	QueriesFile string
	K           int
	// EmbeddingURL and EmbeddingModel name an OpenAI-compatible embeddings
	// engine (base URL ending in /v1); without them only sparse search runs.
	EmbeddingURL   string
	EmbeddingModel string
	EmbeddingKey   string
	ChunkTokens    int
}

// Scores are the means over the queries of one search mode.
type Scores struct {
	Mode    string
	Recall  float64 // recall@K
	MRR     float64
	NDCG10  float64
	Queries int
}

// Recall is the share of relevant passages in the top k.
func Recall(ranked []bool, relevant, k int) float64 {
	if relevant == 0 {
		return 0
	}
	hits := 0
	for i := 0; i < min(k, len(ranked)); i++ {
		if ranked[i] {
			hits++
		}
	}
	return float64(hits) / float64(relevant)
}

// ReciprocalRank is 1 / the rank of the first relevant result (0 if none).
func ReciprocalRank(ranked []bool) float64 {
	for i, r := range ranked {
		if r {
			return 1 / float64(i+1)
		}
	}
	return 0
}

// NDCG is normalised discounted cumulative gain at k with binary gains.
func NDCG(ranked []bool, relevant, k int) float64 {
	var dcg, ideal float64
	for i := 0; i < min(k, len(ranked)); i++ {
		if ranked[i] {
			dcg += 1 / math.Log2(float64(i+2))
		}
	}
	for i := 0; i < min(k, relevant); i++ {
		ideal += 1 / math.Log2(float64(i+2))
	}
	if ideal == 0 {
		return 0
	}
	return dcg / ideal
}

// Run indexes the corpus and scores every available mode.
func Run(ctx context.Context, o Options) ([]Scores, error) {
	if o.K == 0 {
		o.K = 10
	}
	if o.ChunkTokens == 0 {
		o.ChunkTokens = 80
	}
	var queries []Query
	var b []byte
	var err error
	queriesName := o.QueriesFile
	if queriesName == "" {
		queriesName = "the bundled queries"
		b, err = Dataset.ReadFile("dataset/queries.json")
	} else {
		b, err = os.ReadFile(o.QueriesFile)
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &queries); err != nil {
		return nil, fmt.Errorf("eval: %s: %w", queriesName, err)
	}
	var corpus fs.FS
	corpusName := o.CorpusDir
	if corpusName == "" {
		corpusName = "the bundled corpus"
		corpus, _ = fs.Sub(Dataset, "dataset/corpus")
	} else {
		corpus = os.DirFS(o.CorpusDir)
	}
	dir, err := os.MkdirTemp("", "aiforge-eval-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	idx, err := embedded.Open(embedded.Config{Dir: dir})
	if err != nil {
		return nil, err
	}
	defer idx.Close()
	tok, err := chunk.NewTiktoken()
	if err != nil {
		return nil, err
	}
	an := lexical.NewEnglish()
	dense := o.EmbeddingURL != "" && o.EmbeddingModel != ""
	files, err := fs.Glob(corpus, "*")
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("eval: no documents in %s", corpusName)
	}
	for _, name := range files {
		data, err := fs.ReadFile(corpus, name)
		if err != nil {
			return nil, err
		}
		ex, ok := extract.ForFormat(extract.Sniff(name, data))
		if !ok {
			continue
		}
		doc, err := ex.Extract(ctx, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return nil, fmt.Errorf("eval: %s: %w", name, err)
		}
		chunks, err := chunk.Split(ctx, doc, chunk.Options{MaxTokens: o.ChunkTokens, OverlapTokens: 0}, tok)
		if err != nil {
			return nil, err
		}
		var vecs [][]float32
		if dense {
			texts := make([]string, len(chunks))
			for i, c := range chunks {
				texts[i] = c.Text
			}
			if vecs, err = embed(ctx, o, texts); err != nil {
				return nil, err
			}
		}
		batch := make([]index.Chunk, len(chunks))
		for i, c := range chunks {
			terms, n := an.TermFreqs(c.Text)
			batch[i] = index.Chunk{ID: index.ChunkID("eval", "vs", name, c.Index), Tenant: "eval", StoreID: "vs", FileID: name, Index: c.Index,
				Text: c.Text, Terms: terms, Length: n, HeadingPath: c.HeadingPath}
			if dense {
				batch[i].Dense = vecs[i]
			}
		}
		if err := idx.Upsert(ctx, batch); err != nil {
			return nil, err
		}
	}
	modes := []string{index.ModeSparse}
	if dense {
		modes = append(modes, index.ModeDense, index.ModeHybrid)
	}
	var out []Scores
	for _, mode := range modes {
		sc := Scores{Mode: mode}
		for _, q := range queries {
			query := index.Query{Tenant: "eval", Limit: max(o.K, 10), Mode: mode}
			query.Terms, _ = an.TermFreqs(q.Query)
			if dense {
				v, err := embed(ctx, o, []string{q.Query})
				if err != nil {
					return nil, err
				}
				query.Dense = v[0]
			}
			hits, err := idx.Search(ctx, query)
			if err != nil {
				return nil, err
			}
			ranked := make([]bool, len(hits))
			for i, h := range hits {
				ranked[i] = isRelevant(h.Chunk, q.Relevant)
			}
			sc.Recall += Recall(ranked, len(q.Relevant), o.K)
			sc.MRR += ReciprocalRank(ranked)
			sc.NDCG10 += NDCG(ranked, len(q.Relevant), 10)
			sc.Queries++
		}
		if sc.Queries > 0 {
			n := float64(sc.Queries)
			sc.Recall, sc.MRR, sc.NDCG10 = sc.Recall/n, sc.MRR/n, sc.NDCG10/n
		}
		out = append(out, sc)
	}
	return out, nil
}

// isRelevant: the chunk is from the passage's file and belongs to its
// section (by heading path, or it carries the section's heading, as the
// first chunk of a file carries the title and the first section).
func isRelevant(c index.Chunk, relevant [][2]string) bool {
	for _, r := range relevant {
		if c.FileID != r[0] {
			continue
		}
		if n := len(c.HeadingPath); n > 0 && c.HeadingPath[n-1] == r[1] {
			return true
		}
		for _, line := range strings.Split(c.Text, "\n") {
			if strings.TrimSpace(line) == r[1] {
				return true
			}
		}
	}
	return false
}

// embed calls an OpenAI-compatible embeddings engine directly.
func embed(ctx context.Context, o Options, texts []string) ([][]float32, error) {
	body, _ := json.Marshal(map[string]any{"model": o.EmbeddingModel, "input": texts})
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(o.EmbeddingURL, "/")+"/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if o.EmbeddingKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.EmbeddingKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("eval: embeddings engine: %w", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("eval: embeddings engine answered %d", resp.StatusCode)
	}
	var r struct {
		Data []struct {
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &r); err != nil || len(r.Data) != len(texts) {
		return nil, errors.New("eval: not an embeddings answer")
	}
	slices.SortFunc(r.Data, func(a, b struct {
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	}) int {
		return a.Index - b.Index
	})
	out := make([][]float32, len(texts))
	for i, d := range r.Data {
		if out[i], err = embedding.Decode(d.Embedding); err != nil {
			return nil, err
		}
	}
	return out, nil
}
