// Package index is the retriever's chunk index contract: the Index interface, the chunk, query, filter and hit
// types, their validation (PrepareChunks, PrepareQuery) and the scoring every implementation shares. Chunks are
// searched by dense vectors (cosine), by sparse lexical terms (BM25F over text and headings with a proximity boost,
// or plain BM25) and by both at once (hybrid: weighted Reciprocal Rank Fusion or weighted scores of the two
// candidate lists).
//
// Two implementations, both passing the contract suite in package indextest:
//
//   - index/embedded (embedded.Open): in process, persisted in a directory (write-ahead log plus snapshots),
//     with a hand-written HNSW graph per tenant (index/embedded/hnsw) and a per-tenant inverted index for BM25.
//     The default. The directory is locked by the process that opens it, so exactly one retriever replica
//     serves an embedded index.
//   - index/qdrant (qdrant.New): one Qdrant collection with named dense and sparse vectors. Retrievers keep no
//     state of their own (BM25 statistics are derived from the collection), so any number of replicas can share
//     one collection.
//
// Tenant isolation is absolute: chunks are keyed by (tenant, chunk id), every search is confined to one tenant,
// and keyword statistics (document count, document frequencies, average length) are kept per tenant, so the
// corpus of one tenant never changes the scores seen by another.
//
// Scores: dense mode returns cosine similarity, sparse mode returns the BM25F (or BM25) score, hybrid mode returns
// the fused score on [0, 1] (RRF: 1 = ranked first by every ranker that took part; weighted: the weighted mean of
// the normalised scores). ScoreThreshold compares against
// that score.
package index

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Search modes.
const (
	ModeHybrid = "hybrid" // fusion (Query.Fusion) of the dense and sparse candidate lists (whichever the query carries); the default
	ModeDense  = "dense"  // cosine similarity only
	ModeSparse = "sparse" // BM25 only
)

// Limits and scoring constants shared by every implementation.
const (
	DefaultLimit = 10 // Query.Limit 0 means this (OpenAI max_num_results default)
	MaxLimit     = 50 // OpenAI max_num_results maximum

	// CandidateFactor sizes each candidate list of a hybrid query: CandidateFactor × Limit.
	CandidateFactor = 4
	// RRFK is the Reciprocal Rank Fusion constant: a candidate at 0-based position p of a list contributes
	// 1/(RRFK+p). This is Qdrant's definition, so both implementations produce the same fused scores.
	RRFK = 60

	BM25K1 = 1.2
	BM25B  = 0.75

	MaxAttributes     = 16  // OpenAI vector store file attributes
	MaxAttributeKey   = 64  // characters
	MaxAttributeValue = 512 // bytes of a string value
	maxNameLen        = 512 // tenant, store, file and chunk ids
)

// ErrInvalid marks bad input (a chunk, filter or query that can never succeed); callers map it to a 400.
var ErrInvalid = errors.New("invalid input")

// ErrClosed is returned by every method of a closed index.
var ErrClosed = errors.New("index closed")

// Chunk is one retrievable piece of a file.
type Chunk struct {
	// ID is deterministic (see ChunkID) so that upserts are idempotent. Chunks are keyed by (Tenant, ID):
	// equal ids in two tenants are two chunks.
	ID      string
	Tenant  string
	StoreID string
	FileID  string
	Index   int // chunk number in the file
	Text    string
	// Dense is the embedding; nil when no embedding engine is configured. Stored normalised; never returned.
	Dense []float32
	// Terms are analyzed term frequencies (the sparse, lexical representation). Never returned by Search.
	Terms map[string]uint32
	// Length is the number of analyzed terms (BM25 document length). 0 with non-empty Terms means "sum of Terms".
	Length      int
	Pages       []int
	HeadingPath []string
	// Attributes are the file attributes: string, float64 or bool values (integers are accepted and stored as
	// float64), at most 16 keys.
	Attributes map[string]any
}

// Hit is one search result. Its Chunk carries neither Dense nor Terms.
type Hit struct {
	Chunk Chunk
	Score float64
}

// Query is one search.
type Query struct {
	Tenant string
	// StoreIDs restricts the search to these vector stores; empty means every store of the tenant.
	StoreIDs []string
	Dense    []float32         // optional query embedding
	Terms    map[string]uint32 // optional analyzed query terms (frequency multiplies the term's weight)
	Filter   *Filter
	Limit    int    // 1..50; 0 means 10
	Mode     string // ModeHybrid (default), ModeDense or ModeSparse
	// ScoreThreshold drops hits scoring below it (see the package comment for the scale of each mode); 0 means
	// no threshold (cosine similarities can be negative).
	ScoreThreshold float64
	// TermWeights are weighted query terms (lexical.Analyzer.Query: the user's terms, question words and
	// synonyms at their weights); they add to Terms (a term in both weighs the sum).
	TermWeights map[string]float64
	// Ordered are the user's own terms in the order written: the proximity boost of ScoringBM25F.
	Ordered []string
	// Phrase are the words of a query made only of stop words (lexical.QueryTerms.Words): with no terms, a
	// sparse search matches them as a phrase in chunk texts and headings instead of matching nothing.
	Phrase []string
	// Scoring selects the sparse scorer: ScoringBM25F (the default) or ScoringBM25.
	Scoring string
	// Fusion is how a hybrid query combines its dense and sparse lists.
	Fusion Fusion
}

// Sparse scorers.
const (
	// ScoringBM25F scores the body, the chunk's own heading and the headings above it as BM25F fields (each
	// with its own weight and length normalisation, per-tenant averages), plus a proximity boost for the
	// user's terms occurring close together in the chunk text (embedded index; the Qdrant index scores
	// BM25 over the body).
	ScoringBM25F = "bm25f"
	// ScoringBM25 is plain BM25 over the chunk text (body) only.
	ScoringBM25 = "bm25"
)

// Fusion methods.
const (
	// FusionAgreement (the default): z-score normalised scores, the dense list weighted by its agreement with
	// the sparse one (see FuseWeights) and, by default, at AgreementDenseWeight.
	FusionAgreement = "agreement"
	// FusionZScore: z-score normalised scores, weighted as given (no agreement factor): for an embedding model
	// known to be strong, whose list should count whether or not the keyword list agrees.
	FusionZScore   = "zscore"
	FusionRRF      = "rrf"      // weighted Reciprocal Rank Fusion
	FusionWeighted = "weighted" // weighted sum of scores on [0, 1]: cosine as is, BM25 divided by the best
)

// Fusion configures hybrid fusion. The zero value is FusionAgreement with equal weights.
type Fusion struct {
	Method string // FusionAgreement (default), FusionZScore, FusionRRF or FusionWeighted
	// DenseWeight and SparseWeight weigh the two lists (OpenAI's hybrid_search embedding_weight and
	// text_weight); both 0 means the defaults: AgreementDenseWeight and 1 for FusionAgreement, 1 and 1 for
	// the others. Negative or non-finite weights are invalid.
	DenseWeight, SparseWeight float64
	// RRFK is RRF's constant k; 0 means RRFK (60).
	RRFK int
}

// AgreementDenseWeight is the dense list's default weight in FusionAgreement, against 1 for the sparse list:
// on top of its agreement with the sparse list, the dense list counts a little under half as much. It is chosen
// on the debian evaluation set with the engine simulator's embeddings (a weak model): the largest weight tried
// (0.3 to 0.7) at which hybrid is at or above sparse search on the whole set in recall@5, recall@10 and MRR
// (0.643 / 0.757 / 0.453 against 0.643 / 0.748 / 0.451; at 0.5 MRR is 0.449). At equal weights the fusion lost
// to sparse alone on every single-document set (recall@5 on the FAQ PDF 0.690 against 0.714, on its held-out
// questions 0.714 against 0.771, on the ReportLab guide 0.640 against 0.680). With so weak a model it stays
// close to sparse either way: at or above its recall@5 on each single manual and on the odd half of the set,
// below it on the even half (0.655 against 0.672) and on the second held-out set, debian-heldout2 (0.647
// against 0.676). Weights a query gives are used as given.
const AgreementDenseWeight = 0.45

// ServerRRF reports whether f is plain RRF with k = 60 and equal weights (what Qdrant fuses server-side).
func (f Fusion) ServerRRF() bool {
	return f.Method == FusionRRF && f.RRFK == RRFK && f.DenseWeight == f.SparseWeight
}

// normalize applies the defaults and validates f.
func (f Fusion) normalize() (Fusion, error) {
	if f.Method == "" {
		f.Method = FusionAgreement
	}
	if f.Method != FusionAgreement && f.Method != FusionZScore && f.Method != FusionRRF && f.Method != FusionWeighted {
		return f, Invalidf("unknown fusion %q (want %s, %s, %s or %s)", f.Method, FusionAgreement, FusionZScore, FusionRRF, FusionWeighted)
	}
	for _, w := range []float64{f.DenseWeight, f.SparseWeight} {
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return f, Invalidf("fusion weights must be finite and not negative")
		}
	}
	if f.DenseWeight == 0 && f.SparseWeight == 0 {
		f.DenseWeight, f.SparseWeight = 1, 1
		if f.Method == FusionAgreement {
			f.DenseWeight = AgreementDenseWeight
		}
	}
	if f.RRFK == 0 {
		f.RRFK = RRFK
	}
	if f.RRFK < 1 || f.RRFK > 10000 {
		return f, Invalidf("rrf k %d out of range 1-10000", f.RRFK)
	}
	return f, nil
}

// Index is a tenant-isolated chunk index.
type Index interface {
	// Upsert inserts or replaces chunks (keyed by tenant and id). The batch is validated as a whole first:
	// an invalid chunk rejects the batch and changes nothing.
	Upsert(ctx context.Context, chunks []Chunk) error
	// DeleteFile removes every chunk of one file.
	DeleteFile(ctx context.Context, tenant, storeID, fileID string) error
	// DeleteStore removes every chunk of one vector store.
	DeleteStore(ctx context.Context, tenant, storeID string) error
	// Search returns at most Limit hits, best first.
	Search(ctx context.Context, q Query) ([]Hit, error)
	// Count returns the number of chunks in a store (storeID "" counts the whole tenant).
	Count(ctx context.Context, tenant, storeID string) (int, error)
	Close() error
}

// ChunkID derives the deterministic id of chunk number index of a file: re-chunking the same file produces the
// same ids, so re-ingesting replaces instead of duplicating.
func ChunkID(tenant, storeID, fileID string, index int) string {
	h := sha256.New()
	for _, s := range []string{tenant, storeID, fileID} {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutVarint(n[:], int64(index))])
	return "chk_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Invalidf returns an error wrapping ErrInvalid.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ValidName checks a tenant, store, file or chunk id: non-empty, at most 512 bytes, valid UTF-8.
func ValidName(what, s string) error {
	switch {
	case s == "":
		return Invalidf("%s is required", what)
	case len(s) > maxNameLen:
		return Invalidf("%s longer than %d bytes", what, maxNameLen)
	case !utf8.ValidString(s):
		return Invalidf("%s is not valid UTF-8", what)
	}
	return nil
}

// validAttributeKey applies the key rules shared by chunks and filters: 1-64 characters, valid UTF-8, no control
// characters and no double quote (the Qdrant backend quotes keys in JSON paths).
func validAttributeKey(k string) error {
	if k == "" {
		return Invalidf("attribute key is empty")
	}
	if !utf8.ValidString(k) {
		return Invalidf("attribute key %q is not valid UTF-8", k)
	}
	if utf8.RuneCountInString(k) > MaxAttributeKey {
		return Invalidf("attribute key %q longer than %d characters", k, MaxAttributeKey)
	}
	for _, r := range k {
		if r < 0x20 || r == 0x7f || r == '"' {
			return Invalidf("attribute key %q contains a control character or a double quote", k)
		}
	}
	return nil
}

// normalizeScalar converts an attribute or filter value to string, float64 or bool.
func normalizeScalar(v any) (any, error) {
	switch x := v.(type) {
	case string:
		if !utf8.ValidString(x) {
			return nil, Invalidf("string value is not valid UTF-8")
		}
		if len(x) > MaxAttributeValue {
			return nil, Invalidf("string value longer than %d bytes", MaxAttributeValue)
		}
		return x, nil
	case bool:
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, Invalidf("number value is not finite")
		}
		return x, nil
	case float32:
		return normalizeScalar(float64(x))
	case int:
		return float64(x), nil
	case int8:
		return float64(x), nil
	case int16:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case uint:
		return float64(x), nil
	case uint8:
		return float64(x), nil
	case uint16:
		return float64(x), nil
	case uint32:
		return float64(x), nil
	case uint64:
		return float64(x), nil
	case nil:
		return nil, Invalidf("value is null")
	default:
		return nil, Invalidf("value of type %T (want string, number or bool)", v)
	}
}

// prepareChunk validates c and returns the stored form: attributes normalised, Length filled in, slices and maps
// copied (the caller may reuse its own), Dense normalised to unit length. dim is the required dense dimension
// (0: any).
func prepareChunk(c Chunk, dim int) (Chunk, error) {
	var errs []error
	for _, f := range []struct{ what, v string }{
		{"chunk id", c.ID}, {"tenant", c.Tenant}, {"store id", c.StoreID}, {"file id", c.FileID},
	} {
		if err := ValidName(f.what, f.v); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Index < 0 {
		errs = append(errs, Invalidf("chunk index %d is negative", c.Index))
	}
	if !utf8.ValidString(c.Text) {
		errs = append(errs, Invalidf("text is not valid UTF-8"))
	}
	if c.Length < 0 {
		errs = append(errs, Invalidf("length %d is negative", c.Length))
	}
	out := Chunk{
		ID: c.ID, Tenant: c.Tenant, StoreID: c.StoreID, FileID: c.FileID, Index: c.Index, Text: c.Text,
		Length: c.Length,
	}
	if c.Dense != nil {
		v, err := normalized(c.Dense)
		if err != nil {
			errs = append(errs, err)
		} else if dim > 0 && len(v) != dim {
			errs = append(errs, Invalidf("dense vector has %d dimensions, index has %d", len(v), dim))
		}
		out.Dense = v
	}
	if len(c.Terms) > 0 {
		out.Terms = make(map[string]uint32, len(c.Terms))
		var sum int
		for t, tf := range c.Terms {
			if t == "" || !utf8.ValidString(t) {
				errs = append(errs, Invalidf("term %q is empty or not valid UTF-8", t))
				continue
			}
			if tf == 0 {
				continue // a zero frequency is no occurrence
			}
			out.Terms[t] = tf
			sum += int(tf)
		}
		if out.Length == 0 {
			out.Length = sum
		}
		if len(out.Terms) == 0 {
			out.Terms = nil
		}
	}
	if c.Pages != nil {
		out.Pages = append([]int(nil), c.Pages...)
	}
	if c.HeadingPath != nil {
		out.HeadingPath = append([]string(nil), c.HeadingPath...)
		for _, h := range c.HeadingPath {
			if !utf8.ValidString(h) {
				errs = append(errs, Invalidf("heading path is not valid UTF-8"))
				break
			}
		}
	}
	if len(c.Attributes) > MaxAttributes {
		errs = append(errs, Invalidf("%d attributes (at most %d)", len(c.Attributes), MaxAttributes))
	}
	if len(c.Attributes) > 0 {
		out.Attributes = make(map[string]any, len(c.Attributes))
		for k, v := range c.Attributes {
			if err := validAttributeKey(k); err != nil {
				errs = append(errs, err)
				continue
			}
			nv, err := normalizeScalar(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("attribute %q: %w", k, err))
				continue
			}
			out.Attributes[k] = nv
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Chunk{}, fmt.Errorf("chunk %q: %w", c.ID, err)
	}
	return out, nil
}

// PrepareChunks validates a batch for an index of dense dimension dim (0: the batch's first vector decides) and
// returns the stored forms (see Chunk), dropping earlier duplicates of the same (tenant, id): the last one wins.
func PrepareChunks(chunks []Chunk, dim int) ([]Chunk, error) {
	out := make([]Chunk, 0, len(chunks))
	pos := make(map[[2]string]int, len(chunks))
	var errs []error
	for _, c := range chunks {
		p, err := prepareChunk(c, dim)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if dim == 0 && p.Dense != nil {
			dim = len(p.Dense) // one batch, one dimension
		}
		k := [2]string{p.Tenant, p.ID}
		if i, ok := pos[k]; ok {
			out[i] = p
			continue
		}
		pos[k] = len(out)
		out = append(out, p)
	}
	if len(errs) > 0 {
		if len(errs) > 10 {
			errs = append(errs[:10], fmt.Errorf("and %d more invalid chunks", len(errs)-10))
		}
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// PreparedQuery is a validated query in the form every implementation executes.
type PreparedQuery struct {
	Query                             // Limit and Mode filled in, Filter normalised
	Stores         map[string]bool    // StoreIDs as a set; nil: every store
	UnitDense      []float32          // the query vector normalised; nil when not given
	PositiveTerms  map[string]uint32  // query terms with a positive frequency
	Weights        map[string]float64 // every query term with a positive weight: Terms plus TermWeights
	UseDense       bool               // the dense ranker takes part
	UseSparse      bool               // the sparse (BM25) ranker takes part
	CandidateLimit int                // size of each candidate list (CandidateFactor × Limit for hybrid)
}

// PrepareQuery validates q against an index of dense dimension dim (0: any) and returns it prepared; errors wrap
// ErrInvalid.
func PrepareQuery(q Query, dim int) (PreparedQuery, error) {
	var errs []error
	if err := ValidName("tenant", q.Tenant); err != nil {
		errs = append(errs, err)
	}
	p := PreparedQuery{Query: q}
	if p.Limit == 0 {
		p.Limit = DefaultLimit
	}
	if p.Limit < 1 || p.Limit > MaxLimit {
		errs = append(errs, Invalidf("limit %d out of range 1-%d", q.Limit, MaxLimit))
	}
	if p.Mode == "" {
		p.Mode = ModeHybrid
	}
	if math.IsNaN(q.ScoreThreshold) || math.IsInf(q.ScoreThreshold, 0) {
		errs = append(errs, Invalidf("score threshold is not finite"))
	}
	if len(q.StoreIDs) > 0 {
		p.Stores = make(map[string]bool, len(q.StoreIDs))
		for _, s := range q.StoreIDs {
			if err := ValidName("store id", s); err != nil {
				errs = append(errs, err)
			}
			p.Stores[s] = true
		}
	}
	if q.Dense != nil {
		v, err := normalized(q.Dense)
		if err != nil {
			errs = append(errs, fmt.Errorf("query vector: %w", err))
		} else if dim > 0 && len(v) != dim {
			errs = append(errs, Invalidf("query vector has %d dimensions, index has %d", len(v), dim))
		}
		p.UnitDense = v
	}
	if len(q.Terms) > 0 {
		p.PositiveTerms = make(map[string]uint32, len(q.Terms))
		for t, tf := range q.Terms {
			if t == "" {
				errs = append(errs, Invalidf("query term is empty"))
				continue
			}
			if tf > 0 {
				p.PositiveTerms[t] = tf
			}
		}
	}
	if len(q.TermWeights) > 0 || len(p.PositiveTerms) > 0 {
		p.Weights = make(map[string]float64, len(p.PositiveTerms)+len(q.TermWeights))
		for t, tf := range p.PositiveTerms {
			p.Weights[t] = float64(tf)
		}
		for t, w := range q.TermWeights {
			switch {
			case t == "":
				errs = append(errs, Invalidf("query term is empty"))
			case math.IsNaN(w) || math.IsInf(w, 0):
				errs = append(errs, Invalidf("query term weight is not finite"))
			case w > 0:
				p.Weights[t] += w
			}
		}
		if len(p.Weights) == 0 {
			p.Weights = nil
		}
	}
	if len(q.Phrase) > 64 {
		errs = append(errs, Invalidf("%d phrase words (at most 64)", len(q.Phrase)))
	}
	switch p.Scoring {
	case "":
		p.Scoring = ScoringBM25F
	case ScoringBM25F, ScoringBM25:
	default:
		errs = append(errs, Invalidf("unknown scoring %q (want %s or %s)", q.Scoring, ScoringBM25F, ScoringBM25))
	}
	if f, err := q.Fusion.normalize(); err != nil {
		errs = append(errs, err)
	} else {
		p.Fusion = f
	}
	hasDense, hasSparse := p.UnitDense != nil, len(p.Weights) > 0 || len(q.Phrase) > 0
	switch p.Mode {
	case ModeHybrid:
		p.UseDense, p.UseSparse = hasDense, hasSparse
		if !hasDense && !hasSparse {
			errs = append(errs, Invalidf("a hybrid query needs a dense vector, terms or both"))
		}
	case ModeDense:
		p.UseDense = true
		if !hasDense {
			errs = append(errs, Invalidf("a dense query needs a dense vector"))
		}
	case ModeSparse:
		p.UseSparse = true
		if !hasSparse {
			errs = append(errs, Invalidf("a sparse query needs terms"))
		}
	default:
		errs = append(errs, Invalidf("unknown mode %q (want %s, %s or %s)", q.Mode, ModeHybrid, ModeDense, ModeSparse))
	}
	if q.Filter != nil {
		f, err := q.Filter.normalize(0)
		if err != nil {
			errs = append(errs, fmt.Errorf("filter: %w", err))
		} else {
			p.Filter = &f
		}
	}
	if err := errors.Join(errs...); err != nil {
		return PreparedQuery{}, err
	}
	p.CandidateLimit = p.Limit
	if p.Mode == ModeHybrid {
		p.CandidateLimit = CandidateFactor * p.Limit
	}
	return p, nil
}

// Passes applies the score threshold.
func (p *PreparedQuery) Passes(score float64) bool {
	return p.ScoreThreshold == 0 || score >= p.ScoreThreshold
}

// Fused reports whether hits are scored by RRF.
func (p *PreparedQuery) Fused() bool { return p.Mode == ModeHybrid }

// Filtered reports whether the query restricts stores or attributes.
func (p *PreparedQuery) Filtered() bool { return p.Stores != nil || p.Filter != nil }

// Lists returns the number of rankers fused by a hybrid query.
func (p *PreparedQuery) Lists() int {
	n := 0
	if p.UseDense {
		n++
	}
	if p.UseSparse {
		n++
	}
	return n
}

// PublicChunk returns a copy of c suitable for a Hit: no vectors, no shared maps or slices.
func PublicChunk(c *Chunk) Chunk {
	out := *c
	out.Dense = nil
	out.Terms = nil
	if c.Pages != nil {
		out.Pages = append([]int(nil), c.Pages...)
	}
	if c.HeadingPath != nil {
		out.HeadingPath = append([]string(nil), c.HeadingPath...)
	}
	if c.Attributes != nil {
		out.Attributes = make(map[string]any, len(c.Attributes))
		for k, v := range c.Attributes {
			out.Attributes[k] = v
		}
	}
	return out
}

func normalized(v []float32) ([]float32, error) {
	if len(v) == 0 {
		return nil, Invalidf("dense vector is empty")
	}
	var s float64
	for _, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, Invalidf("dense vector has a non-finite component")
		}
		s += f * f
	}
	if s == 0 {
		return nil, Invalidf("dense vector is all zeros (cosine undefined)")
	}
	inv := 1 / math.Sqrt(s)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out, nil
}
