package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestCacheBenchRuns checks that the cache bench measures every path (each
// checked by its X-Aiforge-Cache header) and prints them.
func TestCacheBenchRuns(t *testing.T) {
	rep, err := RunCache(context.Background(), CacheOptions{Requests: 3, TimeToFirstToken: 2 * time.Millisecond, Tokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []CachePaths{rep.Plain, rep.Stream} {
		if p.Miss.P50 <= 0 || p.Exact.P50 <= 0 || p.Similar.P50 <= 0 {
			t.Fatalf("report %+v", rep)
		}
	}
	var b strings.Builder
	rep.Print(&b)
	for _, want := range []string{"plain miss", "plain exact hit", "streamed similar hit", "target hit p50 < 1.000ms"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("printed %q, lacks %q", b.String(), want)
		}
	}
}
