package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/internal/eval"
)

func TestPrintMissesListsWhatTheModeDidNotAnswerInItsTop5(t *testing.T) {
	scores := []eval.Scores{
		{Mode: eval.ModeSparseBefore, Ranks: []int{0, 0, 0}, Questions: []string{"a", "b", "c"}},
		{Mode: eval.ModeSparse, Ranks: []int{1, 7, 0, 5}, Questions: []string{"found first", "found seventh", "not found", "found fifth"}},
	}
	var out bytes.Buffer
	if err := printMisses(&out, scores, eval.ModeSparse); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"   7  found seventh\n", "   0  not found\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	for _, not := range []string{"found first", "found fifth", "  a\n"} {
		if strings.Contains(got, not) {
			t.Errorf("%q listed, but it was answered in the top 5 (or is another mode's):\n%s", not, got)
		}
	}
	if err := printMisses(&out, scores, eval.ModeDense); err == nil || !strings.Contains(err.Error(), "sparse-bm25, sparse") {
		t.Errorf("a mode the run did not score: %v", err)
	}
}
