package scan

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The benchmark file is written once per test binary and removed by TestMain:
// the benchmark function runs more than once per -bench invocation.
var bench struct {
	once sync.Once
	dir  string
	path string
	size int64
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench.dir != "" {
		os.RemoveAll(bench.dir)
	}
	os.Exit(code)
}

// writeBenchSafetensors writes a valid safetensors file of about size bytes
// holding four big BF16 tensors, so a scan takes the full validation path.
func writeBenchSafetensors(path string, size int64) (int64, error) {
	const cols, dsize, tensors = 4096, 2, 4
	rows := max(size/tensors/(cols*dsize), 1)
	per := rows * cols * dsize
	var parts []string
	for i := range tensors {
		parts = append(parts, fmt.Sprintf(`"model.layers.%d.mlp.weight":{"dtype":"BF16","shape":[%d,%d],"data_offsets":[%d,%d]}`,
			i, rows, cols, int64(i)*per, int64(i+1)*per))
	}
	hdr := `{"__metadata__":{"format":"pt"},` + strings.Join(parts, ",") + "}"
	hdr += strings.Repeat(" ", (8-len(hdr)%8)%8)
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))))
	w.WriteString(hdr)
	block := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(block); i += 8 {
		binary.LittleEndian.PutUint64(block[i:], rng.Uint64())
	}
	for left := per * tensors; left > 0; {
		n := min(left, int64(len(block)))
		if _, err := w.Write(block[:n]); err != nil {
			f.Close()
			return 0, err
		}
		left -= n
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return 0, err
	}
	return st.Size(), f.Close()
}

// BenchmarkScanVsSha256sum scans a multi-GB safetensors file (hash plus full
// validation) and hashes the same file with the system sha256sum, one after
// the other in every iteration, and reports both throughputs and their
// ratio. AIFORGE_SCAN_BENCH_BYTES sets the file size (default 2 GiB).
//
//	go test -run '^$' -bench ScanVsSha256sum -benchtime 3x ./scan/
func BenchmarkScanVsSha256sum(b *testing.B) {
	tool, err := exec.LookPath("sha256sum")
	if err != nil {
		msg := "SKIPPED: sha256sum is not installed; the scan/sha256sum baseline needs it"
		if os.Getenv("CI") != "" {
			b.Fatal(msg)
		}
		b.Skip(msg)
	}
	bench.once.Do(func() {
		size := int64(2 << 30)
		if s := os.Getenv("AIFORGE_SCAN_BENCH_BYTES"); s != "" {
			if size, bench.err = strconv.ParseInt(s, 10, 64); bench.err != nil {
				return
			}
		}
		if bench.dir, bench.err = os.MkdirTemp("", "aiforge-scan-bench-*"); bench.err != nil {
			return
		}
		bench.path = filepath.Join(bench.dir, "model.safetensors")
		bench.size, bench.err = writeBenchSafetensors(bench.path, size)
		if bench.err == nil { // warm the page cache for both contenders
			bench.err = exec.Command(tool, bench.path).Run()
		}
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	ctx := context.Background()
	fsys := os.DirFS(bench.dir)
	b.ResetTimer()
	var scanT, toolT time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		v := ScanDir(ctx, fsys, nil)
		scanT += time.Since(t0)
		if !v.Accepted || v.Format != "safetensors" || v.Files[0].Tensors != 4 {
			b.Fatalf("benchmark file rejected: %+v", v.Reasons)
		}
		t1 := time.Now()
		out, err := exec.Command(tool, bench.path).Output()
		toolT += time.Since(t1)
		if err != nil {
			b.Fatal(err)
		}
		if got, _, _ := strings.Cut(string(out), " "); got != v.Files[0].SHA256 {
			b.Fatalf("sha256sum says %s, scan says %s", got, v.Files[0].SHA256)
		}
	}
	b.StopTimer()
	total := float64(bench.size) * float64(b.N) / 1e6
	scanMBs, toolMBs := total/scanT.Seconds(), total/toolT.Seconds()
	b.ReportMetric(scanMBs, "scan-MB/s")
	b.ReportMetric(toolMBs, "sha256sum-MB/s")
	b.ReportMetric(scanMBs/toolMBs, "scan/sha256sum")
	b.Logf("file %d bytes, %d rounds: scan %.0f MB/s, sha256sum %.0f MB/s, ratio scan/sha256sum %.2f",
		bench.size, b.N, scanMBs, toolMBs, scanMBs/toolMBs)
}
