package runtime

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

func BenchmarkStartCold(b *testing.B) {
	rt := newTestRuntime(b, nil)
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		sb, err := rt.Start(context.Background(), Spec{MemoryBytes: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
		b.StopTimer()
		sb.Close()
		b.StartTimer()
	}
	reportPercentiles(b, d)
}

func benchExec(b *testing.B, lang, code string) {
	rt := newTestRuntime(b, nil)
	sb := startSandbox(b, rt, Spec{MemoryBytes: 256 << 20})
	req := sandbox.ExecRequest{Language: lang, Code: code, TimeoutMS: 10000}
	run(b, sb, lang, code) // warm the path
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		res, err := sb.Exec(context.Background(), req, nil)
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
		d = append(d, time.Since(t0))
	}
	reportPercentiles(b, d)
}

func BenchmarkExecWarmPython(b *testing.B) { benchExec(b, "python", "x = 1 + 1\nprint(x)") }
func BenchmarkExecWarmBash(b *testing.B)   { benchExec(b, "bash", "echo $((1+1))") }

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
}
