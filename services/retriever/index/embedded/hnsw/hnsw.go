// Package hnsw is the embedded index's dense graph: Hierarchical Navigable Small World (Malkov & Yashunin,
// "Efficient and robust approximate nearest neighbor search using Hierarchical Navigable Small World graphs",
// 2016) over unit vectors, with tombstones, vacuum, filtered search and an AVX2 inner product.
package hnsw

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// Config tunes a graph.
type Config struct {
	M              int // links per node on the upper layers (layer 0 keeps 2M); default 16
	EfConstruction int // candidate list size while inserting; default 200
	// EfSearch is the candidate list size while searching (at least the number of results asked). 0 (the
	// default) sizes it to the graph: DefaultEfSearch of its live nodes, 128 up to 100,000 and growing with the
	// logarithm of the node count beyond (256 at 1,000,000).
	EfSearch int
	// Rescore: a quantized graph (one with a VectorStore) rescores the best Rescore×k candidates of the int8
	// search with the full-precision vectors; default 4.
	Rescore int
}

// WithDefaults fills in the zero fields.
func (c Config) WithDefaults() Config {
	if c.M == 0 {
		c.M = 16
	}
	if c.EfConstruction == 0 {
		c.EfConstruction = 200
	}
	if c.Rescore == 0 {
		c.Rescore = 4
	}
	return c
}

// Validate reports parameters out of range (call it on WithDefaults).
func (c Config) Validate() error {
	var errs []error
	if c.M < 2 || c.M > 128 {
		errs = append(errs, fmt.Errorf("hnsw M %d out of range 2-128", c.M))
	}
	if c.EfConstruction < c.M || c.EfConstruction > 4096 {
		errs = append(errs, fmt.Errorf("hnsw efConstruction %d out of range M-4096", c.EfConstruction))
	}
	if c.EfSearch < 0 || c.EfSearch > maxEfSearch {
		errs = append(errs, fmt.Errorf("hnsw efSearch %d out of range 0-%d (0: sized to the graph)", c.EfSearch, maxEfSearch))
	}
	if c.Rescore < 1 || c.Rescore > 64 {
		errs = append(errs, fmt.Errorf("hnsw rescore factor %d out of range 1-64", c.Rescore))
	}
	return errors.Join(errs...)
}

const (
	// minEfSearch is the default candidate list size up to efScaleNodes nodes; beyond, each tenfold growth of the
	// graph adds another minEfSearch, up to maxEfSearch.
	minEfSearch  = 128
	efScaleNodes = 100_000
	maxEfSearch  = 4096
)

// DefaultEfSearch is the candidate list size used for a graph of n live nodes when Config.EfSearch is 0:
// 128 · (1 + log₁₀(n / 100,000)), and never below 128 (so 128 up to 100,000 nodes, 256 at 1,000,000, 384 at
// 10,000,000), at most 4096. HNSW's greedy search needs a wider beam as the graph grows to keep the same recall:
// with a fixed 128, recall@10 over 384-dimension int8 vectors falls from 0.99+ at 100,000 to 0.929 at 1,000,000
// (0.963 at 256), and the cost of a search grows about linearly with ef, so the logarithmic growth keeps the
// latency of a search near-logarithmic in the graph size, as HNSW's is at a fixed ef.
func DefaultEfSearch(n int) int {
	if n <= efScaleNodes {
		return minEfSearch
	}
	ef := int(math.Ceil(minEfSearch * (1 + math.Log10(float64(n)/efScaleNodes))))
	return min(ef, maxEfSearch)
}

// EfSearch is the candidate list size a search of this graph uses for a configured value: the configured one
// when it is positive, DefaultEfSearch of the live nodes otherwise.
func (g *Graph) EfSearch(configured int) int {
	if configured > 0 {
		return configured
	}
	return DefaultEfSearch(g.live)
}

const (
	nodeFree uint8 = iota
	nodeLive
	nodeDead // tombstone: still traversed (keeps the graph connected), never returned

	// vacuumMinDead and vacuumRatio decide when tombstones are removed from a graph and their neighbours repaired.
	vacuumMinDead = 16
	vacuumRatio   = 0.2
	maxLevel      = 16
)

// cand is a node and its distance (1 − cosine) to the query.
type cand struct {
	d  float32
	id int32
}

// Graph is one tenant's graph over unit vectors; each node carries a label (the caller's document number).
// Concurrency: searches may run in parallel with each other; mutations (Add, Remove, Vacuum, Relabel) need
// exclusive access from the caller, except that Add links the nodes of one batch from several goroutines itself
// (guarded by per-node locks).
type Graph struct {
	dim, m, m0, efC int
	ml              float64
	rng             *rand.Rand
	rescore         int

	// Without a store the vectors live here and every distance is a float32 one. With a store (quantized) the
	// vectors live in the store and the graph keeps an int8 code and a scale per node.
	store  VectorStore
	vecs   []float32 // node n at [n*dim, (n+1)*dim); nil when quantized
	codes  [][]int8  // quantized: pages of pageNodes codes; node n in page n/pageNodes
	scales []float32 // quantized: node n's scale
	levels []uint8
	labels []uint32
	state  []uint8
	l0     [][]int32 // pages of pageNodes blocks of (m0+1): count, then up to m0 links
	up     [][]int32 // node n: levels[n] blocks of (m+1): count, then up to m links
	locks  []sync.Mutex

	entryMu  sync.Mutex
	entry    int32
	maxLevel int

	free       []int32
	live, dead int

	visited sync.Pool
}

// New returns an empty graph for vectors of dim dimensions; seed drives the level generator. With a non-nil
// store the graph is quantized: vectors go to the store, the graph keeps their int8 codes and searches with
// them, rescoring the best candidates with the stored vectors. cfg must have its defaults filled in.
func New(dim int, cfg Config, seed uint64, store VectorStore) *Graph {
	return &Graph{
		dim: dim, m: cfg.M, m0: 2 * cfg.M, efC: cfg.EfConstruction,
		ml:      1 / math.Log(float64(cfg.M)),
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		rescore: max(1, cfg.Rescore),
		store:   store,
		entry:   -1,
	}
}

func (g *Graph) nodes() int { return len(g.levels) }

// Quantized reports whether the graph searches int8 codes (its vectors are in a VectorStore).
func (g *Graph) Quantized() bool { return g.store != nil }

// RescoreFactor is the multiple of k rescored with full-precision vectors by a quantized search.
func (g *Graph) RescoreFactor() int { return g.rescore }

func (g *Graph) vec(n int32) []float32 {
	o := int(n) * g.dim
	return g.vecs[o : o+g.dim : o+g.dim]
}

// The codes and the layer-0 links grow by pages of pageNodes nodes rather than by append: no doubling copies
// (no transient 2× while a million-node graph grows) and at most one page of unused capacity.
const pageShift = 10
const pageNodes = 1 << pageShift

func (g *Graph) code(n int32) []int8 {
	o := int(n&(pageNodes-1)) * g.dim
	return g.codes[n>>pageShift][o : o+g.dim : o+g.dim]
}

// grow adds the pages that node n needs.
func (g *Graph) grow(n int32) {
	for int(n>>pageShift) >= len(g.l0) {
		g.l0 = append(g.l0, make([]int32, pageNodes*(g.m0+1)))
	}
	for g.store != nil && int(n>>pageShift) >= len(g.codes) {
		g.codes = append(g.codes, make([]int8, pageNodes*g.dim))
	}
}

// Vector copies the full-precision vector of node n into dst (dim long), from memory or from the store.
func (g *Graph) Vector(n int32, dst []float32) error {
	if g.store != nil {
		return g.store.Get(n, dst)
	}
	copy(dst, g.vec(n))
	return nil
}

// qvec is a vector ready for distance computations: float32, or an int8 code and its scale.
type qvec struct {
	f []float32
	c []int8
	s float32
}

func (g *Graph) nodeQ(n int32) qvec {
	if g.store != nil {
		return qvec{c: g.code(n), s: g.scales[n]}
	}
	return qvec{f: g.vec(n)}
}

func (g *Graph) queryQ(v []float32) qvec {
	if g.store != nil {
		c := make([]int8, g.dim)
		return qvec{c: c, s: Quantize(v, c)}
	}
	return qvec{f: v}
}

// dist is 1 − the (approximate, when quantized) cosine of q and node n.
func (g *Graph) dist(q qvec, n int32) float32 {
	if q.c != nil {
		return 1 - q.s*g.scales[n]*float32(DotI8(q.c, g.code(n)))
	}
	return 1 - Dot(q.f, g.vec(n))
}

// Scorer scores nodes against one query.
type Scorer struct {
	g *Graph
	q qvec
	v []float32
	b []float32
}

// NewScorer prepares the unit query vector q.
func (g *Graph) NewScorer(q []float32) *Scorer {
	return &Scorer{g: g, q: g.queryQ(q), v: q}
}

// Approx returns the cosine of the query and node n: exact for a float graph, from the int8 codes otherwise.
func (s *Scorer) Approx(n int32) float32 { return 1 - s.g.dist(s.q, n) }

// Exact returns the cosine of the query and node n from the full-precision vector.
func (s *Scorer) Exact(n int32) (float32, error) {
	if s.g.store == nil {
		return Dot(s.v, s.g.vec(n)), nil
	}
	if s.b == nil {
		s.b = make([]float32, s.g.dim)
	}
	if err := s.g.store.Get(n, s.b); err != nil {
		return 0, err
	}
	return Dot(s.v, s.b), nil
}

func (g *Graph) randomLevel() int {
	l := int(-math.Log(1-g.rng.Float64()) * g.ml)
	return min(l, maxLevel)
}

// links returns the stored link block of n at layer l (count in [0], links after it).
func (g *Graph) block(n int32, l int) []int32 {
	if l == 0 {
		o := int(n&(pageNodes-1)) * (g.m0 + 1)
		return g.l0[n>>pageShift][o : o+g.m0+1 : o+g.m0+1]
	}
	o := (l - 1) * (g.m + 1)
	return g.up[n][o : o+g.m+1 : o+g.m+1]
}

func (g *Graph) linksOf(n int32, l int) []int32 {
	b := g.block(n, l)
	return b[1 : 1+b[0]]
}

func (g *Graph) setLinks(n int32, l int, ids []cand) {
	b := g.block(n, l)
	b[0] = int32(len(ids))
	for i, c := range ids {
		b[1+i] = c.id
	}
}

func (g *Graph) maxLinks(l int) int {
	if l == 0 {
		return g.m0
	}
	return g.m
}

// alloc reserves a node for v (exclusive access). The node is allocated even when the store fails to write
// its vector; the error is returned.
func (g *Graph) alloc(v []float32, label uint32, level int) (int32, error) {
	var n int32
	if k := len(g.free); k > 0 {
		n = g.free[k-1]
		g.free = g.free[:k-1]
		if g.store != nil {
			g.scales[n] = Quantize(v, g.code(n))
		} else {
			copy(g.vec(n), v)
		}
		g.levels[n], g.labels[n], g.state[n] = uint8(level), label, nodeLive
		clear(g.block(n, 0))
	} else {
		n = int32(len(g.levels))
		g.grow(n)
		if g.store != nil {
			g.scales = append(g.scales, Quantize(v, g.code(n)))
		} else {
			g.vecs = append(g.vecs, v...)
		}
		g.levels = append(g.levels, uint8(level))
		g.labels = append(g.labels, label)
		g.state = append(g.state, nodeLive)
		g.up = append(g.up, nil)
		if len(g.locks) < len(g.levels) {
			// Fresh mutexes: nothing is locked while the graph grows, so nothing needs copying.
			g.locks = make([]sync.Mutex, max(2*len(g.levels), 64))
		}
	}
	if level > 0 {
		g.up[n] = make([]int32, level*(g.m+1))
	} else {
		g.up[n] = nil
	}
	g.live++
	if g.store != nil {
		return n, g.store.Put(n, v)
	}
	return n, nil
}

// Add inserts a batch of unit vectors with their labels and returns their node ids (exclusive access). Linking
// runs on up to GOMAXPROCS goroutines for large batches. An error is the store's (a vector not written): the
// nodes are in the graph, but the store cannot give their vectors back.
func (g *Graph) Add(vs [][]float32, labels []uint32) ([]int32, error) {
	ids := make([]int32, len(vs))
	var errs []error
	for i, v := range vs {
		var err error
		ids[i], err = g.alloc(v, labels[i], g.randomLevel())
		if err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	workers := min(runtime.GOMAXPROCS(0), len(ids)/32)
	if workers <= 1 {
		for _, id := range ids {
			g.link(id, true)
		}
		return ids, err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ids)) {
					return
				}
				g.link(ids[i], true)
			}
		})
	}
	wg.Wait()
	return ids, err
}

// link connects node id into the graph.
func (g *Graph) link(id int32, locking bool) {
	level := int(g.levels[id])
	q := g.nodeQ(id)
	g.entryMu.Lock()
	ep, top := g.entry, g.maxLevel
	if ep < 0 {
		g.entry, g.maxLevel = id, level
		g.entryMu.Unlock()
		return
	}
	raise := level > top
	if !raise {
		g.entryMu.Unlock()
	}
	vl := g.getVisited()
	defer g.visited.Put(vl)
	buf := make([]int32, 0, g.m0)
	cur := cand{d: g.dist(q, ep), id: ep}
	for l := top; l > level; l-- {
		cur = g.greedy(q, cur, l, locking, &buf)
	}
	accept := func(n int32) bool { return n != id && g.state[n] == nodeLive }
	for l := min(level, top); l >= 0; l-- {
		w, _ := g.searchLayer(q, cur, g.efC, l, accept, vl, locking, 0, &buf)
		if len(w) == 0 {
			continue
		}
		sel := g.selectNeighbors(w, g.m)
		if locking {
			g.locks[id].Lock()
		}
		g.setLinks(id, l, sel)
		if locking {
			g.locks[id].Unlock()
		}
		for _, s := range sel {
			g.addLink(s.id, id, s.d, l, locking)
		}
		cur = w[0]
	}
	if raise {
		g.entry, g.maxLevel = id, level
		g.entryMu.Unlock()
	}
}

// addLink adds the edge n→id at layer l, pruning n's links with the heuristic when full.
func (g *Graph) addLink(n, id int32, d float32, l int, locking bool) {
	if locking {
		g.locks[n].Lock()
		defer g.locks[n].Unlock()
	}
	b := g.block(n, l)
	cnt := int(b[0])
	for _, x := range b[1 : 1+cnt] {
		if x == id {
			return
		}
	}
	if cnt < g.maxLinks(l) {
		b[1+cnt] = id
		b[0]++
		return
	}
	nv := g.nodeQ(n)
	cs := make([]cand, 0, cnt+1)
	cs = append(cs, cand{d: d, id: id})
	for _, x := range b[1 : 1+cnt] {
		if g.state[x] == nodeDead {
			continue // drop tombstones first
		}
		cs = append(cs, cand{d: g.dist(nv, x), id: x})
	}
	sortCands(cs)
	g.setLinks(n, l, g.selectNeighbors(cs, g.maxLinks(l)))
}

// selectNeighbors is the HNSW heuristic (algorithm 4 without extension): keep a candidate only when it is closer
// to the base than to every neighbour already kept. cs must be sorted by distance.
func (g *Graph) selectNeighbors(cs []cand, m int) []cand {
	if len(cs) <= m {
		return slices.Clone(cs)
	}
	sel := make([]cand, 0, m)
	for _, c := range cs {
		cv := g.nodeQ(c.id)
		good := true
		for _, s := range sel {
			if g.dist(cv, s.id) < c.d {
				good = false
				break
			}
		}
		if good {
			sel = append(sel, c)
			if len(sel) == m {
				break
			}
		}
	}
	return sel
}

func (g *Graph) readLinks(n int32, l int, locking bool, buf *[]int32) []int32 {
	if !locking {
		return g.linksOf(n, l)
	}
	g.locks[n].Lock()
	*buf = append((*buf)[:0], g.linksOf(n, l)...)
	g.locks[n].Unlock()
	return *buf
}

func (g *Graph) greedy(q qvec, cur cand, l int, locking bool, buf *[]int32) cand {
	for changed := true; changed; {
		changed = false
		for _, n := range g.readLinks(cur.id, l, locking, buf) {
			if d := g.dist(q, n); d < cur.d {
				cur, changed = cand{d: d, id: n}, true
			}
		}
	}
	return cur
}

// searchLayer is the best-first search of one layer. Every node is traversed, but only accepted nodes enter the
// results, and the search goes on until ef accepted nodes are found or the reachable graph is exhausted (the
// filtered-search rule of hnswlib). maxVisit > 0 aborts after that many visited nodes (complete = false).
// Results are sorted by distance.
func (g *Graph) searchLayer(q qvec, ep cand, ef, l int, accept func(int32) bool, vl *visitList,
	locking bool, maxVisit int, buf *[]int32) (res []cand, complete bool) {
	vl.reset(g.nodes())
	vl.visit(ep.id)
	visits := 1
	cands := minHeap{ep}
	var results maxHeap
	bound := float32(math.MaxFloat32)
	if accept(ep.id) {
		results.push(ep)
		bound = ep.d
	}
	for len(cands) > 0 {
		c := cands.pop()
		if c.d > bound && len(results) >= ef {
			break
		}
		for _, n := range g.readLinks(c.id, l, locking, buf) {
			if vl.visited(n) {
				continue
			}
			vl.visit(n)
			visits++
			d := g.dist(q, n)
			if len(results) < ef || d < bound {
				cands.push(cand{d: d, id: n})
				if accept(n) {
					results.push(cand{d: d, id: n})
					if len(results) > ef {
						results.pop()
					}
					bound = results[0].d
				}
			}
		}
		if maxVisit > 0 && visits > maxVisit {
			return results.sorted(), false
		}
	}
	return results.sorted(), true
}

// Result is a search hit: a node's label and its cosine similarity to the query.
type Result struct {
	Label uint32
	Score float64
}

// Search returns up to k live nodes nearest to q (unit vector), best first, among those whose label filter
// accepts (nil: all); ef is the candidate list size (0 or less: EfSearch(0), sized to the graph). complete is false when maxVisit (> 0) visited nodes stopped
// the search early. A quantized graph searches with int8 codes, then rescores the best RescoreFactor×k
// candidates with their full-precision vectors (read from the store): the order and the scores returned are
// float32 ones. An error is the store's.
func (g *Graph) Search(q []float32, k, ef int, filter func(label uint32) bool, maxVisit int) (res []Result, complete bool, err error) {
	if g.entry < 0 || g.live == 0 {
		return nil, true, nil
	}
	ef = g.EfSearch(ef)
	vl := g.getVisited()
	defer g.visited.Put(vl)
	var buf []int32
	qq := g.queryQ(q)
	cur := cand{d: g.dist(qq, g.entry), id: g.entry}
	for l := g.maxLevel; l > 0; l-- {
		cur = g.greedy(qq, cur, l, false, &buf)
	}
	accept := func(n int32) bool {
		return g.state[n] == nodeLive && (filter == nil || filter(g.labels[n]))
	}
	keep := k
	if g.store != nil {
		keep = k * g.rescore
	}
	cs, complete := g.searchLayer(qq, cur, max(ef, keep), 0, accept, vl, false, maxVisit, &buf)
	if len(cs) > keep {
		cs = cs[:keep]
	}
	if g.store != nil {
		if err := g.rescoreCands(q, cs); err != nil {
			return nil, false, err
		}
	}
	if len(cs) > k {
		cs = cs[:k]
	}
	res = make([]Result, len(cs))
	for i, c := range cs {
		res[i] = Result{Label: g.labels[c.id], Score: float64(1 - c.d)}
	}
	return res, complete, nil
}

// rescoreCands replaces the distances of cs by full-precision ones and sorts them again.
func (g *Graph) rescoreCands(q []float32, cs []cand) error {
	buf := make([]float32, g.dim)
	for i := range cs {
		if err := g.store.Get(cs[i].id, buf); err != nil {
			return err
		}
		cs[i].d = 1 - Dot(q, buf)
	}
	sortCands(cs)
	return nil
}

// Remove tombstones node n (exclusive access) and reports whether a vacuum is due.
func (g *Graph) Remove(n int32) bool {
	if g.state[n] != nodeLive {
		return false
	}
	g.state[n] = nodeDead
	g.live--
	g.dead++
	return g.VacuumDue()
}

// VacuumDue reports whether tombstones are numerous enough (at least 16, over 20 % of the nodes) for Vacuum.
func (g *Graph) VacuumDue() bool {
	return g.dead >= vacuumMinDead && float64(g.dead) > vacuumRatio*float64(g.live+g.dead)
}

// Live returns the number of live nodes.
func (g *Graph) Live() int { return g.live }

// M0 returns the link cap of layer 0 (2M): a search visits about M0 nodes per expanded node.
func (g *Graph) M0() int { return g.m0 }

// LiveLabel returns the label of node n and whether n is a live node.
func (g *Graph) LiveLabel(n int32) (uint32, bool) {
	if n < 0 || int(n) >= g.nodes() || g.state[n] != nodeLive {
		return 0, false
	}
	return g.labels[n], true
}

// Relabel replaces the label of every live node by remap(label) (exclusive access).
func (g *Graph) Relabel(remap func(uint32) uint32) {
	for n := range g.nodes() {
		if g.state[n] == nodeLive {
			g.labels[n] = remap(g.labels[n])
		}
	}
}

// Vacuum removes the tombstones: every live node that links to one gets its links at that layer re-selected
// (heuristic) from its live links and the live nodes the tombstones linked to, then tombstoned nodes are freed
// for reuse. Exclusive access.
func (g *Graph) Vacuum() {
	if g.dead == 0 {
		return
	}
	if g.live == 0 {
		g.vecs, g.codes, g.scales = nil, nil, nil
		g.levels, g.labels, g.state, g.l0, g.up, g.free = nil, nil, nil, nil, nil, nil
		g.entry, g.maxLevel, g.dead = -1, 0, 0
		return
	}
	n := g.nodes()
	workers := max(1, min(runtime.GOMAXPROCS(0), n/256))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		// Race-free by construction: a worker writes only the links of the live node it repairs, and reads only
		// those and the links of tombstoned nodes, which nobody writes during the vacuum.
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				id := int32(i)
				if g.state[id] != nodeLive {
					continue
				}
				for l := 0; l <= int(g.levels[id]); l++ {
					g.repair(id, l)
				}
			}
		})
	}
	wg.Wait()
	for i := range n {
		id := int32(i)
		if g.state[id] != nodeDead {
			continue
		}
		g.state[id] = nodeFree
		clear(g.block(id, 0))
		g.up[id] = nil
		g.levels[id] = 0
		g.free = append(g.free, id)
	}
	g.dead = 0
	g.pickEntry()
	// A node whose whole neighbourhood died has no links left: insert it again.
	for i := range n {
		id := int32(i)
		if g.state[id] == nodeLive && id != g.entry && g.block(id, 0)[0] == 0 {
			for l := 1; l <= int(g.levels[id]); l++ {
				clear(g.block(id, l))
			}
			g.link(id, false)
		}
	}
}

func (g *Graph) pickEntry() {
	g.entry, g.maxLevel = -1, 0
	for i := range g.nodes() {
		id := int32(i)
		if g.state[id] != nodeLive {
			continue
		}
		lv := int(g.levels[id])
		better := g.entry < 0 || lv > g.maxLevel ||
			(lv == g.maxLevel && g.block(g.entry, 0)[0] == 0 && g.block(id, 0)[0] > 0)
		if better {
			g.entry, g.maxLevel = id, lv
		}
	}
}

func (g *Graph) repair(id int32, l int) {
	links := g.linksOf(id, l)
	hasDead := false
	for _, x := range links {
		if g.state[x] != nodeLive {
			hasDead = true
			break
		}
	}
	if !hasDead {
		return
	}
	seen := map[int32]bool{id: true}
	v := g.nodeQ(id)
	cs := make([]cand, 0, 2*g.maxLinks(l))
	consider := func(x int32) {
		if !seen[x] {
			seen[x] = true
			cs = append(cs, cand{d: g.dist(v, x), id: x})
		}
	}
	for _, x := range links {
		if g.state[x] == nodeLive {
			consider(x)
			continue
		}
		for _, y := range g.linksOf(x, l) {
			switch g.state[y] {
			case nodeLive:
				consider(y)
			case nodeDead:
				for _, z := range g.linksOf(y, l) { // two tombstones deep at most
					if g.state[z] == nodeLive {
						consider(z)
					}
				}
			}
		}
	}
	sortCands(cs)
	g.setLinks(id, l, g.selectNeighbors(cs, g.maxLinks(l)))
}

func sortCands(cs []cand) {
	slices.SortFunc(cs, func(a, b cand) int {
		switch {
		case a.d < b.d:
			return -1
		case a.d > b.d:
			return 1
		}
		return int(a.id) - int(b.id)
	})
}

// visitList marks visited nodes with a generation counter, so resetting is O(1).
type visitList struct {
	marks []uint16
	gen   uint16
}

func (g *Graph) getVisited() *visitList {
	if v, ok := g.visited.Get().(*visitList); ok {
		return v
	}
	return &visitList{}
}

func (v *visitList) reset(n int) {
	if len(v.marks) < n {
		v.marks = make([]uint16, n+n/4+64)
		v.gen = 0
	}
	v.gen++
	if v.gen == 0 {
		clear(v.marks)
		v.gen = 1
	}
}

func (v *visitList) visited(n int32) bool { return v.marks[n] == v.gen }
func (v *visitList) visit(n int32)        { v.marks[n] = v.gen }

type minHeap []cand

func (h *minHeap) push(c cand) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].d <= s[i].d {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *minHeap) pop() cand {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].d < s[l].d {
			m = r
		}
		if s[i].d <= s[m].d {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

type maxHeap []cand

func (h *maxHeap) push(c cand) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].d >= s[i].d {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *maxHeap) pop() cand {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].d > s[l].d {
			m = r
		}
		if s[i].d >= s[m].d {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

func (h maxHeap) sorted() []cand {
	out := []cand(h)
	sortCands(out)
	return out
}
