package spend

import "math"

// Saturating arithmetic for money and token counts: admission inputs come
// from untrusted requests (max_tokens, n, prompt sizes), and an int64 that
// wraps round to a negative number would switch budgets and rate limits
// off. Every sum and product on the admission path saturates at
// math.MaxInt64 (and at 0 below, for the non-negative quantities used here)
// instead.

// AddSat is a+b for non-negative a and b, saturating at math.MaxInt64;
// negative operands count as 0.
func AddSat(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// SubFloor is a-b, at least 0; negative operands count as 0.
func SubFloor(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if b >= a {
		return 0
	}
	return a - b
}

// MulSat is a*b for non-negative a and b, saturating at math.MaxInt64;
// negative operands count as 0.
func MulSat(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// maxExactFloat is the largest float64 below 2^63: converting anything at
// or above 2^63 to int64 is implementation-defined in Go.
const maxExactFloat = float64(1<<63 - 1024)

// floatToNano converts a non-negative amount of nano-USD to int64, rounding
// up and saturating; NaN and negative amounts are 0.
func floatToNano(f float64) int64 {
	switch {
	case !(f > 0): // NaN too
		return 0
	case f >= maxExactFloat:
		return math.MaxInt64
	}
	return int64(math.Ceil(f))
}

// NanoPerToken is the nano-USD price of one token at usdPerMTok dollars
// per million tokens ($1/M = 1000 nano-USD per token).
func NanoPerToken(usdPerMTok float64) float64 {
	if !(usdPerMTok > 0) || math.IsInf(usdPerMTok, 0) {
		return 0
	}
	return usdPerMTok * 1000
}

// CostNano is the cost of inputTokens and outputTokens at the given prices
// in dollars per million tokens, rounded up to a whole nano-USD and
// saturating at math.MaxInt64; negative counts and prices count as 0.
func CostNano(inputTokens, outputTokens int64, inputUSDPerMTok, outputUSDPerMTok float64) int64 {
	f := float64(max(inputTokens, 0))*NanoPerToken(inputUSDPerMTok) + float64(max(outputTokens, 0))*NanoPerToken(outputUSDPerMTok)
	return floatToNano(f)
}

// AffordableTokens is the largest number of tokens t, at most limit, such
// that t tokens at usdPerMTok cost no more than nano nano-USD; limit when
// the price is 0.
func AffordableTokens(nano, limit int64, usdPerMTok float64) int64 {
	limit = max(limit, 0)
	per := NanoPerToken(usdPerMTok)
	if per == 0 {
		return limit
	}
	t := limit
	if f := math.Floor(float64(max(nano, 0)) / per); f < float64(limit) {
		t = int64(f)
	}
	// Rounding in the division must not let the cost pass nano; near 2^63
	// float64 steps are coarse, so step down by a fraction of t.
	for t > 0 && CostNano(0, t, 0, usdPerMTok) > nano {
		t -= max(1, t>>20)
	}
	t = max(t, 0)
	return t
}
