// Package embedded is the in-process implementation of index.Index: per-tenant HNSW graphs for dense search,
// per-tenant inverted indexes for BM25, attribute filters inside every candidate search, persisted in one
// directory as a write-ahead log plus snapshots.
//
// The directory is flock'd by the process that opens it: one retriever replica owns an embedded index. To run
// several retrievers, use the Qdrant adapter (package index/qdrant) instead.
package embedded

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/aiforge/aiforge/pkg/lexical"
	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/hnsw"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/internal/codec"
)

// Config configures the embedded index.
type Config struct {
	// Dir holds the write-ahead log and the snapshot; created if missing. One process at a time (flock).
	Dir string
	// Dim fixes the dense dimension; 0 lets the first stored vector decide (the choice is persisted).
	Dim  int
	HNSW hnsw.Config
	// SnapshotBytes is the WAL size that triggers a snapshot (default 64 MiB), or a quarter of the last
	// snapshot's size when that is larger. Bigger means fewer snapshot pauses for writers but a longer replay
	// after a crash (replay re-inserts into the graph).
	SnapshotBytes int64
	// ExactSearchMax: a dense search whose candidate set (the tenant, or the chunks its filter admits) has at most
	// this many chunks is answered by exact brute force instead of the graph (default 2048).
	ExactSearchMax int
	// FloatVectorsInMemory keeps every full-precision vector on the Go heap and searches with float32 distances
	// (4 bytes per dimension per chunk in memory). By default (false) the graphs keep int8 codes (1 byte per
	// dimension) and search with them, the float32 vectors live in a scratch file in Dir (see vecfile.go) and the
	// best HNSW.Rescore × k candidates of each search are rescored with them.
	FloatVectorsInMemory bool
	// Seed seeds the HNSW level generator (0: random). Tests set it for reproducible graphs.
	Seed   uint64
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.HNSW = c.HNSW.WithDefaults()
	if c.SnapshotBytes == 0 {
		c.SnapshotBytes = 64 << 20
	}
	if c.ExactSearchMax == 0 {
		c.ExactSearchMax = 2048
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports configuration errors.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("embedded index: Dir is required"))
	}
	if c.Dim < 0 || c.Dim > 1<<16 {
		errs = append(errs, fmt.Errorf("embedded index: Dim %d out of range 0-65536", c.Dim))
	}
	if c.SnapshotBytes < 0 {
		errs = append(errs, fmt.Errorf("embedded index: SnapshotBytes %d is negative", c.SnapshotBytes))
	}
	if c.ExactSearchMax < 0 {
		errs = append(errs, fmt.Errorf("embedded index: ExactSearchMax %d is negative", c.ExactSearchMax))
	}
	if err := c.HNSW.WithDefaults().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("embedded index: %w", err))
	}
	return errors.Join(errs...)
}

// Index is the in-process index: per-tenant HNSW graphs (dense), per-tenant inverted indexes (BM25) and
// attribute filters, persisted in Dir as a write-ahead log plus periodic snapshots.
//
// Every mutation is appended to the WAL and fsync'd before it is applied and acknowledged; a crash loses at most
// the batch being written, and a torn record at the end of the WAL is cut off on the next open.
type Index struct {
	cfg Config
	log *slog.Logger

	writeMu sync.Mutex // serialises mutations, snapshots and Close
	wal     *walWriter // nil once closed
	broken  error      // set when the WAL is in an unknown state; all writes fail after it
	snapLen int64      // size of the last snapshot written or loaded (see maybeSnapshot)
	dirLock interface{ Close() error }

	mu      sync.RWMutex // guards the state below
	closed  bool
	dim     int
	tenants map[string]*tenant
	rng     *rand.Rand // graph seeds
	vecs    *vecFile   // full-precision vectors of the quantized graphs; created with the first graph

	accPool sync.Pool // *accumulator for BM25 scoring
}

var _ index.Index = (*Index)(nil)

type tenant struct {
	docs     []*doc            // by doc number; nil once deleted (numbers are not reused until the next open)
	byID     map[string]uint32 // chunk id → doc number
	stores   map[string]*storeDocs
	live     int
	totalLen int64
	// BM25F statistics of the heading fields: total lengths and the number of live documents that have the
	// field (its average is over those).
	ownLen, ancLen   int64
	ownDocs, ancDocs int
	termIdx          map[string]int32
	terms            []termPostings
	graph            *hnsw.Graph
	vseg             *vecSeg // the graph's vectors, when quantized
	deadDocs         int     // nil entries in docs
}

type storeDocs struct {
	files map[string]map[uint32]struct{}
	count int
}

type doc struct {
	c    index.Chunk // prepared; Dense nil
	node int32       // graph node, -1 without a vector
	// Heading fields (BM25F), derived from c.HeadingPath: lengths of the chunk's own (last) heading and of the
	// headings above it, and the terms found only there (not in c.Terms), which have postings too.
	ownLen, ancLen int32
	hterms         []string
	// nav: the chunk is navigation (a table of contents, a list of figures: see isNavigation), derived from
	// c.Text; its sparse score is multiplied by navigationDemotion.
	nav bool
}

type posting struct {
	doc uint32
	tf  uint32 // in the body (chunk text); 0 for a term found only in the headings
	own uint16 // in the chunk's own heading
	anc uint16 // in the headings above it
}

type termPostings struct {
	post  []posting
	df    int64 // live documents containing the term in the body
	dfAll int64 // live documents containing the term in any field
	stale int   // postings whose document is gone
}

// headingAnalyzer analyses heading paths into the BM25F heading fields (the same analysis as the text's).
var headingAnalyzer = lexical.NewEnglish()

// addDoc indexes doc num (already in t.docs): statistics and postings. Heading fields are derived here, so
// they need no place in the WAL or the snapshot.
func (t *tenant) addDoc(num uint32, d *doc) {
	c := &d.c
	d.nav = isNavigation(c.Text)
	t.live++
	t.totalLen += int64(c.Length)
	var own, anc map[string]uint32
	if n := len(c.HeadingPath); n > 0 {
		var ol, al int
		own, ol = headingAnalyzer.TermFreqs(c.HeadingPath[n-1])
		for _, h := range c.HeadingPath[:n-1] {
			tf, l := headingAnalyzer.TermFreqs(h)
			if anc == nil {
				anc = tf
			} else {
				for k, v := range tf {
					anc[k] += v
				}
			}
			al += l
		}
		d.ownLen, d.ancLen = int32(min(ol, 1<<20)), int32(min(al, 1<<20))
		if ol > 0 {
			t.ownLen += int64(d.ownLen)
			t.ownDocs++
		}
		if al > 0 {
			t.ancLen += int64(d.ancLen)
			t.ancDocs++
		}
	}
	add := func(term string, p posting) {
		idx, ok := t.termIdx[term]
		if !ok {
			idx = int32(len(t.terms))
			t.termIdx[term] = idx
			t.terms = append(t.terms, termPostings{})
		}
		tp := &t.terms[idx]
		tp.post = append(tp.post, p)
		if p.tf > 0 {
			tp.df++
		}
		tp.dfAll++
	}
	for term, tf := range c.Terms {
		add(term, posting{doc: num, tf: tf, own: sat16(own[term]), anc: sat16(anc[term])})
	}
	for _, m := range []map[string]uint32{own, anc} {
		for term := range m {
			if _, body := c.Terms[term]; body || slices.Contains(d.hterms, term) {
				continue
			}
			d.hterms = append(d.hterms, term)
			add(term, posting{doc: num, own: sat16(own[term]), anc: sat16(anc[term])})
		}
	}
}

func sat16(v uint32) uint16 { return uint16(min(v, 1<<16-1)) }

// Open opens (or creates) the index in cfg.Dir, loading the snapshot and replaying the WAL.
func Open(cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	e := &Index{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "index.embedded", "dir", cfg.Dir),
		dim:     cfg.Dim,
		tenants: make(map[string]*tenant),
		rng:     rand.New(rand.NewPCG(seed, seed>>1|1)),
	}
	if err := e.open(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Index) newTenant() *tenant {
	return &tenant{
		byID:    make(map[string]uint32),
		stores:  make(map[string]*storeDocs),
		termIdx: make(map[string]int32),
	}
}

// vectorStore returns a new segment of the vector file for a graph, or nil (a nil interface) when vectors stay
// in memory. Caller holds mu exclusively (or is loading).
func (e *Index) vectorStore(t *tenant) (hnsw.VectorStore, error) {
	if e.cfg.FloatVectorsInMemory {
		return nil, nil
	}
	if e.vecs == nil {
		f, err := createVecFile(e.cfg.Dir, e.dim)
		if err != nil {
			return nil, err
		}
		e.vecs = f
	}
	t.vseg.release()
	t.vseg = &vecSeg{file: e.vecs}
	return t.vseg, nil
}

func (e *Index) newGraph(t *tenant) (*hnsw.Graph, error) {
	store, err := e.vectorStore(t)
	if err != nil {
		return nil, err
	}
	return hnsw.New(e.dim, e.cfg.HNSW, e.rng.Uint64(), store), nil
}

// Upsert implements Index.
func (e *Index) Upsert(ctx context.Context, chunks []index.Chunk) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(chunks) == 0 {
		return nil
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	if err := e.writable(); err != nil {
		return err
	}
	prepared, err := index.PrepareChunks(chunks, e.currentDim())
	if err != nil {
		return err
	}
	var enc codec.Encoder
	enc.Byte(walUpsert)
	enc.Uvarint(uint64(len(prepared)))
	for i := range prepared {
		encodeChunk(&enc, &prepared[i], true)
	}
	if err := e.appendWAL(enc.Buf); err != nil {
		return err
	}
	if err := e.applyUpsert(prepared); err != nil {
		// Logged but not applied in full (the vector file failed): reopening replays the log.
		e.broken = err
		return fmt.Errorf("embedded index: upsert logged but not applied (reopen to recover): %w", err)
	}
	return e.maybeSnapshot()
}

// DeleteFile implements Index.
func (e *Index) DeleteFile(ctx context.Context, tenantID, storeID, fileID string) error {
	return e.delete(ctx, walDeleteFile, tenantID, storeID, fileID)
}

// DeleteStore implements Index.
func (e *Index) DeleteStore(ctx context.Context, tenantID, storeID string) error {
	return e.delete(ctx, walDeleteStore, tenantID, storeID, "")
}

func (e *Index) delete(ctx context.Context, op byte, tenantID, storeID, fileID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	errs := []error{index.ValidName("tenant", tenantID), index.ValidName("store id", storeID)}
	if op == walDeleteFile {
		errs = append(errs, index.ValidName("file id", fileID))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	if err := e.writable(); err != nil {
		return err
	}
	e.mu.RLock()
	n := e.countMatching(tenantID, storeID, fileID)
	e.mu.RUnlock()
	if n == 0 {
		return nil // nothing to log
	}
	var enc codec.Encoder
	enc.Byte(op)
	enc.Str(tenantID)
	enc.Str(storeID)
	if op == walDeleteFile {
		enc.Str(fileID)
	}
	if err := e.appendWAL(enc.Buf); err != nil {
		return err
	}
	e.mu.Lock()
	e.applyDelete(tenantID, storeID, fileID)
	e.mu.Unlock()
	return e.maybeSnapshot()
}

func (e *Index) countMatching(tenantID, storeID, fileID string) int {
	t := e.tenants[tenantID]
	if t == nil {
		return 0
	}
	s := t.stores[storeID]
	if s == nil {
		return 0
	}
	if fileID == "" {
		return s.count
	}
	return len(s.files[fileID])
}

// Count implements Index.
func (e *Index) Count(ctx context.Context, tenantID, storeID string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := index.ValidName("tenant", tenantID); err != nil {
		return 0, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return 0, index.ErrClosed
	}
	t := e.tenants[tenantID]
	switch {
	case t == nil:
		return 0, nil
	case storeID == "":
		return t.live, nil
	case t.stores[storeID] == nil:
		return 0, nil
	}
	return t.stores[storeID].count, nil
}

func (e *Index) currentDim() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.dim
}

func (e *Index) writable() error {
	if e.wal == nil {
		return index.ErrClosed
	}
	if e.broken != nil {
		return fmt.Errorf("embedded index is read-only after a failed write (reopen to recover): %w", e.broken)
	}
	return nil
}

// applyBatch bounds how long one mutation holds the state lock, so searches interleave with a large upsert.
const applyBatch = 128

// applyUpsert applies prepared chunks, releasing the state lock between sub-batches. An error is the vector
// file's.
func (e *Index) applyUpsert(chunks []index.Chunk) error {
	for start := 0; start < len(chunks); start += applyBatch {
		part := chunks[start:min(len(chunks), start+applyBatch)]
		e.mu.Lock()
		if e.dim == 0 {
			for i := range part {
				if part[i].Dense != nil {
					e.dim = len(part[i].Dense)
					break
				}
			}
		}
		byTenant := make(map[string][]*index.Chunk)
		var order []string
		for i := range part {
			c := &part[i]
			if _, ok := byTenant[c.Tenant]; !ok {
				order = append(order, c.Tenant)
			}
			byTenant[c.Tenant] = append(byTenant[c.Tenant], c)
		}
		for _, name := range order {
			t := e.tenants[name]
			if t == nil {
				t = e.newTenant()
				e.tenants[name] = t
			}
			if err := e.upsertTenant(t, byTenant[name]); err != nil {
				e.mu.Unlock()
				return err
			}
		}
		e.mu.Unlock()
	}
	return nil
}

func (e *Index) upsertTenant(t *tenant, chunks []*index.Chunk) error {
	vacuum := false
	for _, c := range chunks {
		if num, ok := t.byID[c.ID]; ok {
			vacuum = t.removeDoc(num) || vacuum
		}
	}
	var vecs [][]float32
	var labels []uint32
	for _, c := range chunks {
		num := uint32(len(t.docs))
		d := &doc{c: *c, node: -1}
		d.c.Dense = nil
		t.docs = append(t.docs, d)
		t.byID[c.ID] = num
		s := t.stores[c.StoreID]
		if s == nil {
			s = &storeDocs{files: make(map[string]map[uint32]struct{})}
			t.stores[c.StoreID] = s
		}
		f := s.files[c.FileID]
		if f == nil {
			f = make(map[uint32]struct{})
			s.files[c.FileID] = f
		}
		f[num] = struct{}{}
		s.count++
		t.addDoc(num, d)
		if c.Dense != nil {
			vecs = append(vecs, c.Dense)
			labels = append(labels, num)
		}
	}
	var err error
	if len(vecs) > 0 {
		if t.graph == nil {
			if t.graph, err = e.newGraph(t); err != nil {
				return err
			}
		}
		var ids []int32
		ids, err = t.graph.Add(vecs, labels)
		for i, id := range ids {
			t.docs[labels[i]].node = id
		}
	}
	if vacuum && t.graph != nil {
		t.graph.Vacuum()
	}
	t.maybeCompact()
	return err
}

// removeDoc deletes doc num from every structure; it reports whether the graph wants a vacuum.
func (t *tenant) removeDoc(num uint32) bool {
	d := t.docs[num]
	if d == nil {
		return false
	}
	t.docs[num] = nil
	t.deadDocs++
	delete(t.byID, d.c.ID)
	if s := t.stores[d.c.StoreID]; s != nil {
		if f := s.files[d.c.FileID]; f != nil {
			delete(f, num)
			if len(f) == 0 {
				delete(s.files, d.c.FileID)
			}
		}
		s.count--
		if s.count == 0 {
			delete(t.stores, d.c.StoreID)
		}
	}
	t.live--
	t.totalLen -= int64(d.c.Length)
	if d.ownLen > 0 {
		t.ownLen -= int64(d.ownLen)
		t.ownDocs--
	}
	if d.ancLen > 0 {
		t.ancLen -= int64(d.ancLen)
		t.ancDocs--
	}
	terms := make([]string, 0, len(d.c.Terms)+len(d.hterms))
	for term := range d.c.Terms {
		terms = append(terms, term)
	}
	terms = append(terms, d.hterms...)
	for i, term := range terms {
		idx, ok := t.termIdx[term]
		if !ok {
			continue
		}
		tp := &t.terms[idx]
		if i < len(d.c.Terms) {
			tp.df--
		}
		tp.dfAll--
		tp.stale++
		if tp.stale >= 16 && tp.stale*2 > len(tp.post) {
			tp.post = slices.DeleteFunc(tp.post, func(p posting) bool { return t.docs[p.doc] == nil })
			tp.stale = 0
		}
	}
	if d.node >= 0 && t.graph != nil {
		return t.graph.Remove(d.node)
	}
	return false
}

// maybeCompact renumbers documents once more than half of the numbers belong to deleted documents.
func (t *tenant) maybeCompact() {
	if t.deadDocs < 1024 || t.deadDocs*2 < len(t.docs) {
		return
	}
	remap := make([]uint32, len(t.docs))
	docs := make([]*doc, 0, t.live)
	for num, d := range t.docs {
		if d != nil {
			remap[num] = uint32(len(docs))
			docs = append(docs, d)
		}
	}
	for id, num := range t.byID {
		t.byID[id] = remap[num]
	}
	for _, s := range t.stores {
		for fid, f := range s.files {
			nf := make(map[uint32]struct{}, len(f))
			for num := range f {
				nf[remap[num]] = struct{}{}
			}
			s.files[fid] = nf
		}
	}
	for i := range t.terms {
		tp := &t.terms[i]
		out := tp.post[:0]
		for _, p := range tp.post {
			if t.docs[p.doc] != nil {
				p.doc = remap[p.doc]
				out = append(out, p)
			}
		}
		tp.post, tp.stale = out, 0
	}
	if t.graph != nil {
		t.graph.Relabel(func(num uint32) uint32 { return remap[num] })
	}
	t.docs, t.deadDocs = docs, 0
}

func (e *Index) applyDelete(tenantID, storeID, fileID string) {
	t := e.tenants[tenantID]
	if t == nil {
		return
	}
	s := t.stores[storeID]
	if s == nil {
		return
	}
	var nums []uint32
	for fid, f := range s.files {
		if fileID != "" && fid != fileID {
			continue
		}
		for num := range f {
			nums = append(nums, num)
		}
	}
	vacuum := false
	for _, num := range nums {
		vacuum = t.removeDoc(num) || vacuum
	}
	if t.live == 0 {
		t.vseg.release()
		delete(e.tenants, tenantID)
		return
	}
	if vacuum && t.graph != nil {
		t.graph.Vacuum()
	}
	t.maybeCompact()
}

// Search implements Index.
func (e *Index) Search(ctx context.Context, q index.Query) ([]index.Hit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, index.ErrClosed
	}
	p, err := index.PrepareQuery(q, e.dim)
	if err != nil {
		return nil, err
	}
	t := e.tenants[p.Tenant]
	if t == nil {
		return []index.Hit{}, nil
	}
	tie := func(a, b uint32) int { return strings.Compare(t.docs[a].c.ID, t.docs[b].c.ID) }
	var lists [][]index.Ranked[uint32]
	var weights []float64
	var absolute []bool
	if p.UseDense {
		dense, err := e.denseSearch(t, &p, tie)
		if err != nil {
			return nil, err
		}
		lists = append(lists, dense)
		weights, absolute = append(weights, p.Fusion.DenseWeight), append(absolute, true)
	}
	if p.UseSparse {
		lists = append(lists, e.sparseSearch(t, &p, tie))
		weights, absolute = append(weights, p.Fusion.SparseWeight), append(absolute, false)
	}
	var final []index.Ranked[uint32]
	if p.Fused() {
		final = index.FuseWeights(lists, weights, absolute, p.Fusion, p.Limit, tie)
	} else {
		final = lists[0]
		if len(final) > p.Limit {
			final = final[:p.Limit]
		}
	}
	hits := make([]index.Hit, 0, len(final))
	for _, r := range final {
		if !p.Passes(r.Score) {
			continue
		}
		hits = append(hits, index.Hit{Chunk: index.PublicChunk(&t.docs[r.Key].c), Score: r.Score})
	}
	return hits, nil
}

// admits is the store and attribute filter of a query.
func (t *tenant) admits(p *index.PreparedQuery, num uint32) bool {
	d := t.docs[num]
	if d == nil {
		return false
	}
	if p.Stores != nil && !p.Stores[d.c.StoreID] {
		return false
	}
	return p.Filter == nil || p.Filter.Matches(d.c.Attributes)
}

// estimateAdmitted estimates how many live documents a filtered query admits: exactly for a store-only filter,
// by a deterministic stride sample otherwise.
func (t *tenant) estimateAdmitted(p *index.PreparedQuery) int {
	if p.Filter == nil {
		n := 0
		for s := range p.Stores {
			if sd := t.stores[s]; sd != nil {
				n += sd.count
			}
		}
		return n
	}
	const samples = 256
	step := max(1, len(t.docs)/samples)
	seen, ok := 0, 0
	for i := 0; i < len(t.docs) && seen < samples; i += step {
		if t.docs[i] == nil {
			continue
		}
		seen++
		if t.admits(p, uint32(i)) {
			ok++
		}
	}
	if seen == 0 {
		return 0
	}
	return (ok*t.live + seen - 1) / seen
}

func (e *Index) denseSearch(t *tenant, p *index.PreparedQuery, tie func(a, b uint32) int) ([]index.Ranked[uint32], error) {
	g := t.graph
	if g == nil || g.Live() == 0 {
		return nil, nil
	}
	k := p.CandidateLimit
	if !p.Filtered() {
		if g.Live() <= e.cfg.ExactSearchMax {
			return t.exactDense(p, k, false, tie)
		}
		res, _, err := g.Search(p.UnitDense, k, g.EfSearch(e.cfg.HNSW.EfSearch), nil, 0)
		return fromGraph(res), err
	}
	est := t.estimateAdmitted(p)
	if est <= e.cfg.ExactSearchMax {
		return t.exactDense(p, k, true, tie)
	}
	// Filtered graph search: it walks through rejected nodes until it has collected ef admitted ones. The
	// expected walk grows as 1/selectivity; past the budget the exact scan is cheaper and exact.
	ef := g.EfSearch(e.cfg.HNSW.EfSearch)
	sel := float64(est) / float64(g.Live())
	budget := int(4*float64(max(ef, k))/max(sel, 1e-3)) + 8*g.M0()*max(ef, k)
	res, complete, err := g.Search(p.UnitDense, k, ef, func(label uint32) bool { return t.admits(p, label) }, budget)
	if err != nil {
		return nil, err
	}
	if !complete || (len(res) < k && est >= k) {
		return t.exactDense(p, k, true, tie)
	}
	return fromGraph(res), nil
}

func fromGraph(res []hnsw.Result) []index.Ranked[uint32] {
	out := make([]index.Ranked[uint32], len(res))
	for i, r := range res {
		out[i] = index.Ranked[uint32]{Key: r.Label, Score: r.Score}
	}
	return out
}

// exactDense scores every admitted document by brute force. A quantized graph scores them with the int8 codes
// and rescores the best RescoreFactor × k with the full-precision vectors, like its graph search.
func (t *tenant) exactDense(p *index.PreparedQuery, k int, filtered bool, tie func(a, b uint32) int) ([]index.Ranked[uint32], error) {
	g := t.graph
	sc := g.NewScorer(p.UnitDense)
	keep := k
	if g.Quantized() {
		keep = k * g.RescoreFactor()
	}
	var top topK
	top.init(keep, tie)
	score := func(num uint32) {
		d := t.docs[num]
		if d == nil || d.node < 0 || (filtered && !t.admits(p, num)) {
			return
		}
		top.offer(num, float64(sc.Approx(d.node)))
	}
	if p.Stores != nil {
		for s := range p.Stores {
			if sd := t.stores[s]; sd != nil {
				for _, f := range sd.files {
					for num := range f {
						score(num)
					}
				}
			}
		}
	} else {
		for num := range t.docs {
			score(uint32(num))
		}
	}
	if !g.Quantized() {
		return top.sorted(), nil
	}
	var exact topK
	exact.init(k, tie)
	for _, r := range top.heap {
		s, err := sc.Exact(t.docs[r.Key].node)
		if err != nil {
			return nil, err
		}
		exact.offer(r.Key, float64(s))
	}
	return exact.sorted(), nil
}

// BM25F fields: the chunk text, its own heading, the headings above it. A term in the chunk's own heading
// counts as three occurrences in the text, one in the headings above (title included) as one and a half;
// headings are short and their lengths vary little, so they are normalised less.
var bm25fFields = []lexical.Field{{Weight: 1, B: index.BM25B}, {Weight: 3, B: 0.5}, {Weight: 1.5, B: 0.5}}

var bm25Params = lexical.BM25{K1: index.BM25K1, B: index.BM25B}

const (
	// proximityWeight scales lexical.Proximity (IDF-weighted closeness of the user's terms in the text) into the
	// BM25F score: two query terms side by side add half the smaller one's IDF.
	proximityWeight = 0.5
	// proximityRescore is how many of the best BM25F candidates (at least) get the proximity boost.
	proximityRescore = 100
	// coordExponent is the exponent of the coordination factor (matched concepts / the query's concepts)^p that
	// multiplies a BM25F score: BM25 sums the terms' scores, so one rare word of a three-word question can
	// outrank a passage with all three; the factor rewards the passage that covers more of what was asked
	// (Lucene's classic coord is p = 1). A small p keeps it a tie-breaker between close scores: 0.25 helped
	// both halves of the Debian set (0.5 and 1 lost recall@10 on its FAQ), a coverage of 2 of 3 costs 10%.
	coordExponent = 0.25
	// phraseScanMax bounds the documents a stop-words-only query scans.
	phraseScanMax = 200_000
)

// sparseSearch scores admitted documents with this tenant's statistics (term at a time, into a dense
// accumulator indexed by document number): BM25F over the text and heading fields plus a proximity boost on
// the best candidates (index.ScoringBM25F), or plain BM25 over the text (index.ScoringBM25). A query with no
// terms but phrase words (only stop words) matches them as a phrase.
func (e *Index) sparseSearch(t *tenant, p *index.PreparedQuery, tie func(a, b uint32) int) []index.Ranked[uint32] {
	if t.live == 0 {
		return nil
	}
	if len(p.Weights) == 0 {
		return t.phraseSearch(p, tie)
	}
	plain := p.Scoring == index.ScoringBM25
	proximity := !plain && len(p.Ordered) > 1
	out, idf := e.sparsePass(t, p, p.Weights, tie)
	if proximity {
		t.proximityBoost(out, p.Ordered, idf, tie)
	}
	// Pseudo-relevance feedback: a query in the user's words finds the passages in the document's words
	// through the vocabulary of its best first-pass results (see feedback).
	if !plain && len(p.Ordered) > 0 && len(out) > 0 {
		if w := t.feedback(out, p.Weights); w != nil {
			var idf2 map[string]float64
			out, idf2 = e.sparsePass(t, p, w, tie)
			if proximity {
				t.proximityBoost(out, p.Ordered, idf2, tie)
			}
		}
	}
	if !plain {
		t.demoteNavigation(out, tie)
	}
	if len(out) > p.CandidateLimit {
		out = out[:p.CandidateLimit]
	}
	return out
}

const (
	// navigationDemotion multiplies the sparse score of a navigation chunk (a table of contents): it lists every
	// section's title, so a question matches it about as well as the section that answers it, but it answers
	// nothing. It stays findable (a query about the contents, or one nothing else matches, still gets it).
	navigationDemotion = 0.5
	// navigationLeaders is how many dot leaders ("Title . . . . . 27") make a chunk navigation.
	navigationLeaders = 5
)

// isNavigation reports whether text holds at least navigationLeaders dot leaders: runs of at least four
// periods, separated by nothing or by single spaces (". . . ." or "....", not an ellipsis), as tables of
// contents and lists of figures set between an entry and its page number. Prose has none.
func isNavigation(text string) bool {
	leaders, dots := 0, 0
	space := false
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '.':
			dots++
			space = false
			continue
		case ' ':
			if dots > 0 && !space {
				space = true
				continue
			}
		}
		if dots >= 4 {
			if leaders++; leaders >= navigationLeaders {
				return true
			}
		}
		dots, space = 0, false
	}
	return dots >= 4 && leaders+1 >= navigationLeaders
}

// demoteNavigation multiplies the scores of navigation chunks by navigationDemotion and sorts again.
func (t *tenant) demoteNavigation(out []index.Ranked[uint32], tie func(a, b uint32) int) {
	changed := false
	for i := range out {
		if t.docs[out[i].Key].nav {
			out[i].Score *= navigationDemotion
			changed = true
		}
	}
	if !changed {
		return
	}
	sortByScore(out, tie)
}

// proximityBoost adds the proximity of the query's terms in each candidate's text to its score, and sorts.
func (t *tenant) proximityBoost(out []index.Ranked[uint32], ordered []string, idf map[string]float64, tie func(a, b uint32) int) {
	weight := func(term string) float64 { return idf[term] }
	for i := range out {
		doc := headingAnalyzer.Terms(t.docs[out[i].Key].c.Text)
		out[i].Score += proximityWeight * lexical.Proximity(doc, ordered, weight)
	}
	sortByScore(out, tie)
}

// Pseudo-relevance feedback (RM3, Lavrenko & Croft 2001; Abdul-Jaleel et al. 2004): the best feedbackDocs
// results of a first pass are taken as relevant, the feedbackTerms terms most probable in them are added to
// the query, and the query is run again with the user's own weights kept at feedbackOriginal of the whole.
// The values are within the ranges usual over BM25 (10 documents, 10-20 terms, original weight 0.5-0.7;
// Anserini's defaults are 10, 10, 0.5); 20 terms at 0.7 did best on the Debian evaluation set.
const (
	feedbackDocs     = 10
	feedbackTerms    = 20
	feedbackOriginal = 0.7
	// feedbackMaxDF: a term in more than this share of the tenant's documents says nothing about a topic
	// (a product's name in its own manual) and is never added.
	feedbackMaxDF = 0.5
)

// feedback returns the expanded query weights of RM3 from the first pass's ranking out, or nil when there
// is nothing to add. A term's feedback weight is its relevance-model probability over the feedback
// documents, P(w|R) ∝ Σ_d P(w|d)·P(d|q) with P(w|d) = tf/|d| and P(d|q) the document's share of the feedback
// documents' scores; the top terms, normalised, share 1 − feedbackOriginal of the query's total weight (its
// IDF is applied when scoring, as for every term). Terms of the query itself are not added, nor terms found
// in more than feedbackMaxDF of the documents.
func (t *tenant) feedback(out []index.Ranked[uint32], orig map[string]float64) map[string]float64 {
	n := min(feedbackDocs, len(out))
	var total float64
	for _, r := range out[:n] {
		total += r.Score
	}
	if total <= 0 {
		return nil
	}
	fb := map[string]float64{}
	for _, r := range out[:n] {
		c := &t.docs[r.Key].c
		if c.Length <= 0 {
			continue
		}
		dw := r.Score / total
		for term, tf := range c.Terms {
			if _, ok := orig[term]; ok {
				continue
			}
			fb[term] += dw * float64(tf) / float64(c.Length)
		}
	}
	type tw struct {
		t string
		w float64
	}
	var cand []tw
	for term, w := range fb {
		idx, ok := t.termIdx[term]
		if !ok {
			continue
		}
		if float64(t.terms[idx].dfAll) > feedbackMaxDF*float64(t.live) || len(term) < 2 {
			continue
		}
		cand = append(cand, tw{term, w})
	}
	slices.SortFunc(cand, func(a, b tw) int {
		if a.w != b.w {
			if a.w > b.w {
				return -1
			}
			return 1
		}
		return strings.Compare(a.t, b.t)
	})
	cand = cand[:min(len(cand), feedbackTerms)]
	if len(cand) == 0 {
		return nil
	}
	var so, sf float64
	keys := make([]string, 0, len(orig))
	for term := range orig {
		keys = append(keys, term)
	}
	slices.Sort(keys) // a fixed summation order keeps scores reproducible
	for _, term := range keys {
		so += orig[term]
	}
	for _, c := range cand {
		sf += c.w
	}
	w := make(map[string]float64, len(orig)+len(cand))
	for term, v := range orig {
		w[term] = feedbackOriginal * v
	}
	for _, c := range cand {
		w[c.t] += (1 - feedbackOriginal) * c.w / sf * so
	}
	return w
}

// sparsePass is one scoring pass of sparseSearch without the proximity boost: the best candidates (at least
// proximityRescore when the query has an order) and the IDF of each query term found.
func (e *Index) sparsePass(t *tenant, p *index.PreparedQuery, weights map[string]float64, tie func(a, b uint32) int) ([]index.Ranked[uint32], map[string]float64) {
	plain := p.Scoring == index.ScoringBM25
	avg := []float64{float64(t.totalLen) / float64(t.live), 0, 0}
	if t.ownDocs > 0 {
		avg[1] = float64(t.ownLen) / float64(t.ownDocs)
	}
	if t.ancDocs > 0 {
		avg[2] = float64(t.ancLen) / float64(t.ancDocs)
	}
	terms := make([]string, 0, len(weights))
	for term := range weights {
		terms = append(terms, term)
	}
	slices.Sort(terms) // a fixed summation order keeps scores reproducible
	idf := make(map[string]float64, len(terms))
	acc := e.getAcc(len(t.docs))
	defer e.accPool.Put(acc)
	var tf [3]uint32
	var length [3]int
	concepts, nConcepts := queryConcepts(p.Ordered, weights)
	if plain {
		nConcepts = 0
	}
	for _, term := range terms {
		idx, ok := t.termIdx[term]
		if !ok {
			continue
		}
		tp := &t.terms[idx]
		df := tp.dfAll
		if plain {
			df = tp.df
		}
		if df <= 0 {
			continue
		}
		idf[term] = index.BM25IDF(df, int64(t.live))
		w := idf[term] * weights[term]
		for _, ps := range tp.post {
			d := t.docs[ps.doc]
			if d == nil || plain && ps.tf == 0 {
				continue
			}
			var sc float64
			if plain {
				sc = index.BM25TF(ps.tf, d.c.Length, avg[0])
			} else {
				tf = [3]uint32{ps.tf, uint32(ps.own), uint32(ps.anc)}
				length = [3]int{d.c.Length, int(d.ownLen), int(d.ancLen)}
				sc = bm25Params.FieldTF(bm25fFields, tf[:], length[:], avg[:])
			}
			if sc == 0 {
				continue
			}
			if acc.score[ps.doc] == 0 {
				acc.touched = append(acc.touched, ps.doc)
			}
			acc.score[ps.doc] += w * sc
			acc.concept[ps.doc] |= concepts[term]
		}
	}
	k := p.CandidateLimit
	if !plain && len(p.Ordered) > 1 {
		k = max(k, proximityRescore)
	}
	var top topK
	top.init(k, tie)
	for _, num := range acc.touched {
		s := acc.score[num]
		matched := bits.OnesCount64(acc.concept[num])
		acc.score[num], acc.concept[num] = 0, 0
		if nConcepts > 1 {
			s *= coordination(matched, nConcepts)
		}
		if s <= 0 || (p.Filtered() && !t.admits(p, num)) {
			continue
		}
		top.offer(num, s)
	}
	acc.touched = acc.touched[:0]
	return top.sorted(), idf
}

// queryConcepts groups a query's terms into concepts: each distinct user term (ordered) with its WordNet
// synonyms among the query's terms (as lexical.Analyzer.Query adds them). Other terms (question words, the
// feedback pass's terms) belong to none. It returns, per term, the bits of the concepts it belongs to (at most
// 64 concepts), and the number of concepts.
func queryConcepts(ordered []string, weights map[string]float64) (map[string]uint64, int) {
	m := make(map[string]uint64, len(weights))
	seen := make(map[string]bool, len(ordered))
	n := 0
	for _, s := range ordered {
		if seen[s] {
			continue
		}
		seen[s] = true
		if n == 64 {
			break
		}
		bit := uint64(1) << n
		n++
		m[s] |= bit
		for syn := range lexical.Expansions(s) {
			if _, ok := weights[syn]; ok {
				m[syn] |= bit
			}
		}
	}
	return m, n
}

// coordination is the share of a query's concepts a document matches, raised to coordExponent. A document
// found only through terms of no concept (the feedback pass's) counts half a concept: ranked lower, but kept.
func coordination(matched, total int) float64 {
	m := max(float64(matched), 0.5)
	return math.Pow(m/float64(total), coordExponent)
}

// phraseSearch matches a query made only of stop words as a phrase: a chunk whose own heading holds it scores
// 2, one whose text or other headings hold it scores 1. At most phraseScanMax documents are read.
func (t *tenant) phraseSearch(p *index.PreparedQuery, tie func(a, b uint32) int) []index.Ranked[uint32] {
	if len(p.Phrase) == 0 {
		return nil
	}
	var top topK
	top.init(p.CandidateLimit, tie)
	scanned := 0
	for num, d := range t.docs {
		if d == nil {
			continue
		}
		if scanned++; scanned > phraseScanMax {
			break
		}
		if p.Filtered() && !t.admits(p, uint32(num)) {
			continue
		}
		score := 0.0
		if n := len(d.c.HeadingPath); n > 0 && lexical.PhraseMatch(d.c.HeadingPath[n-1], p.Phrase) {
			score = 2
		} else if lexical.PhraseMatch(d.c.Text, p.Phrase) || lexical.PhraseMatch(strings.Join(d.c.HeadingPath, "\n"), p.Phrase) {
			score = 1
		}
		if score > 0 {
			top.offer(uint32(num), score)
		}
	}
	return top.sorted()
}

// accumulator is a reusable dense score array; touched lists the non-zero entries, which are zeroed after use.
type accumulator struct {
	score   []float64
	concept []uint64 // bit i: the document matched concept i of the query (see coordination)
	touched []uint32
}

func (e *Index) getAcc(n int) *accumulator {
	a, _ := e.accPool.Get().(*accumulator)
	if a == nil {
		a = &accumulator{}
	}
	if len(a.score) < n {
		a.score = make([]float64, n+n/4)
		a.concept = make([]uint64, n+n/4)
	}
	return a
}

// topK keeps the k best (highest score) candidates.
type topK struct {
	k    int
	tie  func(a, b uint32) int
	heap []index.Ranked[uint32] // min-heap by (score, reverse tie): the worst at [0]
}

func (h *topK) init(k int, tie func(a, b uint32) int) { h.k, h.tie = k, tie }

// worse reports whether a ranks below b.
func (h *topK) worse(a, b index.Ranked[uint32]) bool {
	if a.Score != b.Score {
		return a.Score < b.Score
	}
	return h.tie(a.Key, b.Key) > 0
}

func (h *topK) offer(key uint32, score float64) {
	c := index.Ranked[uint32]{Key: key, Score: score}
	if len(h.heap) == h.k {
		if !h.worse(h.heap[0], c) {
			return
		}
		h.heap[0] = c
		h.down(0)
		return
	}
	h.heap = append(h.heap, c)
	for i := len(h.heap) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.worse(h.heap[i], h.heap[p]) {
			break
		}
		h.heap[i], h.heap[p] = h.heap[p], h.heap[i]
		i = p
	}
}

func (h *topK) down(i int) {
	s := h.heap
	for {
		l := 2*i + 1
		if l >= len(s) {
			return
		}
		m := l
		if r := l + 1; r < len(s) && h.worse(s[r], s[l]) {
			m = r
		}
		if !h.worse(s[m], s[i]) {
			return
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
}

func (h *topK) sorted() []index.Ranked[uint32] {
	sortByScore(h.heap, h.tie)
	return h.heap
}

// sortByScore sorts best first, ties broken by tie.
func sortByScore(out []index.Ranked[uint32], tie func(a, b uint32) int) {
	slices.SortFunc(out, func(a, b index.Ranked[uint32]) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return tie(a.Key, b.Key)
	})
}

// Close snapshots the index (when the WAL holds anything) and releases the directory.
func (e *Index) Close() error {
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	if e.wal == nil {
		return nil
	}
	var errs []error
	if e.broken == nil && e.wal.size > walHeaderLen {
		if err := e.snapshot(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, e.wal.close(), e.vecs.close(), e.dirLock.Close())
	e.wal, e.vecs = nil, nil
	e.mu.Lock()
	e.closed = true
	e.tenants = nil
	e.mu.Unlock()
	return errors.Join(errs...)
}
