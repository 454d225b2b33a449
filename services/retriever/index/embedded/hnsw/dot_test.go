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

func TestDotI8MatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 1; n <= 200; n++ {
		a, b := make([]int8, n), make([]int8, n)
		var want int64
		for i := range a {
			a[i], b[i] = int8(rng.IntN(255)-127), int8(rng.IntN(255)-127)
			want += int64(a[i]) * int64(b[i])
		}
		for i := range 2 {
			got := DotI8(a, b)
			if i == 1 {
				got = dotI8Generic(a, b)
			}
			if int64(got) != want {
				t.Fatalf("n=%d impl %d: dot %d, want %d", n, i, got, want)
			}
		}
	}
	// The extremes: every product 127·127 or −127·127.
	a, b := make([]int8, 384), make([]int8, 384)
	for i := range a {
		a[i], b[i] = 127, -127
	}
	if got := DotI8(a, b); got != -384*127*127 {
		t.Fatalf("extreme dot %d", got)
	}
}

func BenchmarkDotI8384(b *testing.B) {
	x, y := make([]int8, 384), make([]int8, 384)
	for i := range x {
		x[i], y[i] = int8(i), int8(-i)
	}
	var s int32
	for b.Loop() {
		s += DotI8(x, y)
	}
	_ = s
}
