package embedded

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/hnsw"
)

// benchReport is what the dense benchmark measures, all in one run against brute force on the same data.
type benchReport struct {
	n, dim, queries          int
	insert, close, reopen    time.Duration
	diskBytes                int64
	recall, filteredRecall   float64
	p50, p99, fp50, fp99     time.Duration
	hybridP50, hybridP99     time.Duration
	exactP50                 time.Duration
	efSearch, m, efConstruct int
}

func (r benchReport) String() string {
	return fmt.Sprintf(`embedded index, %d chunks × %d dims (clustered), %d queries, HNSW M=%d efConstruction=%d efSearch=%d
  insert:            %v (%.0f chunks/s, batches of 1000, fsync per batch)
  dense  Limit 10:   recall@10 %.4f  p50 %v  p99 %v   (brute force p50 %v)
  filtered (1/10):   recall@10 %.4f  p50 %v  p99 %v
  hybrid Limit 10:   p50 %v  p99 %v
  close (snapshot):  %v   on disk: %.1f MiB   reopen: %v`,
		r.n, r.dim, r.queries, r.m, r.efConstruct, r.efSearch,
		r.insert.Round(time.Millisecond), float64(r.n)/r.insert.Seconds(),
		r.recall, r.p50, r.p99, r.exactP50,
		r.filteredRecall, r.fp50, r.fp99,
		r.hybridP50, r.hybridP99,
		r.close.Round(time.Millisecond), float64(r.diskBytes)/(1<<20), r.reopen.Round(time.Millisecond))
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)]
}

// measureDense builds an index of n clustered vectors and measures it (see benchReport).
func measureDense(tb testing.TB, n, dim, clusters, queries int, log *slog.Logger) benchReport {
	ctx := context.Background()
	dir := tb.TempDir()
	cfg := Config{Dir: dir, Seed: 42, Logger: log}
	e, err := Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	gen := newClustered(7, dim, clusters)
	data := make([][]float32, n)
	r := benchReport{n: n, dim: dim, queries: queries}
	hc := cfg.withDefaults().HNSW
	r.m, r.efConstruct, r.efSearch = hc.M, hc.EfConstruction, hc.EfSearch
	if r.efSearch == 0 {
		r.efSearch = hnsw.DefaultEfSearch(n)
	}
	var batch []index.Chunk
	start := time.Now()
	for i := range n {
		data[i] = gen.next()
		batch = append(batch, index.Chunk{
			ID: fmt.Sprintf("c%d", i), Tenant: "bench", StoreID: fmt.Sprintf("s%d", i%10), FileID: fmt.Sprintf("f%d", i/50),
			Index: i % 50, Text: fmt.Sprintf("chunk %d", i), Dense: data[i],
			Terms: map[string]uint32{fmt.Sprintf("t%d", i%1000): 1, fmt.Sprintf("u%d", i%37): 2, "all": 1}, Length: 4,
		})
		if len(batch) == 1000 || i == n-1 {
			if err := e.Upsert(ctx, batch); err != nil {
				tb.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	r.insert = time.Since(start)

	qs := make([][]float32, queries)
	for i := range qs {
		qs[i] = gen.next()
	}
	// Brute force over the same data: the truth for recall, and the baseline latency.
	truth := make([][]int, queries)
	truthStore := make([][]int, queries)
	var exactLat []time.Duration
	for i, q := range qs {
		s := time.Now()
		truth[i] = exactTopK(data, q, 10)
		exactLat = append(exactLat, time.Since(s))
		truthStore[i] = exactTopKWhere(data, q, 10, func(j int) bool { return j%10 == 3 })
	}
	r.exactP50 = percentile(exactLat, 0.5)
	run := func(stores []string, want [][]int) (float64, []time.Duration) {
		var hit, total int
		var lat []time.Duration
		for i, q := range qs {
			s := time.Now()
			hits, err := e.Search(ctx, index.Query{Tenant: "bench", Dense: q, Mode: index.ModeDense, Limit: 10, StoreIDs: stores})
			lat = append(lat, time.Since(s))
			if err != nil {
				tb.Fatal(err)
			}
			for _, h := range hits {
				var j int
				fmt.Sscanf(h.Chunk.ID, "c%d", &j)
				if slices.Contains(want[i], j) {
					hit++
				}
			}
			total += len(want[i])
		}
		return float64(hit) / float64(total), lat
	}
	var lat []time.Duration
	r.recall, lat = run(nil, truth)
	r.p50, r.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
	r.filteredRecall, lat = run([]string{"s3"}, truthStore)
	r.fp50, r.fp99 = percentile(lat, 0.5), percentile(lat, 0.99)
	lat = lat[:0]
	for i, q := range qs {
		s := time.Now()
		if _, err := e.Search(ctx, index.Query{Tenant: "bench", Dense: q, Limit: 10,
			Terms: map[string]uint32{fmt.Sprintf("t%d", i%1000): 1, "all": 1}}); err != nil {
			tb.Fatal(err)
		}
		lat = append(lat, time.Since(s))
	}
	r.hybridP50, r.hybridP99 = percentile(lat, 0.5), percentile(lat, 0.99)

	before, _ := e.Search(ctx, index.Query{Tenant: "bench", Dense: qs[0], Mode: index.ModeDense, Limit: 10})
	s := time.Now()
	if err := e.Close(); err != nil {
		tb.Fatal(err)
	}
	r.close = time.Since(s)
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				r.diskBytes += info.Size()
			}
		}
		return nil
	})
	s = time.Now()
	e, err = Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	r.reopen = time.Since(s)
	defer e.Close()
	after, err := e.Search(ctx, index.Query{Tenant: "bench", Dense: qs[0], Mode: index.ModeDense, Limit: 10})
	if err != nil || len(after) != len(before) {
		tb.Fatalf("after reopen: %d hits (%v), want %d", len(after), err, len(before))
	}
	for i := range after {
		if after[i].Chunk.ID != before[i].Chunk.ID {
			tb.Fatalf("after reopen hit %d is %s, want %s", i, after[i].Chunk.ID, before[i].Chunk.ID)
		}
	}
	return r
}

func exactTopKWhere(data [][]float32, q []float32, k int, keep func(int) bool) []int {
	var idx []int
	var sub [][]float32
	for i, v := range data {
		if keep(i) {
			idx = append(idx, i)
			sub = append(sub, v)
		}
	}
	out := exactTopK(sub, q, k)
	for i := range out {
		out[i] = idx[out[i]]
	}
	return out
}

// TestDenseRecallSmall always runs: 5,000 clustered 384-dimensional chunks through the public API, recall@10
// against brute force on the same data (2,000 under the race detector).
func TestDenseRecallSmall(t *testing.T) {
	n := 5000
	if raceEnabled {
		n = 2000
	}
	r := measureDense(t, n, 384, n/100, 100, slog.New(slog.DiscardHandler))
	t.Log("\n" + r.String())
	if r.recall < 0.95 {
		t.Fatalf("recall@10 %.4f < 0.95", r.recall)
	}
	if r.filteredRecall < 0.95 {
		t.Fatalf("filtered recall@10 %.4f < 0.95", r.filteredRecall)
	}
}

// TestDenseBenchmark100k prints the 100,000-chunk figures; AIFORGE_BENCH=1 runs it (a few minutes on 2 cores).
func TestDenseBenchmark100k(t *testing.T) {
	if os.Getenv("AIFORGE_BENCH") != "1" {
		t.Skip("set AIFORGE_BENCH=1 to run the 100k-chunk measurement")
	}
	r := measureDense(t, 100_000, 384, 1000, 500, slog.New(slog.DiscardHandler))
	fmt.Println(r.String())
	if r.recall < 0.95 {
		t.Errorf("recall@10 %.4f < 0.95", r.recall)
	}
}

// BenchmarkDenseSearch100k reports search latency and recall on 100,000 chunks (index built once, outside the
// timer).
func BenchmarkDenseSearch100k(b *testing.B) {
	ctx := context.Background()
	const n, dim = 100_000, 384
	e, err := Open(Config{Dir: b.TempDir(), Seed: 42, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	gen := newClustered(7, dim, 1000)
	data := make([][]float32, n)
	var batch []index.Chunk
	for i := range n {
		data[i] = gen.next()
		batch = append(batch, index.Chunk{ID: fmt.Sprintf("c%d", i), Tenant: "bench", StoreID: "s", FileID: "f", Dense: data[i]})
		if len(batch) == 1000 {
			if err := e.Upsert(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	qs := make([][]float32, 200)
	for i := range qs {
		qs[i] = gen.next()
	}
	var hit, total int
	i := 0
	for b.Loop() {
		q := qs[i%len(qs)]
		hits, err := e.Search(ctx, index.Query{Tenant: "bench", Dense: q, Mode: index.ModeDense, Limit: 10})
		if err != nil {
			b.Fatal(err)
		}
		if i < len(qs) {
			b.StopTimer()
			truth := exactTopK(data, q, 10)
			for _, h := range hits {
				var j int
				fmt.Sscanf(h.Chunk.ID, "c%d", &j)
				if slices.Contains(truth, j) {
					hit++
				}
			}
			total += len(truth)
			b.StartTimer()
		}
		i++
	}
	if total > 0 {
		b.ReportMetric(float64(hit)/float64(total), "recall@10")
	}
}
