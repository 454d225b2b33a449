package embedded

import (
	"math"
	"math/rand/v2"

	"github.com/aiforge/aiforge/services/retriever/index/embedded/hnsw"
)

// clustered generates n unit vectors of dim dimensions around the given number of gaussian clusters. Cluster
// centres are themselves grouped under topics, and cluster sizes are skewed, which is closer to real embeddings
// than uniform noise: neighbourhoods overlap and some regions are dense.
type clustered struct {
	dim     int
	centers [][]float64
	weights []float64 // cumulative
	spread  float64
	rng     *rand.Rand
}

func newClustered(seed uint64, dim, clusters int) *clustered {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	topics := max(1, clusters/20)
	topicVecs := make([][]float64, topics)
	for i := range topicVecs {
		topicVecs[i] = gaussVec(rng, dim, 1)
	}
	c := &clustered{dim: dim, spread: 0.9, rng: rng}
	var cum float64
	for i := range clusters {
		t := topicVecs[rng.IntN(topics)]
		v := gaussVec(rng, dim, 0.8)
		for j := range v {
			v[j] += t[j]
		}
		c.centers = append(c.centers, unit64(v))
		cum += 1 / math.Pow(float64(i+1), 0.5) // skewed cluster sizes
		c.weights = append(c.weights, cum)
	}
	for i := range c.weights {
		c.weights[i] /= cum
	}
	return c
}

func gaussVec(rng *rand.Rand, dim int, sigma float64) []float64 {
	v := make([]float64, dim)
	for i := range v {
		v[i] = rng.NormFloat64() * sigma / math.Sqrt(float64(dim))
	}
	return v
}

func unit64(v []float64) []float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	s = math.Sqrt(s)
	for i := range v {
		v[i] /= s
	}
	return v
}

func (c *clustered) next() []float32 {
	u := c.rng.Float64()
	k := 0
	for k < len(c.weights)-1 && c.weights[k] < u {
		k++
	}
	ctr := c.centers[k]
	noise := gaussVec(c.rng, c.dim, c.spread)
	out := make([]float32, c.dim)
	var s float64
	for i := range out {
		x := ctr[i] + noise[i]
		out[i] = float32(x)
		s += x * x
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range out {
		out[i] *= inv
	}
	return out
}

// exactTopK returns the labels of the k nearest vectors by brute force.
func exactTopK(data [][]float32, q []float32, k int) []int {
	type sc struct {
		i int
		s float32
	}
	best := make([]sc, 0, k+1)
	for i, v := range data {
		s := hnsw.Dot(q, v)
		if len(best) == k && s <= best[k-1].s {
			continue
		}
		j := len(best)
		best = append(best, sc{})
		for j > 0 && best[j-1].s < s {
			best[j] = best[j-1]
			j--
		}
		best[j] = sc{i, s}
		if len(best) > k {
			best = best[:k]
		}
	}
	out := make([]int, len(best))
	for i, b := range best {
		out[i] = b.i
	}
	return out
}
