package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// BenchmarkGateway compares calling the engine simulator directly with
// calling it through aiforge, in one process and one run:
//
//	go test -bench Gateway -benchtime 2000x ./internal/bench/
func BenchmarkGateway(b *testing.B) {
	env, err := Setup(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer env.Close()
	for _, stream := range []bool{false, true} {
		name := "plain"
		if stream {
			name = "stream16"
		}
		for _, tc := range []struct {
			path string
			t    target
		}{{"direct", env.Direct}, {"aiforge", env.Gateway}} {
			b.Run(name+"/"+tc.path, func(b *testing.B) {
				for b.Loop() {
					if _, err := tc.t.Call(stream, 16); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestSetupServes checks that the bench environment answers on both paths,
// so that `aiforge bench` cannot rot unnoticed.
func TestSetupServes(t *testing.T) {
	env, err := Setup(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	for _, stream := range []bool{false, true} {
		if _, err := env.Direct.Call(stream, 4); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Gateway.Call(stream, 4); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLlamaRuns checks that the llama-like bench answers on every path.
func TestLlamaRuns(t *testing.T) {
	rep, err := RunLlama(context.Background(), Options{Requests: 2, Tokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Aiforge.P50 <= 0 || rep.Direct.P50 <= 0 || rep.DirectQuickAck.P50 <= 0 || rep.DirectStream.P50 <= 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestBatchBenchRuns(t *testing.T) {
	rep, err := RunBatch(context.Background(), BatchOptions{Lines: 60, Slots: 4, LineLatency: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.DirectRPS <= 0 || rep.BatchLPS <= 0 || rep.BatchWall <= 0 {
		t.Fatalf("report %+v", rep)
	}
	var b strings.Builder
	rep.Print(&b)
	if !strings.Contains(b.String(), "ratio:") {
		t.Fatalf("printed %q", b.String())
	}
}
