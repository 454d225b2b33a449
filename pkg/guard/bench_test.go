package guard

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkClassify measures the admission step on one prompt of 1, 4
// and 16 KB, benign and with an injection in its middle, and reports
// p50 and p99 per call alongside the mean.
func BenchmarkClassify(b *testing.B) {
	c := NewBuiltin(BuiltinConfig{})
	ctx := context.Background()
	for _, size := range []int{1 << 10, 4 << 10, 16 << 10} {
		for _, mal := range []bool{false, true} {
			name := fmt.Sprintf("%dKB/benign", size>>10)
			if mal {
				name = fmt.Sprintf("%dKB/malicious", size>>10)
			}
			segs := []Segment{{Role: "user", Source: SourceMessage, Text: SamplePrompt(size, mal)}}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(size))
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					v, err := c.Classify(ctx, segs)
					lat = append(lat, time.Since(t0))
					if err != nil || v.Malicious != mal {
						b.Fatalf("verdict %+v, %v", v, err)
					}
				}
				b.StopTimer()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

func BenchmarkMaskPII(b *testing.B) {
	text := SamplePrompt(4<<10, false) + " mail bob@example.com card 4111 1111 1111 1111"
	b.SetBytes(int64(len(text)))
	for i := 0; i < b.N; i++ {
		MaskPII(text)
	}
}
