package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A small admission run measures every size, blocks the sample injection,
// serves benign prompts with admission on and off, and prints ratios.
func TestRunAdmission(t *testing.T) {
	rep, err := RunAdmission(context.Background(), AdmissionOptions{Iterations: 20, Requests: 10, Tokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != len(AdmissionSizes) || !rep.BlockedMaliciousFound {
		t.Fatalf("report %+v", rep)
	}
	for _, s := range rep.Steps {
		if s.Benign.P50 <= 0 || s.Malicious.P99 < s.Malicious.P50 {
			t.Fatalf("step %+v", s)
		}
	}
	if rep.On.P50 <= 0 || rep.Off.P50 <= 0 || rep.Direct.P50 <= 0 {
		t.Fatalf("edge series %+v", rep)
	}
	var out bytes.Buffer
	rep.Print(&out)
	if !strings.Contains(out.String(), "16 KB prompt") || !strings.Contains(out.String(), "on/off") {
		t.Fatalf("printed:\n%s", out.String())
	}
}
