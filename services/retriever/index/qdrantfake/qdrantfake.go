// Package qdrantfake is a test tool: an in-process gRPC server that implements the part of Qdrant's Points,
// Collections and Qdrant services the aiforge index adapter uses, with Qdrant's semantics (named dense and sparse
// vectors, payload filters, prefetch + RRF fusion, scroll, count), and records every request so tests can assert
// on the wire protocol. It is not a database: everything lives in memory, searches are exact.
//
// Where Qdrant would reject a request (an unknown vector name, a wrong dimension, duplicate sparse indices, a
// fusion without prefetches) the fake rejects it too, so adapter mistakes surface in tests.
package qdrantfake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Request is one recorded call.
type Request struct {
	Method string        // e.g. "Points/Upsert"
	Msg    proto.Message // a copy of the request
}

// Server is a running fake.
type Server struct {
	Addr string // host:port on loopback

	grpc *grpc.Server
	lis  net.Listener

	mu          sync.Mutex
	collections map[string]*collection
	requests    []Request
	fail        map[string]*injected // method → failure to inject
}

type injected struct {
	skip int
	err  error
}

type collection struct {
	info    *qdrant.CreateCollection
	indexes map[string]*qdrant.PayloadSchemaInfo
	points  map[string]*point
}

type point struct {
	id      *qdrant.PointId
	payload map[string]*qdrant.Value
	dense   map[string][]float32 // as stored (normalised for cosine)
	sparse  map[string]*qdrant.SparseVector
}

// Start listens on a loopback port and serves until Close.
func Start() (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: lis.Addr().String(), lis: lis, grpc: grpc.NewServer(), collections: map[string]*collection{},
		fail: map[string]*injected{}}
	qdrant.RegisterPointsServer(s.grpc, &pointsServer{s: s})
	qdrant.RegisterCollectionsServer(s.grpc, &collectionsServer{s: s})
	qdrant.RegisterQdrantServer(s.grpc, &healthServer{})
	go func() { _ = s.grpc.Serve(lis) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { s.grpc.Stop() }

// Requests returns the recorded requests, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// FailNext makes the next call of method (e.g. "Points/Upsert") fail with err.
func (s *Server) FailNext(method string, err error) { s.FailAfter(method, 0, err) }

// FailAfter lets skip calls of method succeed, then fails one with err.
func (s *Server) FailAfter(method string, skip int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[method] = &injected{skip: skip, err: err}
}

// Points returns the number of points stored in a collection.
func (s *Server) Points(collectionName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.collections[collectionName]; c != nil {
		return len(c.points)
	}
	return 0
}

// begin records a request and returns the injected failure, if any. Caller holds no lock; begin locks s.mu and
// leaves it locked for the handler.
func (s *Server) begin(method string, msg proto.Message) error {
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: method, Msg: proto.Clone(msg)})
	if f, ok := s.fail[method]; ok {
		if f.skip > 0 {
			f.skip--
			return nil
		}
		delete(s.fail, method)
		return f.err
	}
	return nil
}

func (s *Server) coll(name string) (*collection, error) {
	c := s.collections[name]
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "Collection `%s` doesn't exist!", name)
	}
	return c, nil
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

type healthServer struct {
	qdrant.UnimplementedQdrantServer
}

func (healthServer) HealthCheck(context.Context, *qdrant.HealthCheckRequest) (*qdrant.HealthCheckReply, error) {
	return &qdrant.HealthCheckReply{Title: "qdrantfake", Version: "1.17.0"}, nil
}

// ---- collections ----

type collectionsServer struct {
	qdrant.UnimplementedCollectionsServer
	s *Server
}

func (cs *collectionsServer) Create(_ context.Context, req *qdrant.CreateCollection) (*qdrant.CollectionOperationResponse, error) {
	s := cs.s
	err := s.begin("Collections/Create", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if _, ok := s.collections[req.GetCollectionName()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "Collection `%s` already exists!", req.GetCollectionName())
	}
	for name, p := range req.GetVectorsConfig().GetParamsMap().GetMap() {
		if p.GetSize() == 0 || name == "" {
			return nil, invalid("vector %q: size must be positive", name)
		}
	}
	if req.GetVectorsConfig().GetParams() != nil {
		return nil, invalid("fake supports named vectors only")
	}
	s.collections[req.GetCollectionName()] = &collection{
		info: proto.Clone(req).(*qdrant.CreateCollection), indexes: map[string]*qdrant.PayloadSchemaInfo{},
		points: map[string]*point{},
	}
	return &qdrant.CollectionOperationResponse{Result: true}, nil
}

func (cs *collectionsServer) CollectionExists(_ context.Context, req *qdrant.CollectionExistsRequest) (*qdrant.CollectionExistsResponse, error) {
	s := cs.s
	err := s.begin("Collections/CollectionExists", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	_, ok := s.collections[req.GetCollectionName()]
	return &qdrant.CollectionExistsResponse{Result: &qdrant.CollectionExists{Exists: ok}}, nil
}

func (cs *collectionsServer) Get(_ context.Context, req *qdrant.GetCollectionInfoRequest) (*qdrant.GetCollectionInfoResponse, error) {
	s := cs.s
	err := s.begin("Collections/Get", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := s.coll(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	schema := make(map[string]*qdrant.PayloadSchemaInfo, len(c.indexes))
	for k, v := range c.indexes {
		schema[k] = proto.Clone(v).(*qdrant.PayloadSchemaInfo)
	}
	n := uint64(len(c.points))
	return &qdrant.GetCollectionInfoResponse{Result: &qdrant.CollectionInfo{
		Status:      qdrant.CollectionStatus_Green,
		PointsCount: &n,
		Config: &qdrant.CollectionConfig{Params: &qdrant.CollectionParams{
			VectorsConfig:       c.info.GetVectorsConfig(),
			SparseVectorsConfig: c.info.GetSparseVectorsConfig(),
		}},
		PayloadSchema: schema,
	}}, nil
}

func (cs *collectionsServer) Delete(_ context.Context, req *qdrant.DeleteCollection) (*qdrant.CollectionOperationResponse, error) {
	s := cs.s
	err := s.begin("Collections/Delete", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	_, ok := s.collections[req.GetCollectionName()]
	delete(s.collections, req.GetCollectionName())
	return &qdrant.CollectionOperationResponse{Result: ok}, nil
}

// ---- points ----

type pointsServer struct {
	qdrant.UnimplementedPointsServer
	s *Server
}

func idKey(id *qdrant.PointId) string {
	if u := id.GetUuid(); u != "" {
		return "u:" + strings.ToLower(u)
	}
	return fmt.Sprintf("n:%020d", id.GetNum())
}

func ok() *qdrant.PointsOperationResponse {
	return &qdrant.PointsOperationResponse{Result: &qdrant.UpdateResult{Status: qdrant.UpdateStatus_Completed}}
}

func (ps *pointsServer) CreateFieldIndex(_ context.Context, req *qdrant.CreateFieldIndexCollection) (*qdrant.PointsOperationResponse, error) {
	s := ps.s
	err := s.begin("Points/CreateFieldIndex", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := s.coll(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	if _, err := parsePath(req.GetFieldName()); err != nil {
		return nil, err
	}
	types := map[qdrant.FieldType]qdrant.PayloadSchemaType{
		qdrant.FieldType_FieldTypeKeyword: qdrant.PayloadSchemaType_Keyword,
		qdrant.FieldType_FieldTypeInteger: qdrant.PayloadSchemaType_Integer,
		qdrant.FieldType_FieldTypeFloat:   qdrant.PayloadSchemaType_Float,
		qdrant.FieldType_FieldTypeBool:    qdrant.PayloadSchemaType_Bool,
	}
	t, known := types[req.GetFieldType()]
	if !known {
		return nil, invalid("fake does not support field type %v", req.GetFieldType())
	}
	c.indexes[req.GetFieldName()] = &qdrant.PayloadSchemaInfo{DataType: t, Params: req.GetFieldIndexParams()}
	return ok(), nil
}

func (ps *pointsServer) Upsert(_ context.Context, req *qdrant.UpsertPoints) (*qdrant.PointsOperationResponse, error) {
	s := ps.s
	err := s.begin("Points/Upsert", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := s.coll(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	stored := make([]*point, 0, len(req.GetPoints()))
	for _, p := range req.GetPoints() {
		sp, err := c.convert(p)
		if err != nil {
			return nil, err
		}
		stored = append(stored, sp)
	}
	for _, sp := range stored {
		c.points[idKey(sp.id)] = sp
	}
	return ok(), nil
}

func (c *collection) convert(p *qdrant.PointStruct) (*point, error) {
	if p.GetId() == nil {
		return nil, invalid("point without id")
	}
	if u := p.GetId().GetUuid(); u != "" && !isUUID(u) {
		return nil, invalid("bad uuid %q", u)
	}
	out := &point{id: p.GetId(), payload: p.GetPayload(), dense: map[string][]float32{}, sparse: map[string]*qdrant.SparseVector{}}
	named := p.GetVectors().GetVectors().GetVectors()
	if p.GetVectors() != nil && named == nil && p.GetVectors().GetVector() != nil {
		return nil, invalid("collection has named vectors only; got an unnamed vector")
	}
	denseCfg := c.info.GetVectorsConfig().GetParamsMap().GetMap()
	sparseCfg := c.info.GetSparseVectorsConfig().GetMap()
	for name, v := range named {
		switch {
		case v.GetDense() != nil:
			cfg := denseCfg[name]
			if cfg == nil {
				return nil, invalid("Wrong input: Not existing vector name error: %s", name)
			}
			data := v.GetDense().GetData()
			if uint64(len(data)) != cfg.GetSize() {
				return nil, invalid("Wrong input: Vector dimension error: expected dim: %d, got %d", cfg.GetSize(), len(data))
			}
			if cfg.GetDistance() == qdrant.Distance_Cosine {
				data = unit(data)
			}
			out.dense[name] = data
		case v.GetSparse() != nil:
			if sparseCfg[name] == nil {
				return nil, invalid("Wrong input: Not existing vector name error: %s", name)
			}
			sv := v.GetSparse()
			if len(sv.GetIndices()) != len(sv.GetValues()) {
				return nil, invalid("sparse vector: indices and values differ in length")
			}
			seen := map[uint32]bool{}
			for _, i := range sv.GetIndices() {
				if seen[i] {
					return nil, invalid("sparse vector: duplicate index %d", i)
				}
				seen[i] = true
			}
			out.sparse[name] = proto.Clone(sv).(*qdrant.SparseVector)
		default:
			return nil, invalid("vector %q: fake supports dense and sparse vectors", name)
		}
	}
	return out, nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
				return false
			}
		}
	}
	return true
}

func unit(v []float32) []float32 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	if s == 0 {
		return out
	}
	inv := 1 / math.Sqrt(s)
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out
}

func (ps *pointsServer) Delete(_ context.Context, req *qdrant.DeletePoints) (*qdrant.PointsOperationResponse, error) {
	s := ps.s
	err := s.begin("Points/Delete", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := s.coll(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	if ids := req.GetPoints().GetPoints(); ids != nil {
		for _, id := range ids.GetIds() {
			delete(c.points, idKey(id))
		}
		return ok(), nil
	}
	f := req.GetPoints().GetFilter()
	if f == nil {
		return nil, invalid("delete needs ids or a filter")
	}
	for k, p := range c.points {
		m, err := matches(f, p)
		if err != nil {
			return nil, err
		}
		if m {
			delete(c.points, k)
		}
	}
	return ok(), nil
}

func (ps *pointsServer) Get(_ context.Context, req *qdrant.GetPoints) (*qdrant.GetResponse, error) {
	s := ps.s
	err := s.begin("Points/Get", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := s.coll(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	var out []*qdrant.RetrievedPoint
	for _, id := range req.GetIds() {
		if p := c.points[idKey(id)]; p != nil {
			out = append(out, retrieved(p, req.GetWithPayload(), req.GetWithVectors()))
		}
	}
	return &qdrant.GetResponse{Result: out}, nil
}

func retrieved(p *point, wp *qdrant.WithPayloadSelector, wv *qdrant.WithVectorsSelector) *qdrant.RetrievedPoint {
	return &qdrant.RetrievedPoint{Id: p.id, Payload: selectPayload(p, wp), Vectors: selectVectors(p, wv)}
}

func selectPayload(p *point, wp *qdrant.WithPayloadSelector) map[string]*qdrant.Value {
	switch {
	case wp == nil:
		return nil
	case wp.GetInclude() != nil:
		out := map[string]*qdrant.Value{}
		for _, f := range wp.GetInclude().GetFields() {
			if v, ok := p.payload[f]; ok {
				out[f] = v
			}
		}
		return out
	case wp.GetExclude() != nil:
		out := map[string]*qdrant.Value{}
		for k, v := range p.payload {
			if !slices.Contains(wp.GetExclude().GetFields(), k) {
				out[k] = v
			}
		}
		return out
	case wp.GetEnable():
		return p.payload
	}
	return nil
}

func selectVectors(p *point, wv *qdrant.WithVectorsSelector) *qdrant.VectorsOutput {
	if wv == nil {
		return nil
	}
	var names []string
	switch {
	case wv.GetInclude() != nil:
		names = wv.GetInclude().GetNames()
	case wv.GetEnable():
		for n := range p.dense {
			names = append(names, n)
		}
		for n := range p.sparse {
			names = append(names, n)
		}
	default:
		return nil
	}
	out := map[string]*qdrant.VectorOutput{}
	for _, n := range names {
		if d, ok := p.dense[n]; ok {
			out[n] = &qdrant.VectorOutput{Vector: &qdrant.VectorOutput_Dense{Dense: &qdrant.DenseVector{Data: d}}}
		}
		if sv, ok := p.sparse[n]; ok {
			out[n] = &qdrant.VectorOutput{Vector: &qdrant.VectorOutput_Sparse{Sparse: sv}}
		}
	}
	return &qdrant.VectorsOutput{VectorsOptions: &qdrant.VectorsOutput_Vectors{Vectors: &qdrant.NamedVectorsOutput{Vectors: out}}}
}

func (c *collection) sortedKeys() []string {
	keys := make([]string, 0, len(c.points))
	for k := range c.points {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (ps *pointsServer) Scroll(_ context.Context, req *qdrant.ScrollPoints) (*qdrant.ScrollResponse, error) {
	s := ps.s
	err := s.begin("Points/Scroll", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := s.coll(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 10
	}
	from := ""
	if req.GetOffset() != nil {
		from = idKey(req.GetOffset())
	}
	resp := &qdrant.ScrollResponse{}
	for _, k := range c.sortedKeys() {
		if k < from {
			continue
		}
		p := c.points[k]
		if req.GetFilter() != nil {
			m, err := matches(req.GetFilter(), p)
			if err != nil {
				return nil, err
			}
			if !m {
				continue
			}
		}
		if len(resp.Result) == limit {
			resp.NextPageOffset = p.id
			break
		}
		resp.Result = append(resp.Result, retrieved(p, req.GetWithPayload(), req.GetWithVectors()))
	}
	return resp, nil
}

func (ps *pointsServer) Count(_ context.Context, req *qdrant.CountPoints) (*qdrant.CountResponse, error) {
	s := ps.s
	err := s.begin("Points/Count", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := s.coll(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	n := uint64(0)
	for _, p := range c.points {
		m := true
		if req.GetFilter() != nil {
			if m, err = matches(req.GetFilter(), p); err != nil {
				return nil, err
			}
		}
		if m {
			n++
		}
	}
	return &qdrant.CountResponse{Result: &qdrant.CountResult{Count: n}}, nil
}

type scored struct {
	p     *point
	score float64
}

func (ps *pointsServer) Query(_ context.Context, req *qdrant.QueryPoints) (*qdrant.QueryResponse, error) {
	s := ps.s
	err := s.begin("Points/Query", req)
	defer s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := s.coll(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	if req.Limit == nil {
		return nil, invalid("fake requires an explicit limit")
	}
	res, err := c.run(req.GetPrefetch(), req.GetQuery(), req.GetUsing(), req.GetFilter(), int(req.GetLimit()), req.ScoreThreshold)
	if err != nil {
		return nil, err
	}
	out := make([]*qdrant.ScoredPoint, len(res))
	for i, r := range res {
		out[i] = &qdrant.ScoredPoint{Id: r.p.id, Score: float32(r.score), Payload: selectPayload(r.p, req.GetWithPayload()),
			Vectors: selectVectors(r.p, req.GetWithVectors())}
	}
	return &qdrant.QueryResponse{Result: out}, nil
}

// run evaluates one query level. A prefetch's results are filtered by its own filter only: the fake does not
// propagate filters downwards, so an adapter that forgets a filter inside a prefetch is caught.
func (c *collection) run(prefetch []*qdrant.PrefetchQuery, q *qdrant.Query, using string, filter *qdrant.Filter,
	limit int, threshold *float32) ([]scored, error) {
	var res []scored
	switch v := q.GetVariant().(type) {
	case *qdrant.Query_Rrf, *qdrant.Query_Fusion:
		if len(prefetch) == 0 {
			return nil, invalid("fusion needs prefetches")
		}
		k := 2 // Qdrant's default
		if r, ok := v.(*qdrant.Query_Rrf); ok {
			if r.Rrf.K != nil {
				k = int(r.Rrf.GetK())
			}
		} else if v.(*qdrant.Query_Fusion).Fusion != qdrant.Fusion_RRF {
			return nil, invalid("fake supports RRF fusion only")
		}
		acc := map[string]*scored{}
		for _, pf := range prefetch {
			sub, err := c.run(pf.GetPrefetch(), pf.GetQuery(), pf.GetUsing(), pf.GetFilter(), int(pf.GetLimit()), pf.ScoreThreshold)
			if err != nil {
				return nil, err
			}
			for pos, r := range sub {
				key := idKey(r.p.id)
				if acc[key] == nil {
					acc[key] = &scored{p: r.p}
				}
				acc[key].score += 1 / float64(pos+k) // Qdrant: 1/(position + k), position 0-based
			}
		}
		for _, r := range acc {
			if filter != nil {
				m, err := matches(filter, r.p)
				if err != nil {
					return nil, err
				}
				if !m {
					continue
				}
			}
			res = append(res, *r)
		}
	case *qdrant.Query_Nearest:
		if len(prefetch) > 0 {
			return nil, invalid("fake supports prefetch with fusion only")
		}
		if limit <= 0 {
			limit = 10
		}
		in := v.Nearest
		denseCfg := c.info.GetVectorsConfig().GetParamsMap().GetMap()[using]
		sparseCfg := c.info.GetSparseVectorsConfig().GetMap()[using]
		switch {
		case in.GetDense() != nil:
			if denseCfg == nil {
				return nil, invalid("Wrong input: Not existing vector name error: %s", using)
			}
			qv := in.GetDense().GetData()
			if uint64(len(qv)) != denseCfg.GetSize() {
				return nil, invalid("Wrong input: Vector dimension error: expected dim: %d, got %d", denseCfg.GetSize(), len(qv))
			}
			qv = unit(qv)
			for _, p := range c.points {
				d, ok := p.dense[using]
				if !ok {
					continue
				}
				var s float64
				for i := range d {
					s += float64(d[i]) * float64(qv[i])
				}
				res = append(res, scored{p: p, score: s})
			}
		case in.GetSparse() != nil:
			if sparseCfg == nil {
				return nil, invalid("Wrong input: Not existing vector name error: %s", using)
			}
			qs := in.GetSparse()
			qw := map[uint32]float64{}
			for i, idx := range qs.GetIndices() {
				qw[idx] = float64(qs.GetValues()[i])
			}
			for _, p := range c.points {
				sv, ok := p.sparse[using]
				if !ok {
					continue
				}
				var s float64
				overlap := false
				for i, idx := range sv.GetIndices() {
					if w, ok := qw[idx]; ok {
						s += w * float64(sv.GetValues()[i])
						overlap = true
					}
				}
				if overlap { // sparse search only finds points sharing an index with the query
					res = append(res, scored{p: p, score: s})
				}
			}
		default:
			return nil, invalid("fake supports dense and sparse nearest queries")
		}
		kept := res[:0]
		for _, r := range res {
			if filter != nil {
				m, err := matches(filter, r.p)
				if err != nil {
					return nil, err
				}
				if !m {
					continue
				}
			}
			kept = append(kept, r)
		}
		res = kept
	default:
		return nil, invalid("fake does not support query %T", q.GetVariant())
	}
	slices.SortFunc(res, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(idKey(a.p.id), idKey(b.p.id))
	})
	if threshold != nil {
		kept := res[:0]
		for _, r := range res {
			if r.score >= float64(*threshold) {
				kept = append(kept, r)
			}
		}
		res = kept
	}
	if limit > 0 && len(res) > limit {
		res = res[:limit]
	}
	return res, nil
}

// ---- filters ----

func matches(f *qdrant.Filter, p *point) (bool, error) {
	for _, c := range f.GetMust() {
		m, err := cond(c, p)
		if err != nil || !m {
			return false, err
		}
	}
	for _, c := range f.GetMustNot() {
		m, err := cond(c, p)
		if err != nil || m {
			return false, err
		}
	}
	if len(f.GetShould()) > 0 {
		for _, c := range f.GetShould() {
			m, err := cond(c, p)
			if err != nil {
				return false, err
			}
			if m {
				return true, nil
			}
		}
		return false, nil
	}
	return true, nil
}

func cond(c *qdrant.Condition, p *point) (bool, error) {
	switch v := c.GetConditionOneOf().(type) {
	case *qdrant.Condition_Filter:
		return matches(v.Filter, p)
	case *qdrant.Condition_HasId:
		for _, id := range v.HasId.GetHasId() {
			if idKey(id) == idKey(p.id) {
				return true, nil
			}
		}
		return false, nil
	case *qdrant.Condition_IsEmpty:
		vals, err := lookup(p.payload, v.IsEmpty.GetKey())
		return len(vals) == 0, err
	case *qdrant.Condition_Field:
		return field(v.Field, p)
	}
	return false, invalid("fake does not support condition %T", c.GetConditionOneOf())
}

func field(fc *qdrant.FieldCondition, p *point) (bool, error) {
	vals, err := lookup(p.payload, fc.GetKey())
	if err != nil {
		return false, err
	}
	if m := fc.GetMatch(); m != nil {
		switch mv := m.GetMatchValue().(type) {
		case *qdrant.Match_Keyword:
			return anyVal(vals, func(x *qdrant.Value) bool { return isString(x) && x.GetStringValue() == mv.Keyword }), nil
		case *qdrant.Match_Keywords:
			return anyVal(vals, func(x *qdrant.Value) bool {
				return isString(x) && slices.Contains(mv.Keywords.GetStrings(), x.GetStringValue())
			}), nil
		case *qdrant.Match_ExceptKeywords:
			return anyVal(vals, func(x *qdrant.Value) bool {
				return !isString(x) || !slices.Contains(mv.ExceptKeywords.GetStrings(), x.GetStringValue())
			}), nil
		case *qdrant.Match_Integer:
			return anyVal(vals, func(x *qdrant.Value) bool {
				_, ok := x.GetKind().(*qdrant.Value_IntegerValue)
				return ok && x.GetIntegerValue() == mv.Integer
			}), nil
		case *qdrant.Match_Integers:
			return anyVal(vals, func(x *qdrant.Value) bool {
				_, ok := x.GetKind().(*qdrant.Value_IntegerValue)
				return ok && slices.Contains(mv.Integers.GetIntegers(), x.GetIntegerValue())
			}), nil
		case *qdrant.Match_Boolean:
			return anyVal(vals, func(x *qdrant.Value) bool {
				_, ok := x.GetKind().(*qdrant.Value_BoolValue)
				return ok && x.GetBoolValue() == mv.Boolean
			}), nil
		}
		return false, invalid("fake does not support match %T", m.GetMatchValue())
	}
	if r := fc.GetRange(); r != nil {
		return anyVal(vals, func(x *qdrant.Value) bool {
			var f float64
			switch k := x.GetKind().(type) {
			case *qdrant.Value_DoubleValue:
				f = k.DoubleValue
			case *qdrant.Value_IntegerValue:
				f = float64(k.IntegerValue)
			default:
				return false
			}
			return (r.Lt == nil || f < r.GetLt()) && (r.Lte == nil || f <= r.GetLte()) &&
				(r.Gt == nil || f > r.GetGt()) && (r.Gte == nil || f >= r.GetGte())
		}), nil
	}
	return false, invalid("fake supports match and range field conditions")
}

func isString(x *qdrant.Value) bool {
	_, ok := x.GetKind().(*qdrant.Value_StringValue)
	return ok
}

func anyVal(vals []*qdrant.Value, f func(*qdrant.Value) bool) bool {
	return slices.ContainsFunc(vals, f)
}

// lookup resolves a payload path (a.b, a."quoted.key") to its values; arrays are flattened.
func lookup(payload map[string]*qdrant.Value, path string) ([]*qdrant.Value, error) {
	segs, err := parsePath(path)
	if err != nil {
		return nil, err
	}
	cur := []*qdrant.Value{qdrant.NewValueFromFields(payload)}
	for _, seg := range segs {
		var next []*qdrant.Value
		for _, v := range cur {
			if st := v.GetStructValue(); st != nil {
				if x, ok := st.GetFields()[seg]; ok {
					next = append(next, x)
				}
			}
		}
		cur = next
	}
	var out []*qdrant.Value
	for _, v := range cur {
		if l := v.GetListValue(); l != nil {
			out = append(out, l.GetValues()...)
			continue
		}
		if _, null := v.GetKind().(*qdrant.Value_NullValue); null {
			continue
		}
		out = append(out, v)
	}
	return out, nil
}

func parsePath(path string) ([]string, error) {
	var segs []string
	for i := 0; i < len(path); {
		if path[i] == '"' {
			j := strings.IndexByte(path[i+1:], '"')
			if j < 0 {
				return nil, invalid("bad payload key %q: unterminated quote", path)
			}
			segs = append(segs, path[i+1:i+1+j])
			i += j + 2
		} else {
			j := strings.IndexByte(path[i:], '.')
			if j < 0 {
				j = len(path) - i
			}
			seg := path[i : i+j]
			if seg == "" || strings.ContainsAny(seg, `"[] `) {
				return nil, invalid("bad payload key %q", path)
			}
			segs = append(segs, seg)
			i += j
		}
		if i < len(path) {
			if path[i] != '.' {
				return nil, invalid("bad payload key %q", path)
			}
			i++
			if i == len(path) {
				return nil, invalid("bad payload key %q: trailing dot", path)
			}
		}
	}
	if len(segs) == 0 {
		return nil, errors.New("empty payload key")
	}
	return segs, nil
}
