// Package qdrant implements index.Index on one Qdrant collection (github.com/qdrant/go-client over gRPC), with
// named dense and sparse vectors and per-tenant BM25 computed by the adapter.
//
// The adapter keeps no state that the collection does not hold (its BM25 statistics are derived from the
// points and refreshed every Config.StatsRefresh), so any number of retriever replicas can share a collection.
package qdrant

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aiforge/aiforge/services/retriever/index"
)

// Config configures the Qdrant backend.
type Config struct {
	// Addr is host:port of Qdrant's gRPC API (usually port 6334); ParseURL turns a URL into Addr and TLS.
	Addr string
	// APIKey is sent with every call (Qdrant's api-key header); never logged.
	APIKey string
	TLS    bool
	// Collection is created on first use when missing (default "aiforge_chunks").
	Collection string
	// Dim is the dense vector size of the collection: required to create it, checked against an existing one;
	// 0 adopts the existing collection's size.
	Dim int
	// Timeout bounds every call to Qdrant (default 30s).
	Timeout time.Duration
	// UpsertBatch is the number of points per upsert request (default 256).
	UpsertBatch int
	// StatsRefresh re-reads the per-tenant BM25 statistics from the collection this often, picking up writes of
	// other replicas (0: only at start and after this process's own writes).
	StatsRefresh time.Duration
	Logger       *slog.Logger
	// DialOptions are extra gRPC dial options.
	DialOptions []grpc.DialOption
}

// DefaultPort is the port of Qdrant's gRPC API.
const DefaultPort = "6334"

// ParseURL reads Qdrant's gRPC endpoint as host:port, grpc://host:port, http://host:port (plaintext) or
// https://host:port (TLS); the port defaults to 6334. Qdrant's REST port 6333 is refused with a hint, since the
// adapter speaks gRPC.
func ParseURL(raw string) (addr string, useTLS bool, err error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", false, errors.New("qdrant url is empty")
	}
	if !strings.Contains(s, "://") {
		s = "grpc://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", false, fmt.Errorf("qdrant url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "grpc", "http":
	case "grpcs", "https":
		useTLS = true
	default:
		return "", false, fmt.Errorf("qdrant url %q: scheme %q (want http, https, grpc or grpcs)", raw, u.Scheme)
	}
	if u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("qdrant url %q: want scheme://host[:port] and nothing else", raw)
	}
	port := u.Port()
	if port == "" {
		port = DefaultPort
	}
	if port == "6333" {
		return "", false, fmt.Errorf("qdrant url %q: 6333 is Qdrant's REST port; the adapter speaks gRPC (usually port %s)", raw, DefaultPort)
	}
	return net.JoinHostPort(u.Hostname(), port), useTLS, nil
}

// plainName reports whether s is non-empty and made of ASCII letters, digits, '_' (and '-' when dash).
func plainName(s string, dash bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || dash && r == '-'
		if !ok {
			return false
		}
	}
	return true
}

// Validate reports configuration errors.
func (c Config) Validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("qdrant index: Addr %q is not host:port: %w", c.Addr, err))
	} else if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		errs = append(errs, fmt.Errorf("qdrant index: Addr %q has a bad port", c.Addr))
	}
	if c.Collection != "" && (len(c.Collection) > 255 || !plainName(c.Collection, true)) {
		errs = append(errs, fmt.Errorf("qdrant index: collection name %q (want [A-Za-z0-9_-], at most 255)", c.Collection))
	}
	if c.Dim < 0 || c.Dim > 65536 {
		errs = append(errs, fmt.Errorf("qdrant index: Dim %d out of range 0-65536", c.Dim))
	}
	if c.Timeout < 0 || c.StatsRefresh < 0 || c.UpsertBatch < 0 {
		errs = append(errs, errors.New("qdrant index: Timeout, StatsRefresh and UpsertBatch must not be negative"))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Collection == "" {
		c.Collection = "aiforge_chunks"
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.UpsertBatch == 0 {
		c.UpsertBatch = 256
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Names in the Qdrant collection.
const (
	qDense   = "dense"
	qSparse  = "sparse"
	qTenant  = "tenant"
	qStore   = "store_id"
	qFile    = "file_id"
	qChunk   = "chunk_id"
	qIndex   = "index"
	qText    = "text"
	qLength  = "length"
	qPages   = "pages"
	qHeads   = "heading_path"
	qAttrs   = "attributes"
	qScrollN = 1024
)

// Index stores chunks in one Qdrant collection with a named dense vector "dense" (cosine) and a named sparse
// vector "sparse", partitioned by the payload field "tenant" (a keyword index with is_tenant, and HNSW built per
// tenant: m 0, payload_m 16).
//
// BM25 with per-tenant statistics: Qdrant's IDF modifier is collection-wide, so the adapter scores BM25 itself.
// A point's sparse values are the BM25 term-frequency component tf·(k1+1)/(tf + k1·(1 − b + b·dl/avgdl)), computed
// with the tenant's average length when the point is written; a query's sparse values are the tenant's IDF of
// each term (times its query frequency), so the server's dot product is the BM25 score. Sparse indices are 32-bit
// FNV-1a hashes of the terms.
//
// The statistics (per tenant: chunk count, total length, document frequency per term index) live in memory.
// They are derived from the collection itself — the sparse vectors carry the term indices and the payload the
// length — so they are rebuilt exactly by a scan at start (and every StatsRefresh), and maintained by this
// process's own writes in between. Approximations, documented: a point's TF component keeps the average
// length of the time it was written (exact while the average is stable; re-upsert to refresh), hash collisions
// merge terms, and writes by other replicas are seen at the next refresh.
type Index struct {
	cfg    Config
	log    *slog.Logger
	client *qc.Client

	writeMu   sync.Mutex          // serialises writes (read-modify-write of the statistics)
	indexMu   sync.Mutex          // guards indexed
	indexed   map[string]struct{} // payload fields with an index
	statsMu   sync.RWMutex
	stats     map[string]*tenantStats
	stale     bool // statistics need a rebuild (a write failed half-way)
	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup
}

var _ index.Index = (*Index)(nil)

type tenantStats struct {
	n        int64
	totalLen int64
	df       map[uint32]int64
}

// New connects, creates the collection and its payload indexes when missing, checks an existing one, and
// loads the BM25 statistics.
func New(ctx context.Context, cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	host, portStr, _ := net.SplitHostPort(cfg.Addr)
	port, _ := strconv.Atoi(portStr)
	client, err := qc.NewClient(&qc.Config{
		Host: host, Port: port, APIKey: cfg.APIKey, UseTLS: cfg.TLS,
		SkipCompatibilityCheck: true, // checked below, through our logger
		GrpcOptions:            cfg.DialOptions,
	})
	if err != nil {
		return nil, fmt.Errorf("qdrant index: connect %s: %w", cfg.Addr, err)
	}
	q := &Index{
		cfg: cfg, client: client,
		log:     cfg.Logger.With("component", "index.qdrant", "collection", cfg.Collection),
		indexed: make(map[string]struct{}),
		stats:   make(map[string]*tenantStats),
		closed:  make(chan struct{}),
	}
	if err := q.init(ctx); err != nil {
		client.Close()
		return nil, err
	}
	if cfg.StatsRefresh > 0 {
		q.wg.Go(q.refreshLoop)
	}
	return q, nil
}

func (q *Index) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, q.cfg.Timeout)
}

func (q *Index) init(ctx context.Context) error {
	cctx, cancel := q.call(ctx)
	hc, err := q.client.HealthCheck(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("qdrant index: cannot reach Qdrant's gRPC API at %s: %w", q.cfg.Addr, err)
	}
	q.log.Info("connected to qdrant", "addr", q.cfg.Addr, "server_version", hc.GetVersion())
	if err := q.ensureCollection(ctx); err != nil {
		return err
	}
	return q.rebuildStats(ctx)
}

func ptr[T any](v T) *T { return &v }

func (q *Index) ensureCollection(ctx context.Context) error {
	name := q.cfg.Collection
	cctx, cancel := q.call(ctx)
	defer cancel()
	exists, err := q.client.CollectionExists(cctx, name)
	if err != nil {
		return fmt.Errorf("qdrant index: %w", err)
	}
	if !exists && q.cfg.Dim == 0 {
		return fmt.Errorf("qdrant index: collection %q does not exist and no dense dimension is configured to create it "+
			"(set Dim, --qdrant-dim, to the embedding models' dimension)", name)
	}
	if !exists {
		err := q.client.CreateCollection(cctx, &qc.CreateCollection{
			CollectionName: name,
			VectorsConfig: qc.NewVectorsConfigMap(map[string]*qc.VectorParams{
				qDense: {Size: uint64(q.cfg.Dim), Distance: qc.Distance_Cosine},
			}),
			SparseVectorsConfig: qc.NewSparseVectorsConfig(map[string]*qc.SparseVectorParams{
				qSparse: {}, // no IDF modifier: the adapter computes per-tenant BM25 itself
			}),
			// Every search is confined to one tenant: build per-tenant graphs only (Qdrant's multitenancy setup).
			HnswConfig: &qc.HnswConfigDiff{M: ptr(uint64(0)), PayloadM: ptr(uint64(16))},
		})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("qdrant index: create collection: %w", err)
		}
		q.log.Info("created collection", "dim", q.cfg.Dim)
	} else {
		info, err := q.client.GetCollectionInfo(cctx, name)
		if err != nil {
			return fmt.Errorf("qdrant index: %w", err)
		}
		if q.cfg.Dim == 0 {
			q.cfg.Dim = int(info.GetConfig().GetParams().GetVectorsConfig().GetParamsMap().GetMap()[qDense].GetSize())
		}
		if err := q.checkSchema(info); err != nil {
			return err
		}
		for field := range info.GetPayloadSchema() {
			q.indexed[field] = struct{}{}
		}
	}
	// The tenant index first (is_tenant: Qdrant co-locates each tenant's points), then store and file.
	base := []struct {
		field string
		typ   qc.FieldType
		param *qc.PayloadIndexParams
	}{
		{qTenant, qc.FieldType_FieldTypeKeyword, qc.NewPayloadIndexParamsKeyword(&qc.KeywordIndexParams{IsTenant: ptr(true)})},
		{qStore, qc.FieldType_FieldTypeKeyword, nil},
		{qFile, qc.FieldType_FieldTypeKeyword, nil},
	}
	for _, b := range base {
		if _, ok := q.indexed[b.field]; ok {
			continue
		}
		if err := q.createIndex(ctx, b.field, b.typ, b.param); err != nil {
			return err
		}
	}
	return nil
}

func (q *Index) checkSchema(info *qc.CollectionInfo) error {
	params := info.GetConfig().GetParams()
	dense := params.GetVectorsConfig().GetParamsMap().GetMap()[qDense]
	var errs []error
	switch {
	case dense == nil:
		errs = append(errs, fmt.Errorf("no named dense vector %q", qDense))
	case dense.GetSize() != uint64(q.cfg.Dim):
		errs = append(errs, fmt.Errorf("dense vector size %d, configured Dim %d", dense.GetSize(), q.cfg.Dim))
	case dense.GetDistance() != qc.Distance_Cosine:
		errs = append(errs, fmt.Errorf("dense distance %v, want Cosine", dense.GetDistance()))
	}
	if sp := params.GetSparseVectorsConfig().GetMap()[qSparse]; sp == nil {
		errs = append(errs, fmt.Errorf("no named sparse vector %q", qSparse))
	} else if sp.GetModifier() == qc.Modifier_Idf {
		errs = append(errs, errors.New("sparse vector has the IDF modifier: BM25 is computed per tenant by the adapter"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("qdrant index: collection %q does not fit: %w", q.cfg.Collection, err)
	}
	return nil
}

func (q *Index) createIndex(ctx context.Context, field string, typ qc.FieldType, params *qc.PayloadIndexParams) error {
	cctx, cancel := q.call(ctx)
	defer cancel()
	_, err := q.client.CreateFieldIndex(cctx, &qc.CreateFieldIndexCollection{
		CollectionName:   q.cfg.Collection,
		Wait:             ptr(true),
		FieldName:        field,
		FieldType:        ptr(typ),
		FieldIndexParams: params,
	})
	if err != nil {
		return fmt.Errorf("qdrant index: create payload index %q: %w", field, err)
	}
	q.indexMu.Lock()
	q.indexed[field] = struct{}{}
	q.indexMu.Unlock()
	return nil
}

// attrPath is the payload path of an attribute key (quoted unless plain: keys may contain dots).
func attrPath(key string) string {
	if plainName(key, false) {
		return qAttrs + "." + key
	}
	return qAttrs + `."` + key + `"`
}

// ensureAttributeIndexes creates payload indexes for attribute keys not indexed yet, before the points that
// carry them are uploaded. A key seen with several types keeps the index of the first.
func (q *Index) ensureAttributeIndexes(ctx context.Context, chunks []index.Chunk) error {
	want := make(map[string]qc.FieldType)
	q.indexMu.Lock()
	for i := range chunks {
		for k, v := range chunks[i].Attributes {
			path := attrPath(k)
			if _, ok := q.indexed[path]; ok {
				continue
			}
			if _, ok := want[path]; ok {
				continue
			}
			switch v.(type) {
			case string:
				want[path] = qc.FieldType_FieldTypeKeyword
			case float64:
				want[path] = qc.FieldType_FieldTypeFloat
			case bool:
				want[path] = qc.FieldType_FieldTypeBool
			}
		}
	}
	q.indexMu.Unlock()
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		if err := q.createIndex(ctx, p, want[p], nil); err != nil {
			return err
		}
	}
	return nil
}

// pointID is the deterministic point id of a chunk: UUID v5 of (tenant, chunk id).
func pointID(tenant, chunkID string) string {
	// The UUID v5 namespace of aiforge chunk points (fixed forever: changing it re-keys every point).
	ns := [16]byte{0x6a, 0x1f, 0x3c, 0x52, 0x8e, 0x0d, 0x4b, 0x7a, 0x9c, 0x41, 0x2e, 0x58, 0xd3, 0x77, 0x0b, 0x19}
	return uuidV5(ns, tenant+"\x00"+chunkID)
}

func uuidV5(ns [16]byte, name string) string {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// sparseOf merges a chunk's terms into hashed indices (sorted) with their frequencies.
func sparseOf(terms map[string]uint32) ([]uint32, []uint32) {
	m := make(map[uint32]uint32, len(terms))
	for t, tf := range terms {
		m[index.TermID(t)] += tf
	}
	idx := make([]uint32, 0, len(m))
	for i := range m {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	tfs := make([]uint32, len(idx))
	for i, x := range idx {
		tfs[i] = m[x]
	}
	return idx, tfs
}

// statsDelta accumulates the statistics change of a write.
type statsDelta map[string]*tenantStats

func (d statsDelta) add(tenant string, length int64, indices []uint32, sign int64) {
	s := d[tenant]
	if s == nil {
		s = &tenantStats{df: make(map[uint32]int64)}
		d[tenant] = s
	}
	s.n += sign
	s.totalLen += sign * length
	for _, i := range indices {
		s.df[i] += sign
	}
}

// applyDelta folds d into the statistics (caller holds statsMu).
func (q *Index) applyDelta(d statsDelta) {
	for tenant, ds := range d {
		s := q.stats[tenant]
		if s == nil {
			s = &tenantStats{df: make(map[uint32]int64)}
			q.stats[tenant] = s
		}
		s.n += ds.n
		s.totalLen += ds.totalLen
		for i, c := range ds.df {
			if v := s.df[i] + c; v > 0 {
				s.df[i] = v
			} else {
				delete(s.df, i)
			}
		}
		if s.n <= 0 {
			delete(q.stats, tenant)
		}
	}
}

func (q *Index) isClosed() bool {
	select {
	case <-q.closed:
		return true
	default:
		return false
	}
}

// Upsert implements Index.
func (q *Index) Upsert(ctx context.Context, chunks []index.Chunk) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if q.isClosed() {
		return index.ErrClosed
	}
	if len(chunks) == 0 {
		return nil
	}
	prepared, err := index.PrepareChunks(chunks, q.cfg.Dim)
	if err != nil {
		return err
	}
	q.writeMu.Lock()
	defer q.writeMu.Unlock()
	if err := q.ensureFreshStats(ctx); err != nil {
		return err
	}
	if err := q.ensureAttributeIndexes(ctx, prepared); err != nil {
		return err
	}
	ids := make([]*qc.PointId, len(prepared))
	for i := range prepared {
		ids[i] = qc.NewIDUUID(pointID(prepared[i].Tenant, prepared[i].ID))
	}
	// The points being replaced leave the statistics first.
	delta := statsDelta{}
	for start := 0; start < len(ids); start += qScrollN {
		cctx, cancel := q.call(ctx)
		old, err := q.client.Get(cctx, &qc.GetPoints{
			CollectionName: q.cfg.Collection,
			Ids:            ids[start:min(len(ids), start+qScrollN)],
			WithPayload:    qc.NewWithPayloadInclude(qTenant, qLength),
			WithVectors:    qc.NewWithVectorsInclude(qSparse),
		})
		cancel()
		if err != nil {
			return fmt.Errorf("qdrant index: read points being replaced: %w", err)
		}
		for _, p := range old {
			tenant, length, indices := statsOfPoint(p.GetPayload(), p.GetVectors())
			delta.add(tenant, length, indices, -1)
		}
	}
	sparse := make([][2][]uint32, len(prepared))
	for i := range prepared {
		c := &prepared[i]
		idx, tfs := sparseOf(c.Terms)
		sparse[i] = [2][]uint32{idx, tfs}
		delta.add(c.Tenant, int64(c.Length), idx, +1)
	}
	// TF components use each tenant's average length after this write.
	q.statsMu.RLock()
	avg := make(map[string]float64, len(delta))
	for tenant, d := range delta {
		s := q.stats[tenant]
		n, total := d.n, d.totalLen
		if s != nil {
			n += s.n
			total += s.totalLen
		}
		if n > 0 {
			avg[tenant] = float64(total) / float64(n)
		}
	}
	q.statsMu.RUnlock()
	points := make([]*qc.PointStruct, len(prepared))
	for i := range prepared {
		points[i] = q.point(&prepared[i], ids[i], sparse[i][0], sparse[i][1], avg[prepared[i].Tenant])
	}
	for start := 0; start < len(points); start += q.cfg.UpsertBatch {
		cctx, cancel := q.call(ctx)
		_, err := q.client.Upsert(cctx, &qc.UpsertPoints{
			CollectionName: q.cfg.Collection,
			Wait:           ptr(true),
			Points:         points[start:min(len(points), start+q.cfg.UpsertBatch)],
		})
		cancel()
		if err != nil {
			if start > 0 {
				q.markStale()
			}
			return fmt.Errorf("qdrant index: upsert: %w", err)
		}
	}
	q.statsMu.Lock()
	q.applyDelta(delta)
	q.statsMu.Unlock()
	return nil
}

func (q *Index) markStale() {
	q.statsMu.Lock()
	q.stale = true
	q.statsMu.Unlock()
}

// ensureFreshStats rebuilds the statistics after a write failed half-way.
func (q *Index) ensureFreshStats(ctx context.Context) error {
	q.statsMu.RLock()
	stale := q.stale
	q.statsMu.RUnlock()
	if !stale {
		return nil
	}
	return q.rebuildStats(ctx)
}

func (q *Index) point(c *index.Chunk, id *qc.PointId, idx, tfs []uint32, avg float64) *qc.PointStruct {
	vectors := make(map[string]*qc.Vector, 2)
	if c.Dense != nil {
		vectors[qDense] = qc.NewVectorDense(c.Dense)
	}
	if len(idx) > 0 {
		vals := make([]float32, len(idx))
		for i := range idx {
			vals[i] = float32(index.BM25TF(tfs[i], c.Length, avg))
		}
		vectors[qSparse] = qc.NewVectorSparse(idx, vals)
	}
	payload := map[string]*qc.Value{
		qTenant: qc.NewValueString(c.Tenant),
		qStore:  qc.NewValueString(c.StoreID),
		qFile:   qc.NewValueString(c.FileID),
		qChunk:  qc.NewValueString(c.ID),
		qIndex:  qc.NewValueInt(int64(c.Index)),
		qText:   qc.NewValueString(c.Text),
		qLength: qc.NewValueInt(int64(c.Length)),
	}
	if c.Pages != nil {
		vs := make([]*qc.Value, len(c.Pages))
		for i, p := range c.Pages {
			vs[i] = qc.NewValueInt(int64(p))
		}
		payload[qPages] = qc.NewValueFromList(vs...)
	}
	if c.HeadingPath != nil {
		vs := make([]*qc.Value, len(c.HeadingPath))
		for i, h := range c.HeadingPath {
			vs[i] = qc.NewValueString(h)
		}
		payload[qHeads] = qc.NewValueFromList(vs...)
	}
	if len(c.Attributes) > 0 {
		fields := make(map[string]*qc.Value, len(c.Attributes))
		for k, v := range c.Attributes {
			switch x := v.(type) {
			case string:
				fields[k] = qc.NewValueString(x)
			case float64:
				fields[k] = qc.NewValueDouble(x)
			case bool:
				fields[k] = qc.NewValueBool(x)
			}
		}
		payload[qAttrs] = qc.NewValueFromFields(fields)
	}
	return &qc.PointStruct{Id: id, Payload: payload, Vectors: qc.NewVectorsMap(vectors)}
}

// statsOfPoint extracts what the statistics need from a stored point.
func statsOfPoint(payload map[string]*qc.Value, vectors *qc.VectorsOutput) (tenant string, length int64, indices []uint32) {
	tenant = payload[qTenant].GetStringValue()
	length = payload[qLength].GetIntegerValue()
	if sv := vectors.GetVectors().GetVectors()[qSparse].GetSparseVector(); sv != nil {
		indices = sv.GetIndices()
	}
	return tenant, length, indices
}

// DeleteFile implements Index.
func (q *Index) DeleteFile(ctx context.Context, tenant, storeID, fileID string) error {
	if err := errors.Join(index.ValidName("tenant", tenant), index.ValidName("store id", storeID), index.ValidName("file id", fileID)); err != nil {
		return err
	}
	return q.deleteWhere(ctx, scopeFilter(tenant, storeID, fileID))
}

// DeleteStore implements Index.
func (q *Index) DeleteStore(ctx context.Context, tenant, storeID string) error {
	if err := errors.Join(index.ValidName("tenant", tenant), index.ValidName("store id", storeID)); err != nil {
		return err
	}
	return q.deleteWhere(ctx, scopeFilter(tenant, storeID, ""))
}

func scopeFilter(tenant, storeID, fileID string) *qc.Filter {
	f := &qc.Filter{Must: []*qc.Condition{qc.NewMatchKeyword(qTenant, tenant)}}
	if storeID != "" {
		f.Must = append(f.Must, qc.NewMatchKeyword(qStore, storeID))
	}
	if fileID != "" {
		f.Must = append(f.Must, qc.NewMatchKeyword(qFile, fileID))
	}
	return f
}

func (q *Index) deleteWhere(ctx context.Context, filter *qc.Filter) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if q.isClosed() {
		return index.ErrClosed
	}
	q.writeMu.Lock()
	defer q.writeMu.Unlock()
	if err := q.ensureFreshStats(ctx); err != nil {
		return err
	}
	delta := statsDelta{}
	if err := q.scroll(ctx, filter, func(p *qc.RetrievedPoint) {
		tenant, length, indices := statsOfPoint(p.GetPayload(), p.GetVectors())
		delta.add(tenant, length, indices, -1)
	}); err != nil {
		return err
	}
	if len(delta) == 0 {
		return nil
	}
	cctx, cancel := q.call(ctx)
	defer cancel()
	if _, err := q.client.Delete(cctx, &qc.DeletePoints{
		CollectionName: q.cfg.Collection,
		Wait:           ptr(true),
		Points:         qc.NewPointsSelectorFilter(filter),
	}); err != nil {
		q.markStale() // the delete may have happened
		return fmt.Errorf("qdrant index: delete: %w", err)
	}
	q.statsMu.Lock()
	q.applyDelta(delta)
	q.statsMu.Unlock()
	return nil
}

// scroll visits every point matching filter with the fields the statistics need.
func (q *Index) scroll(ctx context.Context, filter *qc.Filter, visit func(*qc.RetrievedPoint)) error {
	var offset *qc.PointId
	for {
		cctx, cancel := q.call(ctx)
		pts, next, err := q.client.ScrollAndOffset(cctx, &qc.ScrollPoints{
			CollectionName: q.cfg.Collection,
			Filter:         filter,
			Offset:         offset,
			Limit:          ptr(uint32(qScrollN)),
			WithPayload:    qc.NewWithPayloadInclude(qTenant, qLength),
			WithVectors:    qc.NewWithVectorsInclude(qSparse),
		})
		cancel()
		if err != nil {
			return fmt.Errorf("qdrant index: scroll: %w", err)
		}
		for _, p := range pts {
			visit(p)
		}
		if next == nil || len(pts) == 0 {
			return nil
		}
		offset = next
	}
}

// rebuildStats recomputes every tenant's statistics from the collection.
func (q *Index) rebuildStats(ctx context.Context) error {
	start := time.Now()
	d := statsDelta{}
	points := 0
	if err := q.scroll(ctx, nil, func(p *qc.RetrievedPoint) {
		tenant, length, indices := statsOfPoint(p.GetPayload(), p.GetVectors())
		if tenant != "" {
			d.add(tenant, length, indices, +1)
			points++
		}
	}); err != nil {
		return err
	}
	q.statsMu.Lock()
	q.stats = make(map[string]*tenantStats)
	q.applyDelta(d)
	q.stale = false
	q.statsMu.Unlock()
	q.log.Debug("bm25 statistics loaded", "tenants", len(d), "points", points, "took", time.Since(start))
	return nil
}

func (q *Index) refreshLoop() {
	tick := time.NewTicker(q.cfg.StatsRefresh)
	defer tick.Stop()
	for {
		select {
		case <-q.closed:
			return
		case <-tick.C:
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-q.closed:
				case <-ctx.Done():
				}
				cancel()
			}()
			q.writeMu.Lock()
			err := q.rebuildStats(ctx)
			q.writeMu.Unlock()
			cancel()
			if err != nil && !q.isClosed() {
				q.log.Warn("refreshing bm25 statistics", "err", err)
			}
		}
	}
}

// Search implements Index.
func (q *Index) Search(ctx context.Context, query index.Query) ([]index.Hit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.isClosed() {
		return nil, index.ErrClosed
	}
	p, err := index.PrepareQuery(query, q.cfg.Dim)
	if err != nil {
		return nil, err
	}
	if err := q.ensureFreshStats(ctx); err != nil {
		return nil, err
	}
	filter, err := q.searchFilter(&p)
	if err != nil {
		return nil, err
	}
	var sparseIdx []uint32
	var sparseVal []float32
	if p.UseSparse {
		sparseIdx, sparseVal = q.querySparse(p.Tenant, p.Weights)
	}
	req := &qc.QueryPoints{
		CollectionName: q.cfg.Collection,
		Limit:          ptr(uint64(p.Limit)),
		WithPayload:    qc.NewWithPayload(true),
	}
	if p.Fused() && !p.Fusion.ServerRRF() {
		return q.fuseClientSide(ctx, &p, filter, sparseIdx, sparseVal)
	}
	switch {
	case p.Fused():
		var pre []*qc.PrefetchQuery
		if p.UseDense {
			pre = append(pre, &qc.PrefetchQuery{
				Query: qc.NewQueryDense(p.UnitDense), Using: ptr(qDense), Filter: filter,
				Limit: ptr(uint64(p.CandidateLimit)),
			})
		}
		if len(sparseIdx) > 0 {
			pre = append(pre, &qc.PrefetchQuery{
				Query: qc.NewQuerySparse(sparseIdx, sparseVal), Using: ptr(qSparse), Filter: filter,
				Limit: ptr(uint64(p.CandidateLimit)),
			})
		}
		if len(pre) == 0 {
			return []index.Hit{}, nil
		}
		req.Prefetch = pre
		req.Query = qc.NewQueryRRF(&qc.Rrf{K: ptr(uint32(index.RRFK))})
		req.Filter = filter
	case p.UseDense:
		req.Query, req.Using, req.Filter = qc.NewQueryDense(p.UnitDense), ptr(qDense), filter
	default:
		if len(sparseIdx) == 0 {
			return []index.Hit{}, nil
		}
		req.Query, req.Using, req.Filter = qc.NewQuerySparse(sparseIdx, sparseVal), ptr(qSparse), filter
	}
	cctx, cancel := q.call(ctx)
	defer cancel()
	res, err := q.client.Query(cctx, req)
	if err != nil {
		return nil, fmt.Errorf("qdrant index: query: %w", err)
	}
	hits := make([]index.Hit, 0, len(res))
	for _, sp := range res {
		score := float64(sp.GetScore())
		if p.Fused() {
			score = index.NormalizeRRF(score, p.Lists())
		}
		if !p.Passes(score) {
			continue
		}
		c, err := chunkFromPayload(sp.GetPayload())
		if err != nil {
			return nil, fmt.Errorf("qdrant index: point %s: %w", sp.GetId().GetUuid(), err)
		}
		if c.Tenant != p.Tenant {
			// Defence in depth: never hand out another tenant's chunk, whatever the server did.
			return nil, fmt.Errorf("qdrant index: query for tenant %q returned a point of tenant %q", p.Tenant, c.Tenant)
		}
		hits = append(hits, index.Hit{Chunk: c, Score: score})
	}
	return hits, nil
}

// fuseClientSide runs a hybrid query whose fusion Qdrant cannot do itself (the default agreement fusion,
// weighted RRF, another k, weighted score fusion): the dense and the sparse candidate lists are queried one by
// one and fused here.
func (q *Index) fuseClientSide(ctx context.Context, p *index.PreparedQuery, filter *qc.Filter, sparseIdx []uint32, sparseVal []float32) ([]index.Hit, error) {
	var lists [][]index.Ranked[string]
	var weights []float64
	var absolute []bool
	points := map[string]*qc.ScoredPoint{}
	run := func(query *qc.Query, using string, w float64) error {
		req := &qc.QueryPoints{
			CollectionName: q.cfg.Collection, Limit: ptr(uint64(p.CandidateLimit)), WithPayload: qc.NewWithPayload(true),
			Query: query, Using: ptr(using), Filter: filter,
		}
		cctx, cancel := q.call(ctx)
		defer cancel()
		res, err := q.client.Query(cctx, req)
		if err != nil {
			return fmt.Errorf("qdrant index: query: %w", err)
		}
		l := make([]index.Ranked[string], 0, len(res))
		for _, sp := range res {
			id := sp.GetId().GetUuid()
			points[id] = sp
			l = append(l, index.Ranked[string]{Key: id, Score: float64(sp.GetScore())})
		}
		lists, weights, absolute = append(lists, l), append(weights, w), append(absolute, using == qDense)
		return nil
	}
	if p.UseDense {
		if err := run(qc.NewQueryDense(p.UnitDense), qDense, p.Fusion.DenseWeight); err != nil {
			return nil, err
		}
	}
	if p.UseSparse {
		if len(sparseIdx) > 0 {
			if err := run(qc.NewQuerySparse(sparseIdx, sparseVal), qSparse, p.Fusion.SparseWeight); err != nil {
				return nil, err
			}
		} else {
			lists, weights, absolute = append(lists, nil), append(weights, p.Fusion.SparseWeight), append(absolute, false)
		}
	}
	fused := index.FuseWeights(lists, weights, absolute, p.Fusion, p.Limit, strings.Compare)
	hits := make([]index.Hit, 0, len(fused))
	for _, r := range fused {
		if !p.Passes(r.Score) {
			continue
		}
		c, err := chunkFromPayload(points[r.Key].GetPayload())
		if err != nil {
			return nil, fmt.Errorf("qdrant index: point %s: %w", r.Key, err)
		}
		if c.Tenant != p.Tenant {
			return nil, fmt.Errorf("qdrant index: query for tenant %q returned a point of tenant %q", p.Tenant, c.Tenant)
		}
		hits = append(hits, index.Hit{Chunk: c, Score: r.Score})
	}
	return hits, nil
}

// querySparse turns query terms into the tenant's IDF weights over hashed indices; terms the tenant has never
// seen are dropped (no chunk of the tenant can match them).
func (q *Index) querySparse(tenant string, terms map[string]float64) ([]uint32, []float32) {
	q.statsMu.RLock()
	defer q.statsMu.RUnlock()
	s := q.stats[tenant]
	if s == nil {
		return nil, nil
	}
	w := make(map[uint32]float64, len(terms))
	for t, qtf := range terms {
		id := index.TermID(t)
		if df := s.df[id]; df > 0 {
			w[id] += index.BM25IDF(df, s.n) * qtf
		}
	}
	idx := make([]uint32, 0, len(w))
	for i := range w {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	vals := make([]float32, len(idx))
	for i, x := range idx {
		vals[i] = float32(w[x])
	}
	return idx, vals
}

// searchFilter is the filter of every candidate search: the tenant, the stores and the attribute filter.
func (q *Index) searchFilter(p *index.PreparedQuery) (*qc.Filter, error) {
	f := &qc.Filter{Must: []*qc.Condition{qc.NewMatchKeyword(qTenant, p.Tenant)}}
	if len(p.StoreIDs) > 0 {
		stores := slices.Sorted(maps.Keys(p.Stores))
		f.Must = append(f.Must, qc.NewMatchKeywords(qStore, stores...))
	}
	if p.Filter != nil {
		c, err := qdrantCondition(p.Filter)
		if err != nil {
			return nil, err
		}
		f.Must = append(f.Must, c)
	}
	return f, nil
}

// qdrantCondition translates a normalised OpenAI filter with the semantics documented on index.Filter.
func qdrantCondition(f *index.Filter) (*qc.Condition, error) {
	switch f.Type {
	case index.FilterAnd, index.FilterOr:
		conds := make([]*qc.Condition, 0, len(f.Filters))
		for i := range f.Filters {
			c, err := qdrantCondition(&f.Filters[i])
			if err != nil {
				return nil, err
			}
			conds = append(conds, c)
		}
		if f.Type == index.FilterAnd {
			return qc.NewFilterAsCondition(&qc.Filter{Must: conds}), nil
		}
		return qc.NewFilterAsCondition(&qc.Filter{Should: conds}), nil
	case index.FilterEq:
		return equals(attrPath(f.Key), f.Value), nil
	case index.FilterNe:
		return qc.NewFilterAsCondition(&qc.Filter{MustNot: []*qc.Condition{equals(attrPath(f.Key), f.Value)}}), nil
	case index.FilterIn, index.FilterNin:
		path := attrPath(f.Key)
		var conds []*qc.Condition
		var strs []string
		for _, v := range f.Value.([]any) {
			if s, ok := v.(string); ok {
				strs = append(strs, s)
				continue
			}
			conds = append(conds, equals(path, v))
		}
		if len(strs) > 0 {
			conds = append(conds, qc.NewMatchKeywords(path, strs...))
		}
		if f.Type == index.FilterIn {
			return qc.NewFilterAsCondition(&qc.Filter{Should: conds}), nil
		}
		return qc.NewFilterAsCondition(&qc.Filter{MustNot: conds}), nil
	case index.FilterGt, index.FilterGte, index.FilterLt, index.FilterLte:
		v := f.Value.(float64)
		r := &qc.Range{}
		switch f.Type {
		case index.FilterGt:
			r.Gt = &v
		case index.FilterGte:
			r.Gte = &v
		case index.FilterLt:
			r.Lt = &v
		case index.FilterLte:
			r.Lte = &v
		}
		return qc.NewRange(attrPath(f.Key), r), nil
	}
	return nil, index.Invalidf("unknown filter type %q", f.Type)
}

// equals matches a scalar: keyword for strings, boolean for bools, a closed range for numbers (Qdrant has no
// float match; the range also matches integer payloads).
func equals(path string, v any) *qc.Condition {
	switch x := v.(type) {
	case string:
		return qc.NewMatchKeyword(path, x)
	case bool:
		return qc.NewMatchBool(path, x)
	default:
		f := x.(float64)
		return qc.NewRange(path, &qc.Range{Gte: &f, Lte: &f})
	}
}

func chunkFromPayload(p map[string]*qc.Value) (index.Chunk, error) {
	c := index.Chunk{
		ID:      p[qChunk].GetStringValue(),
		Tenant:  p[qTenant].GetStringValue(),
		StoreID: p[qStore].GetStringValue(),
		FileID:  p[qFile].GetStringValue(),
		Index:   int(p[qIndex].GetIntegerValue()),
		Text:    p[qText].GetStringValue(),
		Length:  int(p[qLength].GetIntegerValue()),
	}
	if c.ID == "" || c.Tenant == "" {
		return index.Chunk{}, errors.New("payload lacks chunk_id or tenant")
	}
	if v, ok := p[qPages]; ok {
		c.Pages = []int{}
		for _, x := range v.GetListValue().GetValues() {
			c.Pages = append(c.Pages, int(x.GetIntegerValue()))
		}
	}
	if v, ok := p[qHeads]; ok {
		c.HeadingPath = []string{}
		for _, x := range v.GetListValue().GetValues() {
			c.HeadingPath = append(c.HeadingPath, x.GetStringValue())
		}
	}
	if v, ok := p[qAttrs]; ok {
		fields := v.GetStructValue().GetFields()
		c.Attributes = make(map[string]any, len(fields))
		for k, x := range fields {
			switch y := x.GetKind().(type) {
			case *qc.Value_StringValue:
				c.Attributes[k] = y.StringValue
			case *qc.Value_DoubleValue:
				c.Attributes[k] = y.DoubleValue
			case *qc.Value_IntegerValue:
				c.Attributes[k] = float64(y.IntegerValue)
			case *qc.Value_BoolValue:
				c.Attributes[k] = y.BoolValue
			}
		}
	}
	return c, nil
}

// Count implements Index.
func (q *Index) Count(ctx context.Context, tenant, storeID string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := index.ValidName("tenant", tenant); err != nil {
		return 0, err
	}
	if q.isClosed() {
		return 0, index.ErrClosed
	}
	cctx, cancel := q.call(ctx)
	defer cancel()
	n, err := q.client.Count(cctx, &qc.CountPoints{
		CollectionName: q.cfg.Collection,
		Filter:         scopeFilter(tenant, storeID, ""),
		Exact:          ptr(true),
	})
	if err != nil {
		return 0, fmt.Errorf("qdrant index: count: %w", err)
	}
	return int(n), nil
}

// Close stops the statistics refresher and closes the connection.
func (q *Index) Close() error {
	var err error
	q.closeOnce.Do(func() {
		close(q.closed)
		q.wg.Wait()
		err = q.client.Close()
	})
	return err
}
