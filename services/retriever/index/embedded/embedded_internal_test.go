package embedded

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/hnsw"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/internal/codec"
)

func tlog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// abandon simulates a crash: files are closed without a snapshot and nothing more is written.
func (e *Index) abandon() {
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	e.wal.close()
	e.wal = nil
	if e.vecs != nil {
		e.vecs.f.Close() // the scratch file stays behind, as after a crash
		e.vecs = nil
	}
	e.dirLock.Close()
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
}

func openT(t *testing.T, cfg Config) *Index {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = tlog(t)
	}
	e, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return e
}

func testChunk(tenant, file string, i int) index.Chunk {
	v := make([]float32, 8)
	v[i%8] = 1
	v[(i+3)%8] = float32(i%5) / 5
	return index.Chunk{
		ID: index.ChunkID(tenant, "s", file, i), Tenant: tenant, StoreID: "s", FileID: file, Index: i,
		Text: fmt.Sprintf("%s/%d", file, i), Dense: v, Terms: map[string]uint32{"w": 1, fmt.Sprintf("t%d", i%3): 2},
		Attributes: map[string]any{"i": float64(i)},
	}
}

func count(t *testing.T, e *Index, tenant string) int {
	t.Helper()
	n, err := e.Count(context.Background(), tenant, "")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func walFiles(t *testing.T, dir string) []string {
	t.Helper()
	gens, err := listWALs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range gens {
		out = append(out, filepath.Join(dir, walName(g)))
	}
	return out
}

func TestEmbeddedTornWALTail(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		damage    func(t *testing.T, path string, lastRecordStart int64)
		wantFinal int
	}{
		{"truncated mid-record", func(t *testing.T, path string, last int64) {
			st, _ := os.Stat(path)
			if err := os.Truncate(path, last+(st.Size()-last)/2); err != nil {
				t.Fatal(err)
			}
		}, 20},
		{"truncated inside the record header", func(t *testing.T, path string, last int64) {
			if err := os.Truncate(path, last+5); err != nil {
				t.Fatal(err)
			}
		}, 20},
		{"garbage appended", func(t *testing.T, path string, last int64) {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte{0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07})
			f.Close()
		}, 30},
		{"last record bit-flipped", func(t *testing.T, path string, last int64) {
			data, _ := os.ReadFile(path)
			data[len(data)-3] ^= 0x40
			os.WriteFile(path, data, 0o644)
		}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := openT(t, Config{Dir: dir})
			var batch []index.Chunk
			for i := range 30 {
				batch = append(batch, testChunk("acme", fmt.Sprintf("f%d", i/10), i))
			}
			if err := e.Upsert(ctx, batch[:10]); err != nil {
				t.Fatal(err)
			}
			if err := e.Upsert(ctx, batch[10:20]); err != nil {
				t.Fatal(err)
			}
			lastStart := e.wal.size
			if err := e.Upsert(ctx, batch[20:]); err != nil {
				t.Fatal(err)
			}
			e.abandon()
			wals := walFiles(t, dir)
			if len(wals) != 1 {
				t.Fatalf("wal files %v", wals)
			}
			tc.damage(t, wals[0], lastStart)

			e = openT(t, Config{Dir: dir})
			if got := count(t, e, "acme"); got != tc.wantFinal {
				t.Fatalf("after reopen: %d chunks, want %d", got, tc.wantFinal)
			}
			// The log is usable after the cut: write, crash again, replay again.
			if err := e.Upsert(ctx, []index.Chunk{testChunk("acme", "later", 99)}); err != nil {
				t.Fatal(err)
			}
			e.abandon()
			e = openT(t, Config{Dir: dir})
			defer e.Close()
			if got := count(t, e, "acme"); got != tc.wantFinal+1 {
				t.Fatalf("after second reopen: %d chunks, want %d", got, tc.wantFinal+1)
			}
			hits, err := e.Search(ctx, index.Query{Tenant: "acme", Terms: map[string]uint32{"w": 1}, Limit: 50})
			if err != nil || len(hits) != tc.wantFinal+1 {
				t.Fatalf("search after replay: %d hits, %v", len(hits), err)
			}
		})
	}
}

func TestEmbeddedCrashReplayMatchesSnapshot(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// SnapshotBytes tiny: snapshots happen between writes, so recovery combines a snapshot and a WAL tail.
	cfg := Config{Dir: dir, SnapshotBytes: 4 << 10, Seed: 1}
	e := openT(t, cfg)
	for b := range 12 {
		var batch []index.Chunk
		for i := range 25 {
			batch = append(batch, testChunk(fmt.Sprintf("t%d", b%3), fmt.Sprintf("f%d", b), b*25+i))
		}
		if err := e.Upsert(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if b%4 == 3 {
			if err := e.DeleteFile(ctx, fmt.Sprintf("t%d", b%3), "s", fmt.Sprintf("f%d", b-1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	q := index.Query{Tenant: "t1", Dense: testChunk("x", "x", 7).Dense, Terms: map[string]uint32{"t1": 1}, Limit: 20}
	want, err := e.Search(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	counts := []int{count(t, e, "t0"), count(t, e, "t1"), count(t, e, "t2")}
	e.abandon()
	if _, err := os.Stat(filepath.Join(dir, snapshotName)); err != nil {
		t.Fatalf("no snapshot was written: %v", err)
	}
	e = openT(t, cfg)
	defer e.Close()
	for i, want := range counts {
		if got := count(t, e, fmt.Sprintf("t%d", i)); got != want {
			t.Fatalf("tenant t%d: %d chunks, want %d", i, got, want)
		}
	}
	got, err := e.Search(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d hits, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Chunk.ID != want[i].Chunk.ID || got[i].Score != want[i].Score {
			t.Fatalf("hit %d: %s %v, want %s %v", i, got[i].Chunk.ID, got[i].Score, want[i].Chunk.ID, want[i].Score)
		}
	}
}

func TestEmbeddedRefusesCorruption(t *testing.T) {
	ctx := context.Background()
	t.Run("snapshot", func(t *testing.T) {
		dir := t.TempDir()
		e := openT(t, Config{Dir: dir})
		if err := e.Upsert(ctx, []index.Chunk{testChunk("a", "f", 1)}); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, snapshotName)
		data, _ := os.ReadFile(path)
		data[len(data)/2] ^= 1
		os.WriteFile(path, data, 0o644)
		if _, err := Open(Config{Dir: dir}); !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("open with a corrupt snapshot: %v", err)
		}
	})
	t.Run("middle of the log", func(t *testing.T) {
		dir := t.TempDir()
		e := openT(t, Config{Dir: dir})
		for i := range 3 {
			if err := e.Upsert(ctx, []index.Chunk{testChunk("a", "f", i)}); err != nil {
				t.Fatal(err)
			}
		}
		e.abandon()
		// A later generation makes the damaged one "not the last": its damage is not a torn tail.
		path := walFiles(t, dir)[0]
		data, _ := os.ReadFile(path)
		data[int(walHeaderLen)+10] ^= 1
		os.WriteFile(path, data, 0o644)
		if err := os.WriteFile(filepath.Join(dir, walName(2)), []byte(walMagic), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(Config{Dir: dir}); !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("open with a damaged older log: %v", err)
		}
	})
}

// TestEmbeddedReportsFailedWALCreation: when the header of a new write-ahead log cannot be written (here the
// next generation's file is /dev/full, so every write fails with ENOSPC), the rotation fails, Close reports it,
// the old log is kept and nothing acknowledged is lost.
func TestEmbeddedReportsFailedWALCreation(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("needs /dev/full (Linux) to make a write fail")
	}
	ctx := context.Background()
	dir := t.TempDir()
	e := openT(t, Config{Dir: dir})
	if err := e.Upsert(ctx, []index.Chunk{testChunk("t", "f", 0), testChunk("t", "f", 1)}); err != nil {
		t.Fatal(err)
	}
	gen := e.wal.gen + 1
	next := filepath.Join(dir, walName(gen))
	if err := os.Symlink("/dev/full", next); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err == nil || !strings.Contains(err.Error(), "create write-ahead log") {
		t.Fatalf("Close with an unwritable new log: %v, want a create write-ahead log error", err)
	}
	if _, err := createWAL(dir, gen); err == nil {
		t.Fatal("createWAL onto /dev/full succeeded")
	}
	if err := os.Remove(next); err != nil {
		t.Fatal(err)
	}
	e = openT(t, Config{Dir: dir})
	defer e.Close()
	if got := count(t, e, "t"); got != 2 {
		t.Fatalf("after the failed rotation: %d chunks, want 2", got)
	}
}

func TestEmbeddedDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	e := openT(t, Config{Dir: dir})
	if _, err := Open(Config{Dir: dir}); err == nil {
		t.Fatal("second open of the same directory succeeded")
	}
	e.Close()
	e = openT(t, Config{Dir: dir})
	e.Close()
}

func TestEmbeddedDimensionPersists(t *testing.T) {
	dir := t.TempDir()
	e := openT(t, Config{Dir: dir})
	if err := e.Upsert(context.Background(), []index.Chunk{testChunk("a", "f", 1)}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := Open(Config{Dir: dir, Dim: 16}); err == nil {
		t.Fatal("opened an 8-dimensional index with Dim 16")
	}
	e = openT(t, Config{Dir: dir})
	defer e.Close()
	err := e.Upsert(context.Background(), []index.Chunk{{ID: "x", Tenant: "a", StoreID: "s", FileID: "f", Dense: []float32{1, 2}}})
	if !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("wrong dimension after reopen: %v", err)
	}
}

func TestEmbeddedConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{},
		{Dir: "x", Dim: -1},
		{Dir: "x", SnapshotBytes: -1},
		{Dir: "x", HNSW: hnsw.Config{M: 1}},
		{Dir: "x", HNSW: hnsw.Config{EfSearch: -3}},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (Config{Dir: "x"}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedLargeTenantPaths drives the graph, filtered graph search, the exact fallback, tombstones, vacuum
// and document renumbering, checking every answer against brute force.
func TestEmbeddedLargeTenantPaths(t *testing.T) {
	ctx := context.Background()
	const dim = 32
	n := 3000
	if raceEnabled || os.Getenv("SMALLN") != "" {
		n = 1500
	}
	e := openT(t, Config{Dir: t.TempDir(), ExactSearchMax: 200, Seed: 3, Logger: slog.New(slog.DiscardHandler)})
	defer e.Close()
	gen := newClustered(5, dim, 60)
	all := make(map[string]index.Chunk)
	var batch []index.Chunk
	for i := range n {
		c := index.Chunk{
			ID: fmt.Sprintf("c%d", i), Tenant: "big", StoreID: fmt.Sprintf("s%d", i%3), FileID: fmt.Sprintf("f%d", i/10),
			Index: i % 10, Dense: gen.next(),
			Attributes: map[string]any{"mod7": float64(i % 7), "rare": i%97 == 0},
		}
		all[c.ID] = c
		batch = append(batch, c)
		if len(batch) == 500 {
			if err := e.Upsert(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	exact := func(q index.Query) []string {
		p, err := index.PrepareQuery(q, dim)
		if err != nil {
			t.Fatal(err)
		}
		type scored struct {
			id    string
			score float64
		}
		var rs []scored
		for id, c := range all {
			if p.Stores != nil && !p.Stores[c.StoreID] || p.Filter != nil && !p.Filter.Matches(c.Attributes) {
				continue
			}
			rs = append(rs, scored{id, cosine(p.UnitDense, c.Dense)})
		}
		slices.SortFunc(rs, func(a, b scored) int {
			if c := cmp.Compare(b.score, a.score); c != 0 {
				return c
			}
			return strings.Compare(a.id, b.id)
		})
		var out []string
		for i := 0; i < len(rs) && i < p.Limit; i++ {
			out = append(out, rs[i].id)
		}
		return out
	}
	check := func(what string, f *index.Filter, stores []string, minRecall float64) {
		t.Helper()
		var hit, total int
		for range 40 {
			q := index.Query{Tenant: "big", Dense: gen.next(), Mode: index.ModeDense, Limit: 10, Filter: f, StoreIDs: stores}
			hits, err := e.Search(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			want := exact(q)
			if len(hits) != len(want) {
				t.Fatalf("%s: %d hits, want %d", what, len(hits), len(want))
			}
			for _, h := range hits {
				c, ok := all[h.Chunk.ID]
				if !ok {
					t.Fatalf("%s: deleted chunk %s returned", what, h.Chunk.ID)
				}
				if f != nil && !f.Matches(c.Attributes) {
					t.Fatalf("%s: chunk %s fails the filter", what, h.Chunk.ID)
				}
				if slices.Contains(want, h.Chunk.ID) {
					hit++
				}
			}
			total += len(want)
		}
		if r := float64(hit) / float64(total); r < minRecall {
			t.Fatalf("%s: recall@10 %.3f < %.2f", what, r, minRecall)
		}
	}
	check("graph", nil, nil, 0.95)
	check("filtered graph (1/7)", &index.Filter{Type: index.FilterEq, Key: "mod7", Value: 3.0}, nil, 0.9)
	check("store + filter", &index.Filter{Type: index.FilterNe, Key: "mod7", Value: 3.0}, []string{"s1"}, 0.9)
	check("selective filter (exact)", &index.Filter{Type: index.FilterEq, Key: "rare", Value: true}, nil, 1)

	// Delete two thirds of the files: tombstones, vacuums and document renumbering all happen.
	for f := 0; f < n/10; f++ {
		if f%3 == 0 {
			continue
		}
		for s := range 3 {
			if err := e.DeleteFile(ctx, "big", fmt.Sprintf("s%d", s), fmt.Sprintf("f%d", f)); err != nil {
				t.Fatal(err)
			}
		}
		for i := f * 10; i < f*10+10; i++ {
			delete(all, fmt.Sprintf("c%d", i))
		}
	}
	e.mu.RLock()
	tn := e.tenants["big"]
	g := tn.graph
	if g.VacuumDue() {
		t.Errorf("vacuum overdue (%d live nodes)", g.Live())
	}
	if len(tn.docs) > 2*tn.live+1024 {
		t.Errorf("documents not renumbered: %d slots for %d live", len(tn.docs), tn.live)
	}
	e.mu.RUnlock()
	if got := count(t, e, "big"); got != len(all) {
		t.Fatalf("count %d, want %d", got, len(all))
	}
	check("graph after deletes", nil, nil, 0.95)
	check("filtered after deletes", &index.Filter{Type: index.FilterIn, Key: "mod7", Value: []any{1.0, 2.0, 3.0}}, nil, 0.9)
	// Re-insert into freed graph nodes.
	batch = nil
	for i := n; i < n+600; i++ {
		c := index.Chunk{ID: fmt.Sprintf("c%d", i), Tenant: "big", StoreID: "s0", FileID: "new", Dense: gen.next(),
			Attributes: map[string]any{"mod7": float64(i % 7)}}
		all[c.ID] = c
		batch = append(batch, c)
	}
	if err := e.Upsert(ctx, batch); err != nil {
		t.Fatal(err)
	}
	check("graph after reuse", nil, nil, 0.95)
}

// cosine is the cosine similarity of a unit vector u and any vector v, computed as the index does (v normalised
// to float32, then the float32 inner product), so that exact rankings agree to the last bit.
func cosine(u []float32, v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	inv := 1 / math.Sqrt(s)
	unit := make([]float32, len(v))
	for i, x := range v {
		unit[i] = float32(float64(x) * inv)
	}
	return float64(hnsw.Dot(u, unit))
}
