package hnsw

import (
	"math/rand/v2"
	"testing"
)

func TestDefaultEfSearchGrowsWithLogOfSize(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, 128}, {1, 128}, {2048, 128}, {100_000, 128},
		{200_000, 167},   // 128 · (1 + log₁₀ 2) = 166.5
		{1_000_000, 256}, // one decade past 100,000: twice the base
		{10_000_000, 384},
	} {
		if got := DefaultEfSearch(c.n); got != c.want {
			t.Errorf("DefaultEfSearch(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	prev := 0
	for n := 1; n < 1<<40; n = n*3/2 + 1 {
		ef := DefaultEfSearch(n)
		if ef < prev || ef < 128 {
			t.Fatalf("DefaultEfSearch(%d) = %d after %d: must never shrink as the graph grows, nor go below 128", n, ef, prev)
		}
		prev = ef
	}
}

func TestGraphEfSearchUsesConfiguredOrSize(t *testing.T) {
	cfg := Config{}.WithDefaults()
	if cfg.EfSearch != 0 {
		t.Fatalf("WithDefaults set EfSearch %d, want 0 (sized to the graph)", cfg.EfSearch)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Config{EfSearch: -1}).WithDefaults().Validate(); err == nil {
		t.Fatal("negative EfSearch accepted")
	}
	g := New(8, cfg, 1, nil)
	r := rand.New(rand.NewPCG(1, 2))
	vs := make([][]float32, 300)
	labels := make([]uint32, len(vs))
	for i := range vs {
		vs[i], labels[i] = randUnit(r, 8), uint32(i)
	}
	if _, err := g.Add(vs, labels); err != nil {
		t.Fatal(err)
	}
	if got := g.EfSearch(0); got != DefaultEfSearch(300) {
		t.Errorf("EfSearch(0) = %d, want DefaultEfSearch(300) = %d", got, DefaultEfSearch(300))
	}
	if got := g.EfSearch(40); got != 40 {
		t.Errorf("EfSearch(40) = %d, want the configured 40", got)
	}
	// A search with ef 0 is one with the graph's default: the same results.
	a, _, err := g.Search(vs[7], 10, 0, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := g.Search(vs[7], 10, DefaultEfSearch(300), nil, 0)
	if len(a) != 10 || len(a) != len(b) {
		t.Fatalf("ef 0: %d results, explicit default: %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("result %d: ef 0 gave %+v, the explicit default %+v", i, a[i], b[i])
		}
	}
	if a[0].Label != 7 {
		t.Errorf("nearest to node 7's own vector is %d", a[0].Label)
	}
}
