package qdrant_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/indextest"
	"github.com/aiforge/aiforge/services/retriever/index/qdrant"
	"github.com/aiforge/aiforge/services/retriever/index/qdrantfake"
)

func startFake(t *testing.T) *qdrantfake.Server {
	t.Helper()
	srv, err := qdrantfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func newQdrant(t *testing.T, addr, collection string) (*qdrant.Index, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return qdrant.New(ctx, qdrant.Config{
		Addr: addr, Collection: collection, Dim: indextest.Dim, Logger: testLogger(t), UpsertBatch: 16,
	})
}

func mustQdrant(t *testing.T, addr, collection string) *qdrant.Index {
	t.Helper()
	q, err := newQdrant(t, addr, collection)
	if err != nil {
		t.Fatalf("NewQdrant: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// TestQdrantContract runs the shared suite against the adapter talking gRPC to the in-process fake.
func TestQdrantContract(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index {
		return mustQdrant(t, startFake(t).Addr, "chunks")
	})
}

// TestQdrantPersistenceContract reopens adapters on the same server: the statistics are rebuilt from the
// collection.
func TestQdrantPersistenceContract(t *testing.T) {
	indextest.RunPersistence(t, func(t *testing.T) func() (index.Index, error) {
		srv := startFake(t)
		return func() (index.Index, error) { return newQdrant(t, srv.Addr, "chunks") }
	})
}

// qdrantURL returns host:port of a real Qdrant (gRPC) from QDRANT_URL, or "".
func qdrantURL() string {
	u := os.Getenv("QDRANT_URL")
	for _, p := range []string{"http://", "https://", "grpc://"} {
		u = strings.TrimPrefix(u, p)
	}
	return strings.TrimSuffix(u, "/")
}

// TestQdrantRealServer runs the shared suite against a real Qdrant when QDRANT_URL (host:port of its gRPC API) is
// set; every index gets its own collection, dropped afterwards.
func TestQdrantRealServer(t *testing.T) {
	addr := qdrantURL()
	if addr == "" {
		t.Skip("QDRANT_URL not set: the adapter is covered against the in-process fake; set QDRANT_URL=host:6334 to run against a real Qdrant")
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("QDRANT_URL %q: %v", addr, err)
	}
	port, _ := strconv.Atoi(portStr)
	admin, err := qc.NewClient(&qc.Config{Host: host, Port: port, SkipCompatibilityCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	unique := func(t *testing.T) string {
		var b [6]byte
		rand.Read(b[:])
		name := "aiforge_test_" + hex.EncodeToString(b[:])
		t.Cleanup(func() { admin.DeleteCollection(context.Background(), name) })
		return name
	}
	indextest.Run(t, func(t *testing.T) index.Index { return mustQdrant(t, addr, unique(t)) })
	indextest.RunPersistence(t, func(t *testing.T) func() (index.Index, error) {
		name := unique(t)
		return func() (index.Index, error) { return newQdrant(t, addr, name) }
	})
}

func tenantOf(f *qc.Filter) string {
	for _, c := range f.GetMust() {
		if fc := c.GetField(); fc != nil && fc.GetKey() == "tenant" {
			return fc.GetMatch().GetKeyword()
		}
	}
	return ""
}

func hasField(f *qc.Filter, key string) bool {
	for _, c := range f.GetMust() {
		if fc := c.GetField(); fc != nil && fc.GetKey() == key {
			return true
		}
	}
	return false
}

func TestQdrantWire(t *testing.T) {
	ctx := context.Background()
	srv := startFake(t)
	q := mustQdrant(t, srv.Addr, "chunks")

	c1 := index.Chunk{ID: index.ChunkID("acme", "s1", "f1", 0), Tenant: "acme", StoreID: "s1", FileID: "f1",
		Text: "hello", Dense: []float32{1, 0, 0, 0, 0, 0, 0, 0}, Terms: map[string]uint32{"hello": 2, "world": 1},
		Attributes: map[string]any{"lang": "en", "year": 2020, "dotted.key": true}}
	c2 := index.Chunk{ID: index.ChunkID("acme", "s1", "f1", 1), Tenant: "acme", StoreID: "s1", FileID: "f1",
		Text: "no vector", Terms: map[string]uint32{"hello": 1}}
	if err := q.Upsert(ctx, []index.Chunk{c1, c2}); err != nil {
		t.Fatal(err)
	}
	if err := q.Upsert(ctx, []index.Chunk{c1}); err != nil {
		t.Fatal(err)
	}
	other := c1
	other.Tenant = "globex"
	if err := q.Upsert(ctx, []index.Chunk{other}); err != nil {
		t.Fatal(err)
	}
	filter := &index.Filter{Type: "and", Filters: []index.Filter{
		{Type: "eq", Key: "lang", Value: "en"}, {Type: "gte", Key: "year", Value: 2000}}}
	queries := []index.Query{
		{Tenant: "acme", StoreIDs: []string{"s1"}, Dense: c1.Dense, Terms: map[string]uint32{"hello": 1}, Filter: filter, Limit: 7,
			Fusion: index.Fusion{Method: index.FusionRRF}}, // plain RRF: fused by Qdrant
		{Tenant: "acme", Dense: c1.Dense, Mode: index.ModeDense, Filter: filter},
		{Tenant: "acme", Terms: map[string]uint32{"hello": 2, "world": 1}, Mode: index.ModeSparse},
	}
	for _, qq := range queries {
		if _, err := q.Search(ctx, qq); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Count(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := q.DeleteFile(ctx, "acme", "s1", "f1"); err != nil {
		t.Fatal(err)
	}

	reqs := srv.Requests()
	firstUpsert := -1
	indexAt := map[string]int{}
	var upserts []*qc.UpsertPoints
	var queryReqs []*qc.QueryPoints
	for i, r := range reqs {
		switch m := r.Msg.(type) {
		case *qc.CreateCollection:
			dense := m.GetVectorsConfig().GetParamsMap().GetMap()["dense"]
			if dense == nil || dense.GetSize() != indextest.Dim || dense.GetDistance() != qc.Distance_Cosine {
				t.Errorf("collection without a named cosine dense vector of size %d: %v", indextest.Dim, m.GetVectorsConfig())
			}
			if m.GetVectorsConfig().GetParams() != nil {
				t.Error("collection has an unnamed vector")
			}
			if sp := m.GetSparseVectorsConfig().GetMap()["sparse"]; sp == nil || sp.GetModifier() == qc.Modifier_Idf {
				t.Errorf("collection sparse vector %v: want named \"sparse\" without the IDF modifier", sp)
			}
			if h := m.GetHnswConfig(); h.GetM() != 0 || h.GetPayloadM() == 0 {
				t.Errorf("hnsw config %v: want per-tenant graphs (m 0, payload_m > 0)", h)
			}
		case *qc.CreateFieldIndexCollection:
			indexAt[m.GetFieldName()] = i
			if m.GetFieldName() == "tenant" {
				if !m.GetFieldIndexParams().GetKeywordIndexParams().GetIsTenant() {
					t.Errorf("tenant index without is_tenant: %v", m)
				}
			}
			want := map[string]qc.FieldType{"tenant": qc.FieldType_FieldTypeKeyword, "store_id": qc.FieldType_FieldTypeKeyword,
				"file_id": qc.FieldType_FieldTypeKeyword, "attributes.lang": qc.FieldType_FieldTypeKeyword,
				"attributes.year": qc.FieldType_FieldTypeFloat, `attributes."dotted.key"`: qc.FieldType_FieldTypeBool}
			if w, ok := want[m.GetFieldName()]; !ok || m.GetFieldType() != w {
				t.Errorf("unexpected payload index %q of type %v", m.GetFieldName(), m.GetFieldType())
			}
			if !m.GetWait() {
				t.Errorf("payload index %q created without wait", m.GetFieldName())
			}
		case *qc.UpsertPoints:
			if firstUpsert < 0 {
				firstUpsert = i
			}
			upserts = append(upserts, m)
		case *qc.QueryPoints:
			queryReqs = append(queryReqs, m)
		}
		if f := filterOf(r.Msg); f != nil || isScoped(r.Msg) {
			if tenantOf(f) == "" {
				t.Errorf("%s without a tenant filter: %v", r.Method, r.Msg)
			}
		}
	}
	for _, field := range []string{"tenant", "store_id", "file_id", "attributes.lang", "attributes.year", `attributes."dotted.key"`} {
		at, ok := indexAt[field]
		if !ok {
			t.Errorf("no payload index on %q", field)
		} else if at > firstUpsert {
			t.Errorf("payload index on %q created after the first upsert", field)
		}
	}
	if len(upserts) != 3 {
		t.Fatalf("%d upserts", len(upserts))
	}
	// Deterministic UUID v5 ids, per tenant.
	id1, id1again, idOther := upserts[0].GetPoints()[0].GetId().GetUuid(), upserts[1].GetPoints()[0].GetId().GetUuid(),
		upserts[2].GetPoints()[0].GetId().GetUuid()
	if id1 == "" || id1 != id1again || id1 == idOther || id1[14] != '5' {
		t.Errorf("point ids %q %q %q: want equal UUID v5 for the same chunk, different across tenants", id1, id1again, idOther)
	}
	vecs := upserts[0].GetPoints()[0].GetVectors().GetVectors().GetVectors()
	if vecs["dense"].GetDense() == nil || vecs["sparse"].GetSparse() == nil {
		t.Errorf("point vectors %v: want named dense and sparse", vecs)
	}
	if v := upserts[0].GetPoints()[1].GetVectors().GetVectors().GetVectors(); v["dense"] != nil || v["sparse"] == nil {
		t.Errorf("chunk without embedding: vectors %v", v)
	}
	if !upserts[0].GetWait() {
		t.Error("upsert without wait")
	}
	if len(queryReqs) != 3 {
		t.Fatalf("%d queries", len(queryReqs))
	}
	hybrid := queryReqs[0]
	if rrf := hybrid.GetQuery().GetRrf(); rrf == nil || rrf.GetK() != index.RRFK {
		t.Errorf("hybrid query %v: want RRF k=%d", hybrid.GetQuery(), index.RRFK)
	}
	if len(hybrid.GetPrefetch()) != 2 {
		t.Fatalf("hybrid query with %d prefetches", len(hybrid.GetPrefetch()))
	}
	using := map[string]bool{}
	for _, pf := range hybrid.GetPrefetch() {
		using[pf.GetUsing()] = true
		if tenantOf(pf.GetFilter()) != "acme" {
			t.Errorf("prefetch %q without the tenant filter: %v", pf.GetUsing(), pf.GetFilter())
		}
		if !hasField(pf.GetFilter(), "store_id") || len(pf.GetFilter().GetMust()) != 3 {
			t.Errorf("prefetch %q without the store and attribute filters: %v", pf.GetUsing(), pf.GetFilter())
		}
		if pf.GetLimit() != uint64(index.CandidateFactor*7) {
			t.Errorf("prefetch limit %d, want %d", pf.GetLimit(), index.CandidateFactor*7)
		}
	}
	if !using["dense"] || !using["sparse"] || hybrid.GetLimit() != 7 {
		t.Errorf("hybrid prefetches use %v, limit %d", using, hybrid.GetLimit())
	}
	if queryReqs[1].GetUsing() != "dense" || queryReqs[1].GetQuery().GetNearest().GetDense() == nil {
		t.Errorf("dense query: %v", queryReqs[1])
	}
	sq := queryReqs[2]
	if sq.GetUsing() != "sparse" || sq.GetQuery().GetNearest().GetSparse() == nil {
		t.Fatalf("sparse query: %v", sq)
	}
	// Query values are the tenant's IDF (times query frequency): acme has 2 chunks, "hello" in both, "world" in one.
	sv := sq.GetQuery().GetNearest().GetSparse()
	if len(sv.GetValues()) != 2 {
		t.Fatalf("sparse query values %v", sv)
	}
	want := map[float32]bool{float32(2 * idf(2, 2)): true, float32(idf(1, 2)): true}
	for _, v := range sv.GetValues() {
		if !want[v] {
			t.Errorf("sparse query value %v not in %v", v, want)
		}
	}
}

func idf(n, total float64) float64 {
	return math.Log(1 + (total-n+0.5)/(n+0.5))
}

// filterOf returns the filter of requests that read or delete tenant data.
func filterOf(m any) *qc.Filter {
	switch r := m.(type) {
	case *qc.QueryPoints:
		return r.GetFilter()
	case *qc.CountPoints:
		return r.GetFilter()
	case *qc.DeletePoints:
		return r.GetPoints().GetFilter()
	case *qc.ScrollPoints:
		return r.GetFilter()
	}
	return nil
}

// isScoped reports requests that must carry a tenant filter (the start-up statistics scan reads all tenants and
// is the exception).
func isScoped(m any) bool {
	switch r := m.(type) {
	case *qc.QueryPoints, *qc.CountPoints, *qc.DeletePoints:
		return true
	case *qc.ScrollPoints:
		return r.GetFilter() != nil
	}
	return false
}

func TestQdrantRecoversStatisticsAfterPartialUpsert(t *testing.T) {
	ctx := context.Background()
	srv := startFake(t)
	q := mustQdrant(t, srv.Addr, "chunks")
	mk := func(prefix string, n int) []index.Chunk {
		var cs []index.Chunk
		for i := range n {
			cs = append(cs, index.Chunk{ID: fmt.Sprintf("%s%d", prefix, i), Tenant: "acme", StoreID: "s", FileID: prefix,
				Index: i, Terms: map[string]uint32{"w": 1, fmt.Sprintf("t%d", i%2): 3}, Length: 4})
		}
		return cs
	}
	if err := q.Upsert(ctx, mk("c", 32)); err != nil {
		t.Fatal(err)
	}
	// 40 chunks go in three requests of 16 (UpsertBatch); the second fails after the first landed.
	srv.FailAfter("Points/Upsert", 1, status.Error(codes.Unavailable, "injected"))
	if err := q.Upsert(ctx, mk("d", 40)); err == nil {
		t.Fatal("upsert succeeded despite the injected failure")
	}
	if got := srv.Points("chunks"); got != 48 {
		t.Fatalf("%d points stored, want 48", got)
	}
	// The next search rebuilds the statistics from the collection: N 48, "t0" in 16 + 8 chunks.
	hits, err := q.Search(ctx, index.Query{Tenant: "acme", Terms: map[string]uint32{"t0": 1}, Mode: index.ModeSparse, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := idf(24, 48) * 3 * 2.2 / (3 + 1.2)
	if len(hits) != 1 || math.Abs(hits[0].Score-want) > 1e-4 {
		t.Fatalf("score after recovery %v, want %v", hits, want)
	}
}

func TestQdrantRejectsMismatchedCollection(t *testing.T) {
	srv := startFake(t)
	q := mustQdrant(t, srv.Addr, "chunks")
	q.Close()
	ctx := context.Background()
	_, err := qdrant.New(ctx, qdrant.Config{Addr: srv.Addr, Collection: "chunks", Dim: indextest.Dim * 2})
	if err == nil || !strings.Contains(err.Error(), "size") {
		t.Fatalf("NewQdrant with another Dim: %v", err)
	}
	_, err = qdrant.New(ctx, qdrant.Config{Addr: "127.0.0.1:1", Dim: 8, Timeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "cannot reach Qdrant") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("NewQdrant without a server: %v, want a cannot reach error naming the address", err)
	}
}

// TestQdrantDimZeroAdoptsTheCollection: Dim 0 takes the existing collection's size, and refuses to guess one
// for a collection it would have to create.
func TestQdrantDimZeroAdoptsTheCollection(t *testing.T) {
	srv := startFake(t)
	ctx := context.Background()
	_, err := qdrant.New(ctx, qdrant.Config{Addr: srv.Addr, Collection: "fresh"})
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "--qdrant-dim") {
		t.Fatalf("Dim 0 on a missing collection: %v", err)
	}
	mustQdrant(t, srv.Addr, "chunks").Close()
	q, err := qdrant.New(ctx, qdrant.Config{Addr: srv.Addr, Collection: "chunks", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	v := make([]float32, indextest.Dim)
	v[0] = 1
	c := index.Chunk{ID: "c", Tenant: "t", StoreID: "s", FileID: "f", Text: "x", Dense: v}
	if err := q.Upsert(ctx, []index.Chunk{c}); err != nil {
		t.Fatalf("upsert at the adopted dimension: %v", err)
	}
	c.Dense = append(v, 0)
	if err := q.Upsert(ctx, []index.Chunk{c}); !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("upsert of another dimension: %v, want ErrInvalid", err)
	}
}

func TestParseURL(t *testing.T) {
	for raw, want := range map[string]struct {
		addr string
		tls  bool
	}{
		"localhost:6334":            {"localhost:6334", false},
		"qdrant":                    {"qdrant:6334", false},
		"http://qdrant:7000":        {"qdrant:7000", false},
		"grpc://10.0.0.1":           {"10.0.0.1:6334", false},
		"https://q.example.com":     {"q.example.com:6334", true},
		"grpcs://q.example.com:443": {"q.example.com:443", true},
		"http://[::1]:6334/":        {"[::1]:6334", false},
	} {
		addr, tls, err := qdrant.ParseURL(raw)
		if err != nil || addr != want.addr || tls != want.tls {
			t.Errorf("ParseURL(%q) = %q, %v, %v; want %q, %v", raw, addr, tls, err, want.addr, want.tls)
		}
	}
	for _, raw := range []string{"", "ftp://qdrant", "http://qdrant:6333", "http://qdrant:6334/collections", "http://u:p@qdrant"} {
		if addr, _, err := qdrant.ParseURL(raw); err == nil {
			t.Errorf("ParseURL(%q) = %q, want an error", raw, addr)
		}
	}
}

func TestQdrantConfigValidate(t *testing.T) {
	for _, c := range []qdrant.Config{
		{},
		{Addr: "localhost", Dim: 8},
		{Addr: "localhost:0", Dim: 8},
		{Addr: "localhost:6334", Dim: -1},
		{Addr: "localhost:6334", Dim: 8, Collection: "bad name"},
		{Addr: "localhost:6334", Dim: 8, Timeout: -1},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (qdrant.Config{Addr: "qdrant:6334", Dim: 384}).Validate(); err != nil {
		t.Fatal(err)
	}
	var err error = index.ErrClosed
	if !errors.Is(err, index.ErrClosed) {
		t.Fatal("unreachable")
	}
}

// TestQdrantClientSideFusion: a hybrid query with weights (which Qdrant's own RRF does not take) runs the two
// lists one by one and fuses them in the adapter, with the embedded index's scales.
func TestQdrantClientSideFusion(t *testing.T) {
	srv := startFake(t)
	q := mustQdrant(t, srv.Addr, "chunks")
	ctx := context.Background()
	vec := func(i int) []float32 {
		v := make([]float32, indextest.Dim)
		v[i] = 1
		return v
	}
	kw := index.Chunk{ID: "kw", Tenant: "t", StoreID: "s", FileID: "keyword", Text: "persistence", Dense: vec(1), Terms: map[string]uint32{"persist": 1}}
	dn := index.Chunk{ID: "dn", Tenant: "t", StoreID: "s", FileID: "vector", Text: "other", Dense: vec(0), Terms: map[string]uint32{"other": 1}}
	if err := q.Upsert(ctx, []index.Chunk{kw, dn}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f     index.Fusion
		first string
	}{
		{index.Fusion{Method: index.FusionWeighted, DenseWeight: 1}, "vector"},
		{index.Fusion{Method: index.FusionWeighted, SparseWeight: 1}, "keyword"},
		{index.Fusion{Method: index.FusionRRF, DenseWeight: 1, SparseWeight: 4}, "keyword"},
	} {
		hits, err := q.Search(ctx, index.Query{Tenant: "t", Mode: index.ModeHybrid, Dense: vec(0), TermWeights: map[string]float64{"persist": 1}, Fusion: c.f})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) == 0 || hits[0].Chunk.FileID != c.first || hits[0].Score <= 0 || hits[0].Score > 1 {
			t.Fatalf("fusion %+v: %+v, want %s first", c.f, hits, c.first)
		}
	}
}
