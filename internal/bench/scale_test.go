package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestScaleReportsEveryRow runs the scale bench with small counts and
// checks that every service is measured at every replica count, with every
// item handled, and printed.
func TestScaleReportsEveryRow(t *testing.T) {
	var progress bytes.Buffer
	rep, err := RunScale(context.Background(), ScaleOptions{Events: 2000, Docs: 20, Queries: 50, Progress: &progress})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	want := map[string]int{ScaleUsageFold: 2000, ScaleUsageQueries: 50, ScaleIngest: 20}
	seen := map[string]int{}
	for _, r := range rep.Rows {
		if r.Items != want[r.Service] || r.Wall <= 0 {
			t.Errorf("row %+v: want %d items and a duration", r, want[r.Service])
		}
		if r.Service == ScaleUsageFold && len(r.Current) != r.Replicas {
			t.Errorf("fold row with %d replicas has %d replica times", r.Replicas, len(r.Current))
		}
		if rep.Ratio(r) <= 0 {
			t.Errorf("row %+v: no ratio to 1 replica", r)
		}
		seen[r.Service] |= 1 << r.Replicas
	}
	for s := range want {
		if seen[s] != 0b1110 {
			t.Errorf("%s: replica counts measured %b, want 1, 2 and 3", s, seen[s])
		}
	}
	var out bytes.Buffer
	rep.Print(&out)
	if lines := strings.Count(out.String(), "\n"); lines < len(rep.Rows)+3 {
		t.Errorf("report too short:\n%s", out.String())
	}
	for _, s := range []string{"usage fold", "usage queries", "ingest", "vs 1 replica", "3 replicas:"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}
