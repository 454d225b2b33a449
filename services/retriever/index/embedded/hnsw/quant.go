package hnsw

import "math"

// Quantization: a graph built with a VectorStore keeps an int8 code and one float32 scale per node in memory and
// its full-precision vectors in the store. The code is symmetric and per vector: scale = max|v_i| / 127 and
// code_i = round(v_i / scale), so v ≈ scale·code and a·b ≈ scale_a·scale_b·Σ code_a_i·code_b_i — a single
// integer dot product (AVX2) and one multiplication, with no offsets to correct for and no training pass: a code
// depends on its own vector only, so vectors arriving one by one never force re-encoding the others (per-
// dimension ranges would). The rounding error per component is at most scale/2 ≈ max|v_i|/254; for unit vectors
// of a few hundred dimensions that is a cosine error of the order of 1e-3, which the float rescoring of the top
// candidates removes from the final order and scores.

// VectorStore holds a graph's full-precision vectors outside the Go heap (a file). Put is called with exclusive
// access to the graph; Get may be called from concurrent searches.
type VectorStore interface {
	Put(n int32, v []float32) error
	Get(n int32, dst []float32) error
}

// Quantize writes the int8 code of v into dst (len(v)) and returns its scale: v[i] ≈ scale·dst[i], with
// |v[i] − scale·dst[i]| ≤ scale/2.
func Quantize(v []float32, dst []int8) float32 {
	var m float32
	for _, x := range v {
		m = max(m, float32(math.Abs(float64(x))))
	}
	if m == 0 || math.IsInf(float64(m), 0) || math.IsNaN(float64(m)) {
		clear(dst)
		return 0
	}
	inv := 127 / m
	for i, x := range v {
		r := math.Round(float64(x * inv))
		dst[i] = int8(max(-127, min(127, r)))
	}
	return m / 127
}

// dotI8Generic returns the integer inner product of two equally long codes.
func dotI8Generic(a, b []int8) int32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 int32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += int32(a[i]) * int32(b[i])
		s1 += int32(a[i+1]) * int32(b[i+1])
		s2 += int32(a[i+2]) * int32(b[i+2])
		s3 += int32(a[i+3]) * int32(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += int32(a[i]) * int32(b[i])
	}
	return s0 + s1 + s2 + s3
}
