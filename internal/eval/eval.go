// Package eval scores retrieval: queries with the passages that answer
// them, run against the same chunking, analyzer and index the retriever
// uses, for sparse, dense and hybrid search, as recall@k, MRR and nDCG@10.
package eval

import (
	"bytes"
	"cmp"
	"compress/gzip"
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
	"unicode"

	"github.com/aiforge/aiforge/pkg/embedding"
	"github.com/aiforge/aiforge/pkg/lexical"
	"github.com/aiforge/aiforge/services/ingest/chunk"
	"github.com/aiforge/aiforge/services/ingest/extract"
	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded"
)

// Query is one evaluation question with its relevant passages. The bundled
// set names a passage by file and the last heading of its section
// (Relevant); document sets name it by file and a snippet of its text
// (Passages), which must occur in a retrieved chunk.
type Query struct {
	Query    string      `json:"query"`
	Relevant [][2]string `json:"-"`
	Passages []Passage   `json:"-"`
}

// Passage is an answer passage: a file (relative to the set's root) and a
// snippet of its text. Matching ignores case, punctuation and white space,
// and a chunk that starts or ends inside the snippet matches when it holds at
// least half of the snippet's words at that edge, so that a change of
// chunking does not turn a right answer into a wrong one.
type Passage struct {
	File    string `json:"file"`
	Passage string `json:"passage"`
}

func (q *Query) UnmarshalJSON(b []byte) error {
	var raw struct {
		Query    string            `json:"query"`
		Relevant []json.RawMessage `json:"relevant"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	q.Query = raw.Query
	for _, r := range raw.Relevant {
		var pair [2]string
		if json.Unmarshal(r, &pair) == nil {
			q.Relevant = append(q.Relevant, pair)
			continue
		}
		var p Passage
		if err := json.Unmarshal(r, &p); err != nil || p.File == "" || p.Passage == "" {
			return fmt.Errorf("query %q: a relevant passage is [file, heading] or {file, passage}", raw.Query)
		}
		q.Passages = append(q.Passages, p)
	}
	return nil
}

func (q *Query) relevantCount() int { return len(q.Relevant) + len(q.Passages) }

// Set is an evaluation set over documents that are not in the repository:
// Files (paths or globs relative to Root; a .gz file is decompressed) and
// queries with their passages.
type Set struct {
	Name          string   `json:"name"`
	Description   string   `json:"description"`
	Install       string   `json:"install"`
	Root          string   `json:"root"`
	Files         []string `json:"files"`
	ChunkTokens   int      `json:"chunk_tokens"`
	OverlapTokens int      `json:"overlap_tokens"`
	Queries       []Query  `json:"queries"`
}

// Dataset is the bundled evaluation set (dataset/corpus and
// dataset/queries.json, CC0) and the questions of the Debian document set
// (dataset/debian/queries.json) and of its two held-out checks
// (dataset/debian/heldout.json, dataset/debian/heldout2.json): compiled into
// the binary, so `aiforge eval retrieval` runs from any directory.
//
//go:embed dataset/corpus dataset/queries.json dataset/debian/queries.json dataset/debian/heldout.json dataset/debian/heldout2.json
var Dataset embedfs.FS

// Options configure a run.
type Options struct {
	// Set names a bundled set: "" or "bundled" (the CC0 corpus), "debian"
	// (the Debian manuals, read from the installed packages).
	Set string
	// CorpusDir is a directory of documents (the bundled format) or the root
	// of a document set's files (default: the set's root); QueriesFile a JSON
	// list of Query or a Set. Empty takes the named set's.
	CorpusDir   string
	QueriesFile string
	// Files keeps only these files of a document set (and their queries):
	// a subset. MaxQueries keeps the first n queries. 0/empty: all.
	Files      []string
	MaxQueries int
	// Half keeps the queries of even ("even": 0, 2, 4 …) or odd ("odd")
	// index in the set's list, before Files selects: two disjoint halves to
	// choose a change on one and check it on the other. Empty: all.
	Half string
	// EmbeddingURL and EmbeddingModel name an OpenAI-compatible embeddings
	// engine (base URL ending in /v1); without them only sparse search runs.
	EmbeddingURL   string
	EmbeddingModel string
	EmbeddingKey   string
	ChunkTokens    int
	OverlapTokens  int
	// Hybrid is the fusion of the "hybrid" mode: what a vector store search
	// uses without ranking_options (the zero value: the default fusion), or
	// what an embedding model's binding sets (registry.Model.HybridSearch).
	Hybrid index.Fusion
	// DenseOracle embeds each question together with the text of its answer
	// passages (or, in the bundled set, their headings): a stand-in for an
	// embedding model stronger than keyword search, to see how each fusion
	// does when the dense list is the better one. It measures fusion, not
	// any model.
	DenseOracle bool
}

// Modes, in the order Run reports them.
const (
	ModeSparseBefore   = "sparse-bm25"     // plain BM25 over the chunk text, query terms as documents' (before issue 18)
	ModeSparse         = "sparse"          // BM25F + proximity, question words, WordNet synonyms and short forms (the retriever's)
	ModeDense          = "dense"           // cosine on the engine's embeddings
	ModeHybrid         = "hybrid"          // the default fusion (agreement-weighted z-scores) of dense and sparse, or Options.Hybrid
	ModeHybridZScore   = "hybrid-zscore"   // z-scores of dense and sparse, equal weights, no agreement factor
	ModeHybridRRF      = "hybrid-rrf"      // RRF (k 60) of dense and sparse, equal weights
	ModeHybridWeighted = "hybrid-weighted" // weighted sum of scores on [0, 1] (equal weights)
)

// Scores are the means over the queries of one search mode.
type Scores struct {
	Mode     string
	Recall5  float64
	Recall10 float64
	MRR      float64
	NDCG10   float64
	Queries  int
	// Ranks is, per query, the 1-based rank of the first relevant hit in the top 10 (0: none).
	Ranks []int
	// Questions are the queries' texts, in the order of Ranks.
	Questions []string
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
	return min(float64(hits)/float64(relevant), 1)
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
	return min(dcg/ideal, 1)
}

// LoadSet reads the set Run would score for o (without indexing anything).
func LoadSet(o Options) (Set, fs.FS, error) {
	var b []byte
	var err error
	name := o.QueriesFile
	switch {
	case name != "":
		b, err = os.ReadFile(name)
	case o.Set == "" || o.Set == "bundled":
		name = "the bundled queries"
		b, err = Dataset.ReadFile("dataset/queries.json")
	case o.Set == "debian":
		name = "the Debian set"
		b, err = Dataset.ReadFile("dataset/debian/queries.json")
	case o.Set == "debian-heldout":
		name = "the Debian held-out set"
		b, err = Dataset.ReadFile("dataset/debian/heldout.json")
	case o.Set == "debian-heldout2":
		name = "the Debian second held-out set"
		b, err = Dataset.ReadFile("dataset/debian/heldout2.json")
	default:
		return Set{}, nil, fmt.Errorf("eval: unknown set %q (want bundled, debian, debian-heldout or debian-heldout2)", o.Set)
	}
	if err != nil {
		return Set{}, nil, err
	}
	var set Set
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		if err := json.Unmarshal(b, &set.Queries); err != nil {
			return Set{}, nil, fmt.Errorf("eval: %s: %w", name, err)
		}
		set.ChunkTokens = 80
		var corpus fs.FS
		if o.CorpusDir == "" {
			corpus, _ = fs.Sub(Dataset, "dataset/corpus")
		} else {
			corpus = os.DirFS(o.CorpusDir)
		}
		files, err := fs.Glob(corpus, "*")
		if err != nil || len(files) == 0 {
			return Set{}, nil, fmt.Errorf("eval: no documents in %s", cmp.Or(o.CorpusDir, "the bundled corpus"))
		}
		set.Files = files
		if set.Queries, err = half(set.Queries, o.Half); err != nil {
			return Set{}, nil, err
		}
		return set, corpus, nil
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return Set{}, nil, fmt.Errorf("eval: %s: %w", name, err)
	}
	root := cmp.Or(o.CorpusDir, set.Root)
	if root == "" {
		return Set{}, nil, fmt.Errorf("eval: %s names no root; pass the documents' directory", name)
	}
	corpus := os.DirFS(root)
	var files []string
	for _, pat := range set.Files {
		m, err := fs.Glob(corpus, pat)
		if err != nil {
			return Set{}, nil, fmt.Errorf("eval: %s: %w", pat, err)
		}
		if len(m) == 0 {
			return Set{}, nil, fmt.Errorf("eval: %s not found under %s (install the documents: %s)", pat, root, cmp.Or(set.Install, "see the set"))
		}
		files = append(files, m...)
	}
	if set.Queries, err = half(set.Queries, o.Half); err != nil {
		return Set{}, nil, err
	}
	if len(o.Files) > 0 {
		files = slices.DeleteFunc(files, func(f string) bool { return !slices.Contains(o.Files, f) })
		set.Queries = slices.DeleteFunc(set.Queries, func(q Query) bool {
			for _, p := range q.Passages {
				if slices.Contains(files, p.File) {
					return false
				}
			}
			return true
		})
	}
	set.Files = files
	return set, corpus, nil
}

// half keeps the queries of even or odd index (see Options.Half).
func half(qs []Query, h string) ([]Query, error) {
	var keep int
	switch h {
	case "":
		return qs, nil
	case "even":
		keep = 0
	case "odd":
		keep = 1
	default:
		return nil, fmt.Errorf("eval: half %q (want even or odd)", h)
	}
	var out []Query
	for i, q := range qs {
		if i%2 == keep {
			out = append(out, q)
		}
	}
	return out, nil
}

// Run indexes the corpus and scores every available mode.
func Run(ctx context.Context, o Options) ([]Scores, error) {
	set, corpus, err := LoadSet(o)
	if err != nil {
		return nil, err
	}
	queries := set.Queries
	if o.MaxQueries > 0 && len(queries) > o.MaxQueries {
		queries = queries[:o.MaxQueries]
	}
	chunkTokens := cmp.Or(o.ChunkTokens, set.ChunkTokens, 240)
	overlap := cmp.Or(o.OverlapTokens, set.OverlapTokens)
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
	if o.DenseOracle && !dense {
		return nil, errors.New("eval: the dense oracle needs an embeddings engine (an embedding URL and model, or the simulator)")
	}
	texts := map[string]string{} // file → normalised words of its whole text, to check the passages
	for _, name := range set.Files {
		data, err := fs.ReadFile(corpus, name)
		if err != nil {
			return nil, err
		}
		sniffName := name
		if strings.HasSuffix(name, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				return nil, fmt.Errorf("eval: %s: %w", name, err)
			}
			if data, err = io.ReadAll(io.LimitReader(zr, 256<<20)); err != nil {
				return nil, fmt.Errorf("eval: %s: %w", name, err)
			}
			sniffName = strings.TrimSuffix(name, ".gz")
		}
		ex, ok := extract.ForFormat(extract.Sniff(sniffName, data))
		if !ok {
			continue
		}
		doc, err := ex.Extract(ctx, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return nil, fmt.Errorf("eval: %s: %w", name, err)
		}
		chunks, err := chunk.Split(ctx, doc, chunk.Options{MaxTokens: chunkTokens, OverlapTokens: overlap}, tok)
		if err != nil {
			return nil, err
		}
		var all strings.Builder
		for _, c := range chunks {
			all.WriteString(c.Text)
			all.WriteByte(' ')
		}
		texts[name] = normWords(all.String())
		var vecs [][]float32
		if dense {
			ts := make([]string, len(chunks))
			for i, c := range chunks {
				ts[i] = c.Text
			}
			for start := 0; start < len(ts); start += 64 {
				v, err := embed(ctx, o, ts[start:min(start+64, len(ts))])
				if err != nil {
					return nil, err
				}
				vecs = append(vecs, v...)
			}
		}
		batch := make([]index.Chunk, len(chunks))
		for i, c := range chunks {
			terms, n := an.TermFreqs(c.Text)
			batch[i] = index.Chunk{ID: index.ChunkID("eval", "vs", name, c.Index), Tenant: "eval", StoreID: "vs", FileID: name, Index: c.Index,
				Text: c.Text, Terms: terms, Length: n, HeadingPath: c.HeadingPath, Pages: c.Pages}
			if dense {
				batch[i].Dense = vecs[i]
			}
		}
		if err := idx.Upsert(ctx, batch); err != nil {
			return nil, err
		}
	}
	// Every passage must be in its document: a question whose answer is not
	// there (a typo, another version of the package) would score 0 for every
	// mode and hide the difference between them.
	var missing []string
	for _, q := range queries {
		for _, p := range q.Passages {
			if !strings.Contains(texts[p.File], normWords(p.Passage)) {
				missing = append(missing, fmt.Sprintf("%q (%s)", p.Passage, p.File))
			}
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("eval: %d passages are not in their documents: %s", len(missing), strings.Join(missing, "; "))
	}
	modes := []string{ModeSparseBefore, ModeSparse}
	if dense {
		modes = append(modes, ModeDense, ModeHybrid, ModeHybridZScore, ModeHybridRRF, ModeHybridWeighted)
	}
	out := make([]Scores, len(modes))
	for i, m := range modes {
		out[i].Mode = m
	}
	for _, q := range queries {
		var vec []float32
		if dense {
			text := q.Query
			if o.DenseOracle {
				for _, p := range q.Passages {
					text += "\n" + p.Passage
				}
				for _, r := range q.Relevant {
					text += "\n" + r[1]
				}
			}
			v, err := embed(ctx, o, []string{text})
			if err != nil {
				return nil, err
			}
			vec = v[0]
		}
		before, _ := an.TermFreqs(q.Query)
		after := an.Query(q.Query, lexical.QueryOptions{})
		for i, mode := range modes {
			query := index.Query{Tenant: "eval", Limit: 10}
			switch mode {
			case ModeSparseBefore:
				query.Mode, query.Scoring, query.Terms = index.ModeSparse, index.ScoringBM25, before
			case ModeSparse:
				query.Mode, query.TermWeights, query.Ordered, query.Phrase = index.ModeSparse, after.Weights, after.Ordered, after.Words
			case ModeDense:
				query.Mode, query.Dense = index.ModeDense, vec
			case ModeHybrid, ModeHybridZScore, ModeHybridRRF, ModeHybridWeighted:
				query.Mode, query.TermWeights, query.Ordered, query.Phrase, query.Dense = index.ModeHybrid, after.Weights, after.Ordered, after.Words, vec
				switch mode {
				case ModeHybrid:
					query.Fusion = o.Hybrid
				case ModeHybridZScore:
					query.Fusion.Method = index.FusionZScore
				case ModeHybridRRF:
					query.Fusion.Method = index.FusionRRF
				case ModeHybridWeighted:
					query.Fusion.Method = index.FusionWeighted
				}
			}
			var hits []index.Hit
			if len(query.Terms) > 0 || len(query.TermWeights) > 0 || len(query.Phrase) > 0 || query.Dense != nil {
				if hits, err = idx.Search(ctx, query); err != nil {
					return nil, err
				}
			}
			ranked := make([]bool, len(hits))
			for j, h := range hits {
				ranked[j] = isRelevant(h.Chunk, &q)
			}
			n := q.relevantCount()
			out[i].Recall5 += Recall(ranked, n, 5)
			out[i].Recall10 += Recall(ranked, n, 10)
			out[i].MRR += ReciprocalRank(ranked)
			out[i].NDCG10 += NDCG(ranked, n, 10)
			out[i].Queries++
			rank := 0
			if rr := ReciprocalRank(ranked); rr > 0 {
				rank = int(math.Round(1 / rr))
			}
			out[i].Ranks = append(out[i].Ranks, rank)
			out[i].Questions = append(out[i].Questions, q.Query)
		}
	}
	for i := range out {
		if n := float64(out[i].Queries); n > 0 {
			out[i].Recall5, out[i].Recall10, out[i].MRR, out[i].NDCG10 = out[i].Recall5/n, out[i].Recall10/n, out[i].MRR/n, out[i].NDCG10/n
		}
	}
	return out, nil
}

// Answers reports whether chunk c answers one of the query's passages, as
// Run scores a hit (see isRelevant): callers that retrieve through the API
// score its results the same way.
func (q *Query) Answers(c index.Chunk) bool { return isRelevant(c, q) }

// isRelevant: the chunk answers one of the query's passages. A bundled-set
// passage: the chunk is from its file and belongs to its section (by heading
// path, or it carries the section's heading, as the first chunk of a file
// carries the title and the first section). A document-set passage: the
// chunk is from its file and holds the snippet (see Passage).
func isRelevant(c index.Chunk, q *Query) bool {
	for _, r := range q.Relevant {
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
	var text string
	for _, p := range q.Passages {
		if c.FileID != p.File {
			continue
		}
		if text == "" {
			text = normWords(c.Text)
		}
		if snippetIn(text, normWords(p.Passage)) {
			return true
		}
	}
	return false
}

// normWords lowercases s and keeps its words of letters and digits, one
// space between them: "Don't  use /usr/local!" → "don t use usr local".
func normWords(s string) string {
	var b strings.Builder
	space := true
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
			space = false
		} else if !space {
			b.WriteByte(' ')
			space = true
		}
	}
	return strings.TrimSpace(b.String())
}

// snippetIn: text holds snippet, or text ends with the first half (or more)
// of its words, or starts with the last half (or more): the snippet crosses
// the chunk's edge.
func snippetIn(text, snippet string) bool {
	if strings.Contains(text, snippet) {
		return true
	}
	words := strings.Fields(snippet)
	half := (len(words) + 1) / 2
	for n := len(words) - 1; n >= half && n > 0; n-- {
		if strings.HasSuffix(text, strings.Join(words[:n], " ")) || strings.HasPrefix(text, strings.Join(words[len(words)-n:], " ")) {
			return true
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
