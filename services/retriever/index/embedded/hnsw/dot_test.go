package hnsw

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDotMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 130; n++ {
		a, b := make([]float32, n), make([]float32, n)
		var want float64
		for i := range a {
			a[i], b[i] = rng.Float32()*2-1, rng.Float32()*2-1
			want += float64(a[i]) * float64(b[i])
		}
		for _, got := range []float32{Dot(a, b), dotGeneric(a, b)} {
			if math.Abs(float64(got)-want) > 1e-4 {
				t.Fatalf("n=%d: dot %v, want %v", n, got, want)
			}
		}
	}
}

func BenchmarkDot384(b *testing.B) {
	x, y := make([]float32, 384), make([]float32, 384)
	for i := range x {
		x[i], y[i] = float32(i), float32(i)
	}
	var s float32
	for b.Loop() {
		s += Dot(x, y)
	}
	_ = s
}
