package embedded

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/hnsw"
)

// TestQuantizedGraphRecall: 20,000 clustered 64-dimensional vectors in an int8 graph whose float32 vectors live
// in the vector file; recall@10 against brute force must stay at least 0.95. 5,000 under the race detector.
func TestQuantizedGraphRecall(t *testing.T) {
	n, dim, queries := 20_000, 64, 200
	if raceEnabled {
		n, queries = 5_000, 100
	}
	gen := newClustered(3, dim, 200)
	data := make([][]float32, n)
	labels := make([]uint32, n)
	for i := range data {
		data[i], labels[i] = gen.next(), uint32(i)
	}
	vf, err := createVecFile(t.TempDir(), dim)
	if err != nil {
		t.Fatal(err)
	}
	defer vf.close()
	cfg := hnsw.Config{}.WithDefaults()
	gq := hnsw.New(dim, cfg, 9, &vecSeg{file: vf})
	for start := 0; start < n; start += 1000 {
		if _, err := gq.Add(data[start:start+1000], labels[start:start+1000]); err != nil {
			t.Fatal(err)
		}
	}
	if want := int64(n * dim * 4); vf.Size() != want { // node ids 0..n-1 fill the extents in order
		t.Fatalf("vector file %d bytes, want %d", vf.Size(), want)
	}
	recall := func(g *hnsw.Graph) float64 {
		hit := 0
		for range queries {
			q := gen.next()
			truth := exactTopK(data, q, 10)
			res, _, err := g.Search(q, 10, 64, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				for _, j := range truth {
					if int(r.Label) == j {
						hit++
					}
				}
			}
		}
		return float64(hit) / float64(queries*10)
	}
	rq := recall(gq)
	t.Logf("recall@10 at ef 64, int8 graph + float32 rescoring: %.4f", rq)
	if rq < 0.95 {
		t.Fatalf("quantized recall@10 %.4f < 0.95", rq)
	}
}

// TestQuantizedReopenIdentical: the same searches return the same hits and the same scores after a clean close
// (snapshot) and after a crash (WAL replay over the snapshot, a stale vector file left behind), on a tenant large
// enough for graph search and one small enough for the exact scan.
func TestQuantizedReopenIdentical(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{Dir: dir, Seed: 5, ExactSearchMax: 256}
	e := openT(t, cfg)
	gen := newClustered(4, 48, 40)
	var qs [][]float32
	for range 20 {
		qs = append(qs, gen.next())
	}
	write := func(tenant string, from, to int) {
		var batch []index.Chunk
		for i := from; i < to; i++ {
			batch = append(batch, index.Chunk{ID: fmt.Sprintf("c%d", i), Tenant: tenant, StoreID: "s",
				FileID: fmt.Sprintf("f%d", i/100), Dense: gen.next()})
		}
		if err := e.Upsert(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	write("big", 0, 3000)
	write("small", 0, 200)
	if err := e.DeleteFile(ctx, "big", "s", "f3"); err != nil {
		t.Fatal(err)
	}
	search := func(e *Index) [][]index.Hit {
		var out [][]index.Hit
		for _, tenant := range []string{"big", "small"} {
			for _, q := range qs {
				hits, err := e.Search(ctx, index.Query{Tenant: tenant, Dense: q, Mode: index.ModeDense, Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, hits)
			}
		}
		return out
	}
	same := func(when string, got, want [][]index.Hit) {
		t.Helper()
		for i := range want {
			if len(got[i]) != len(want[i]) || len(want[i]) == 0 {
				t.Fatalf("%s: query %d: %d hits, want %d", when, i, len(got[i]), len(want[i]))
			}
			for j := range want[i] {
				if got[i][j].Chunk.ID != want[i][j].Chunk.ID || got[i][j].Score != want[i][j].Score {
					t.Fatalf("%s: query %d hit %d: %s %v, want %s %v", when, i, j, got[i][j].Chunk.ID,
						got[i][j].Score, want[i][j].Chunk.ID, want[i][j].Score)
				}
			}
		}
	}
	want := search(e)
	// Scores are float32 cosines of the stored vectors, not int8 approximations.
	if g := e.tenants["big"].graph; !g.Quantized() {
		t.Fatal("default graph is not quantized")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, vectorsName)); !os.IsNotExist(err) {
		t.Fatalf("vector file left after Close: %v", err)
	}
	e = openT(t, cfg)
	same("after close", search(e), want)
	// More writes, then a crash: the snapshot plus the WAL tail rebuild the same state.
	write("big", 3000, 3500)
	want = search(e)
	e.abandon()
	if _, err := os.Stat(filepath.Join(dir, vectorsName)); err != nil {
		t.Fatalf("the crashed index's vector file should be there: %v", err)
	}
	e = openT(t, cfg)
	defer e.Close()
	same("after crash", search(e), want)
}

// TestVecFileSegments: vectors of several graphs interleave in one file by extents, read back exactly, and a
// released segment's extents are reused; a write error turns the file unreadable.
func TestVecFileSegments(t *testing.T) {
	vf, err := createVecFile(t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	a, b := &vecSeg{file: vf}, &vecSeg{file: vf}
	v := func(n int32, tag float32) []float32 { return []float32{float32(n), tag, -float32(n), tag * 2} }
	for n := range int32(2500) {
		if err := a.Put(n, v(n, 1)); err != nil {
			t.Fatal(err)
		}
		if n%2 == 0 {
			if err := b.Put(n/2, v(n/2, 2)); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := make([]float32, 4)
	check := func(s *vecSeg, n int32, tag float32) {
		t.Helper()
		if err := s.Get(n, got); err != nil {
			t.Fatal(err)
		}
		if want := v(n, tag); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("vector %d: %v, want %v", n, got, want)
		}
	}
	for _, n := range []int32{0, 1023, 1024, 2047, 2499} {
		check(a, n, 1)
	}
	check(b, 1249, 2)
	if err := a.Get(4096, got); err == nil {
		t.Fatal("reading a vector never written succeeded")
	}
	used := vf.next
	b.release()
	c := &vecSeg{file: vf}
	if err := c.Put(0, v(0, 3)); err != nil {
		t.Fatal(err)
	}
	if vf.next != used {
		t.Fatalf("a new segment took a fresh extent (%d → %d) while released ones were free", used, vf.next)
	}
	check(c, 0, 3)
	check(a, 0, 1)
	vf.f.Close()
	if err := a.Put(1, v(1, 1)); err == nil {
		t.Fatal("write to a closed file succeeded")
	}
	if err := a.Get(0, got); err == nil || vf.Err() == nil {
		t.Fatalf("read after a failed write: %v (file error %v)", err, vf.Err())
	}
	os.Remove(vf.path)
}

// TestSnapshotWaitsForAQuarterOfTheState: once a snapshot exists, the next one waits for a WAL of a quarter of its
// size even when SnapshotBytes is smaller, so large indexes are not rewritten after every SnapshotBytes of log.
func TestSnapshotWaitsForAQuarterOfTheState(t *testing.T) {
	ctx := context.Background()
	e := openT(t, Config{Dir: t.TempDir(), SnapshotBytes: 1 << 10, Seed: 2})
	defer e.Close()
	gen := newClustered(1, 64, 10)
	next := 0
	upsert := func(n int) {
		var batch []index.Chunk
		for range n {
			batch = append(batch, index.Chunk{ID: fmt.Sprintf("c%d", next), Tenant: "t", StoreID: "s", FileID: "f",
				Text: "some text", Dense: gen.next()})
			next++
		}
		if err := e.Upsert(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	upsert(500) // one record far above SnapshotBytes: snapshot
	gen1 := e.wal.gen
	if gen1 < 2 || e.snapLen < 100<<10 {
		t.Fatalf("no snapshot after a large write (generation %d, snapshot %d bytes)", gen1, e.snapLen)
	}
	// Records above SnapshotBytes but, together, below a quarter of the snapshot: no new snapshot.
	for e.wal.size+2<<10 < e.snapLen/4 {
		upsert(5)
		if e.wal.gen != gen1 {
			t.Fatalf("snapshot after %d bytes of WAL, a snapshot of %d bytes exists", e.wal.size, e.snapLen)
		}
	}
	for range 100 {
		upsert(5)
		if e.wal.gen != gen1 {
			return
		}
	}
	t.Fatalf("no snapshot with %d bytes of WAL (snapshot %d bytes)", e.wal.size, e.snapLen)
}
