//go:build amd64 && !purego

package hnsw

import "golang.org/x/sys/cpu"

// hasAVX2FMA is a property of the machine, fixed for the life of the process.
var hasAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func dotI8AVX2(a, b *int8, n int) int32

// Dot returns the inner product of two equally long vectors (unit vectors: the cosine similarity).
func Dot(a, b []float32) float32 {
	if hasAVX2FMA && len(a) > 0 {
		b = b[:len(a)]
		return dotAVX2(&a[0], &b[0], len(a))
	}
	return dotGeneric(a, b)
}

// DotI8 returns the integer inner product of two equally long int8 codes with values in [-127, 127] (what
// Quantize writes; -128 is not supported).
func DotI8(a, b []int8) int32 {
	if hasAVX2FMA && len(a) > 0 {
		b = b[:len(a)]
		return dotI8AVX2(&a[0], &b[0], len(a))
	}
	return dotI8Generic(a, b)
}
