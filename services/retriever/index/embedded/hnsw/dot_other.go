//go:build !amd64 || purego

package hnsw

// Dot returns the inner product of two equally long vectors (unit vectors: the cosine similarity).
func Dot(a, b []float32) float32 { return dotGeneric(a, b) }
