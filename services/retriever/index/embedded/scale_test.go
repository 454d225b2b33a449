package embedded

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiforge/aiforge/services/retriever/index/embedded/hnsw"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/internal/codec"
)

// TestDenseScale measures the quantized dense index (HNSW over int8 codes, float32 vectors in the scratch vector
// file, float rescoring) against an all-float32-in-memory graph of the same data, in one run:
//
//	AIFORGE_BENCH_N=1000000 go test ./index/embedded -run TestDenseScale -v -timeout 60m
//
// AIFORGE_BENCH_Q sets the number of queries (default 1000), AIFORGE_BENCH_DIM the dimension (384). The float32
// baseline is the same graph (same links) decoded with its vectors on the heap, so the memory ratio compares the
// vectors' representation only, and its recall shows what the int8 graph search plus rescoring costs.
func TestDenseScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AIFORGE_BENCH_N"))
	if n <= 0 {
		t.Skip("set AIFORGE_BENCH_N (e.g. 100000 or 1000000) to run the scale measurement")
	}
	queries := envInt("AIFORGE_BENCH_Q", 1000)
	dim := envInt("AIFORGE_BENCH_DIM", 384)
	const k = 10
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("dense scale: %d × %d dims, 1000 clusters, %d queries, GOMAXPROCS %d, load average at start %s",
		n, dim, queries, runtime.GOMAXPROCS(0), load)

	gen := newClustered(11, dim, 1000)
	data := make([]float32, n*dim)
	for i := range n {
		copy(data[i*dim:], gen.next())
	}
	row := func(i int) []float32 { return data[i*dim : (i+1)*dim] }
	qs := make([][]float32, queries)
	for i := range qs {
		qs[i] = gen.next()
	}
	s := time.Now()
	truth := blockedTruth(data, dim, qs, k)
	fmt.Printf("  exact top-%d of %d queries by brute force (blocked, %d workers): %v\n", k, queries,
		runtime.GOMAXPROCS(0), time.Since(s).Round(time.Millisecond))

	dir := t.TempDir()
	cfg := hnsw.Config{}.WithDefaults()
	heap0 := heapInUse()
	vf, err := createVecFile(dir, dim)
	if err != nil {
		t.Fatal(err)
	}
	defer vf.close()
	seg := &vecSeg{file: vf}
	g := hnsw.New(dim, cfg, 42, seg)
	labels := make([]uint32, 1000)
	batch := make([][]float32, 0, 1000)
	s = time.Now()
	for start := 0; start < n; start += 1000 {
		batch, labels = batch[:0], labels[:0]
		for i := start; i < min(n, start+1000); i++ {
			batch = append(batch, row(i))
			labels = append(labels, uint32(i))
		}
		if _, err := g.Add(batch, labels); err != nil {
			t.Fatal(err)
		}
	}
	build := time.Since(s)
	heapBuilt := heapInUse() - heap0
	fmt.Printf("  build (int8 graph, M=%d efConstruction=%d, batches of 1000): %v (%.0f vectors/s)\n",
		cfg.M, cfg.EfConstruction, build.Round(time.Millisecond), float64(n)/build.Seconds())

	// The snapshot encoding of the graph (vectors and links), then decoded twice: quantized (a reopen) and
	// float32 in memory (the baseline with identical links).
	snap := filepath.Join(dir, "graph.snap")
	writeGraph(t, g, snap)
	figures := func(name string, g *hnsw.Graph) {
		def := g.EfSearch(cfg.EfSearch)
		efs := []int{64, 128, 256}
		if !slices.Contains(efs, def) {
			efs = append(efs, def)
		}
		for _, ef := range efs {
			rec, p50, p99 := measureGraph(t, g, qs, truth, k, ef)
			tag := ""
			if ef == def {
				tag = " (the default at this size)"
			}
			fmt.Printf("  %-22s ef %3d: recall@10 %.4f  p50 %v  p99 %v%s\n", name, ef, rec, p50, p99, tag)
		}
	}
	figures("int8 + rescore", g)
	g = nil
	seg.release()
	debug.FreeOSMemory()

	heap1 := heapInUse()
	if err := os.Mkdir(filepath.Join(dir, "re"), 0o755); err != nil {
		t.Fatal(err)
	}
	vf2, err := createVecFile(filepath.Join(dir, "re"), dim)
	if err != nil {
		t.Fatal(err)
	}
	defer vf2.close()
	s = time.Now()
	gq := readGraph(t, snap, dim, cfg, &vecSeg{file: vf2})
	reopen := time.Since(s)
	heapQ := heapInUse() - heap1
	fileBytes := vf2.Size()
	figures("int8 reopened", gq)
	gq = nil
	debug.FreeOSMemory()

	heap2 := heapInUse()
	gf := readGraph(t, snap, dim, cfg, nil)
	heapF := heapInUse() - heap2
	figures("float32 in memory", gf)
	runtime.KeepAlive(gf)
	runtime.KeepAlive(data)

	rss := vmRSS()
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf(`  memory (Go heap in use, after GC):
    int8 graph as built:     %7.1f MiB
    int8 graph reopened:     %7.1f MiB   + vector file %.1f MiB (page cache / disk, not heap)
    float32 graph baseline:  %7.1f MiB   (vectors alone: %.1f MiB)
    ratio int8 / float32:    %.3f (reopened)   %.3f (as built)
  reopen (decode snapshot, write vector file): %v
  process VmRSS at the end (data + truth + baseline graph): %.0f MiB
  load average at end: %s`,
		mib(heapBuilt), mib(heapQ), mib(fileBytes), mib(heapF), mib(int64(n*dim*4)),
		float64(heapQ)/float64(heapF), float64(heapBuilt)/float64(heapF),
		reopen.Round(time.Millisecond), mib(rss), load)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func vmRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func writeGraph(t *testing.T, g *hnsw.Graph, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	enc := codec.Encoder{W: bw}
	g.Encode(&enc, func(l uint32) uint32 { return l })
	enc.Flush()
	if enc.Err != nil {
		t.Fatal(enc.Err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readGraph(t *testing.T, path string, dim int, cfg hnsw.Config, store hnsw.VectorStore) *hnsw.Graph {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := codec.Decoder{R: bufio.NewReaderSize(f, 1<<20)}
	g := hnsw.Decode(&d, dim, cfg, 42, store)
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	return g
}

// measureGraph runs the queries one at a time: recall@k against truth, latency percentiles.
func measureGraph(t *testing.T, g *hnsw.Graph, qs [][]float32, truth [][]int, k, ef int) (float64, time.Duration, time.Duration) {
	lat := make([]time.Duration, len(qs))
	hit := 0
	for i, q := range qs {
		s := time.Now()
		res, _, err := g.Search(q, k, ef, nil, 0)
		lat[i] = time.Since(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			for _, j := range truth[i] {
				if int(r.Label) == j {
					hit++
				}
			}
		}
	}
	return float64(hit) / float64(len(qs)*k), percentile(lat, 0.5), percentile(lat, 0.99)
}

// blockedTruth computes the exact top-k of every query over data, one cache-sized block of data at a time
// against all queries, on GOMAXPROCS workers splitting the queries.
func blockedTruth(data []float32, dim int, qs [][]float32, k int) [][]int {
	n := len(data) / dim
	out := make([][]int, len(qs))
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			type sc struct {
				i int
				s float32
			}
			var mine []int
			for qi := w; qi < len(qs); qi += workers {
				mine = append(mine, qi)
			}
			best := make([][]sc, len(mine))
			const block = 512
			for b := 0; b < n; b += block {
				for mi, qi := range mine {
					q := qs[qi]
					bs := best[mi]
					for i := b; i < min(n, b+block); i++ {
						s := hnsw.Dot(q, data[i*dim:(i+1)*dim])
						if len(bs) == k && s <= bs[k-1].s {
							continue
						}
						j := len(bs)
						bs = append(bs, sc{})
						for j > 0 && bs[j-1].s < s {
							bs[j] = bs[j-1]
							j--
						}
						bs[j] = sc{i, s}
						if len(bs) > k {
							bs = bs[:k]
						}
					}
					best[mi] = bs
				}
			}
			for mi, qi := range mine {
				ids := make([]int, len(best[mi]))
				for j, b := range best[mi] {
					ids[j] = b.i
				}
				out[qi] = ids
			}
		})
	}
	wg.Wait()
	return out
}
