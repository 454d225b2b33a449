//go:build !amd64 || purego

package hnsw

// Dot returns the inner product of two equally long vectors (unit vectors: the cosine similarity).
func Dot(a, b []float32) float32 { return dotGeneric(a, b) }

// DotI8 returns the integer inner product of two equally long int8 codes with values in [-127, 127].
func DotI8(a, b []int8) int32 { return dotI8Generic(a, b) }
