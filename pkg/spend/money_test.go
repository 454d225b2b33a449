package spend

import (
	"math"
	"testing"
)

func TestSaturatingArithmetic(t *testing.T) {
	if AddSat(math.MaxInt64, 1) != math.MaxInt64 || AddSat(-5, 3) != 3 || MulSat(math.MaxInt64, 2) != math.MaxInt64 ||
		MulSat(1<<31, 1<<31) != 1<<62 || SubFloor(3, 5) != 0 || SubFloor(5, -1) != 5 {
		t.Fatal("saturating helpers")
	}
	if c := CostNano(math.MaxInt64, math.MaxInt64, 1000, 1000); c != math.MaxInt64 {
		t.Fatalf("CostNano saturates: %d", c)
	}
	if c := CostNano(10, 20, 1, 2); c != 10*1000+20*2000 {
		t.Fatalf("CostNano(10, 20, $1/M, $2/M) = %d", c)
	}
	if c := CostNano(1, 0, 0.0001, 0); c != 1 {
		t.Fatalf("a fraction of a nano-USD rounds up: %d", c)
	}
	if c := CostNano(5, 5, math.NaN(), math.Inf(1)); c != 0 {
		t.Fatalf("NaN and infinite prices: %d", c)
	}
	if n := AffordableTokens(50_000_000, 4096, 1000); n != 50 {
		t.Fatalf("$0.05 at $1000/M pays %d tokens, want 50", n)
	}
	if n := AffordableTokens(math.MaxInt64, math.MaxInt64, 0.001); n != math.MaxInt64 {
		t.Fatalf("AffordableTokens saturates: %d", n)
	}
}

// FuzzCost: for any counts and prices, costs are non-negative, monotonic
// in the token counts and never wrap; the tokens AffordableTokens grants
// never cost more than the money given.
func FuzzCost(f *testing.F) {
	f.Add(int64(10), int64(4096), 1000.0, 1000.0, int64(50_000_000))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), 1e300, 1e-300, int64(math.MaxInt64))
	f.Add(int64(-1), int64(1<<31), 0.15, 0.6, int64(-7))
	f.Fuzz(func(t *testing.T, in, out int64, pin, pout float64, money int64) {
		c := CostNano(in, out, pin, pout)
		if c < 0 {
			t.Fatalf("CostNano(%d, %d, %g, %g) = %d", in, out, pin, pout, c)
		}
		if c2 := CostNano(AddSat(in, 1), AddSat(out, 1), pin, pout); c2 < c {
			t.Fatalf("not monotonic: %d then %d", c, c2)
		}
		n := AffordableTokens(money, out, pout)
		if n < 0 || n > max(out, 0) {
			t.Fatalf("AffordableTokens(%d, %d, %g) = %d", money, out, pout, n)
		}
		if NanoPerToken(pout) > 0 && CostNano(0, n, 0, pout) > max(money, 0) {
			t.Fatalf("%d tokens at %g cost %d > %d", n, pout, CostNano(0, n, 0, pout), money)
		}
		if s := AddSat(in, out); s < 0 || s < max(in, 0) {
			t.Fatalf("AddSat(%d, %d) = %d", in, out, s)
		}
		if p := MulSat(in, out); p < 0 {
			t.Fatalf("MulSat(%d, %d) = %d", in, out, p)
		}
	})
}
