//go:build !amd64 || purego

package index

// dot returns the inner product of two equally long vectors (unit vectors: the cosine similarity).
func dot(a, b []float32) float32 { return dotGeneric(a, b) }
