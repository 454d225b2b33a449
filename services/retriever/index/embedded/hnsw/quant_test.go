package hnsw

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randUnit(rng *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	var s float64
	for i := range v {
		x := rng.NormFloat64()
		v[i] = float32(x)
		s += x * x
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
	return v
}

// TestQuantizeRoundTrip: every component comes back within half a quantization step, the step is max|v|/127,
// and the int8 inner product of two codes is within a small bound of the float one.
func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dim := range []int{3, 64, 384, 1024} {
		var worstDot float64
		for range 200 {
			a, b := randUnit(rng, dim), randUnit(rng, dim)
			ca, cb := make([]int8, dim), make([]int8, dim)
			sa, sb := Quantize(a, ca), Quantize(b, cb)
			var m float32
			for _, x := range a {
				m = max(m, float32(math.Abs(float64(x))))
			}
			if math.Abs(float64(sa-m/127)) > 1e-9 {
				t.Fatalf("dim %d: scale %v, want max|v|/127 = %v", dim, sa, m/127)
			}
			for i, x := range a {
				if err := math.Abs(float64(x) - float64(sa)*float64(ca[i])); err > float64(sa)/2+1e-7 {
					t.Fatalf("dim %d: component %d: %v decoded as %v (error %v > step/2 %v)", dim, i, x,
						sa*float32(ca[i]), err, sa/2)
				}
			}
			approx := float64(sa) * float64(sb) * float64(DotI8(ca, cb))
			worstDot = max(worstDot, math.Abs(approx-float64(Dot(a, b))))
		}
		// Rounding errors are at most step/2 per component; for unit vectors the dot error is far below 0.02.
		if worstDot > 0.02 {
			t.Fatalf("dim %d: int8 inner product off by %v", dim, worstDot)
		}
		t.Logf("dim %d: worst |int8 dot − float dot| %.5f", dim, worstDot)
	}
	// Degenerate input: a zero vector encodes as zeros with scale 0.
	c := []int8{1, 2, 3}
	if s := Quantize([]float32{0, 0, 0}, c); s != 0 || c[0] != 0 || c[1] != 0 || c[2] != 0 {
		t.Fatalf("zero vector: scale %v codes %v", s, c)
	}
	// The extremes of a vector map to ±127.
	c = make([]int8, 2)
	Quantize([]float32{-0.6, 0.8}, c)
	if c[1] != 127 || c[0] != -95 {
		t.Fatalf("codes %v, want [-95 127]", c)
	}
}

// memStore is a VectorStore on the heap, for tests.
type memStore struct {
	dim  int
	vecs map[int32][]float32
	gets int
}

func (m *memStore) Put(n int32, v []float32) error {
	m.vecs[n] = append([]float32(nil), v...)
	return nil
}

func (m *memStore) Get(n int32, dst []float32) error {
	m.gets++
	copy(dst, m.vecs[n])
	return nil
}

func unit2(x float64) []float32 { return []float32{float32(x), float32(math.Sqrt(1 - x*x))} }

// TestRescoreChangesOrder crafts two vectors whose int8 codes rank them the other way round from their float32
// cosines with the query: the graph search must return the float32 order and scores, and the int8 order alone
// (the scorer's Approx) must be the wrong one — so the rescoring pass is what fixes it.
func TestRescoreChangesOrder(t *testing.T) {
	q := []float32{1, 0}
	// In two dimensions with q = (1, 0) the int8 cosine of v = (x, √(1−x²)) is x rounded to a grid of step
	// max|v|/127. Search for x_a < x_b (so b is truly nearer) whose rounded values invert.
	var a, b []float32
	for xb := 0.60; xb < 0.70 && a == nil; xb += 0.0003 {
		for xa := xb - 0.0001; xa > xb-0.004; xa -= 0.0001 {
			ca, cb := make([]int8, 2), make([]int8, 2)
			va, vb := unit2(xa), unit2(xb)
			if Quantize(va, ca)*float32(ca[0]) > Quantize(vb, cb)*float32(cb[0]) {
				a, b = va, vb
				break
			}
		}
	}
	if a == nil {
		t.Fatal("no inverted pair found")
	}
	cfg := Config{}.WithDefaults()
	store := &memStore{dim: 2, vecs: map[int32][]float32{}}
	g := New(2, cfg, 1, store)
	// a and b, and far away vectors.
	vs := [][]float32{a, b, unit2(-0.9), unit2(-0.5), {-1, 0}}
	if _, err := g.Add(vs, []uint32{0, 1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	sc := g.NewScorer(q)
	if !(sc.Approx(0) > sc.Approx(1)) {
		t.Fatalf("int8 scores a %v b %v: the crafted pair is not inverted", sc.Approx(0), sc.Approx(1))
	}
	ea, _ := sc.Exact(0)
	eb, _ := sc.Exact(1)
	if !(eb > ea) {
		t.Fatalf("float scores a %v b %v", ea, eb)
	}
	res, _, err := g.Search(q, 2, 16, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Label != 1 || res[1].Label != 0 {
		t.Fatalf("search %+v, want b (1) then a (0)", res)
	}
	if res[0].Score != float64(Dot(q, b)) || res[1].Score != float64(Dot(q, a)) {
		t.Fatalf("scores %v %v, want the float32 cosines %v %v", res[0].Score, res[1].Score, Dot(q, b), Dot(q, a))
	}
	if store.gets == 0 {
		t.Fatal("the store was never read: no rescoring happened")
	}
	// The same graph without rescoring reads (float32 in memory) agrees with the rescored order.
	gf := New(2, cfg, 1, nil)
	if _, err := gf.Add(vs, []uint32{0, 1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	resF, _, _ := gf.Search(q, 2, 16, nil, 0)
	if resF[0].Label != res[0].Label || resF[0].Score != res[0].Score {
		t.Fatalf("float graph %+v, quantized %+v", resF, res)
	}
}
