package guard

import (
	"context"
	"fmt"
	"testing"
)

type tally struct{ pos, hit, neg, fp int }

func evaluate(t *testing.T, name string, set []labelled) (recall, fpr float64) {
	t.Helper()
	b := NewBuiltin(BuiltinConfig{})
	per := map[string]*tally{}
	var all tally
	for _, c := range Categories {
		per[c] = &tally{}
	}
	for i, l := range set {
		v, err := b.Classify(context.Background(), []Segment{{Role: "user", Source: l.src, Text: l.text}})
		if err != nil {
			t.Fatal(err)
		}
		if l.want == "" {
			all.neg++
			if v.Malicious {
				all.fp++
				per[v.Category].fp++
				t.Logf("%s #%d false positive (%s %.2f): %.80q", name, i, v.Category, v.Score, l.text)
			}
			continue
		}
		all.pos++
		per[l.want].pos++
		if v.Malicious {
			all.hit++
			per[l.want].hit++
		} else {
			t.Logf("%s #%d missed %s (%s %.2f): %.80q", name, i, l.want, v.Category, v.Score, l.text)
		}
	}
	for _, c := range Categories {
		p := per[c]
		t.Logf("%s %-26s recall %3d/%-3d = %5.1f%%  false positives %d", name, c, p.hit, p.pos, pct(p.hit, p.pos), p.fp)
	}
	recall, fpr = pct(all.hit, all.pos), pct(all.fp, all.neg)
	t.Logf("%s overall: recall %d/%d = %.1f%%, FPR %d/%d = %.1f%%", name, all.hit, all.pos, recall, all.fp, all.neg, fpr)
	return recall, fpr
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func TestBuiltinTuningSet(t *testing.T) {
	if len(tuning)+len(heldOut) < 150 {
		t.Fatalf("only %d labelled prompts", len(tuning)+len(heldOut))
	}
	recall, fpr := evaluate(t, "tuning", tuning)
	if recall < 95 || fpr > 3 {
		t.Errorf("tuning set: recall %.1f%% (want ≥ 95), FPR %.1f%% (want ≤ 3)", recall, fpr)
	}
}

// The held-out set is not tuned on; its bar is lower so that it reports
// rather than steers, but a collapse still fails.
func TestBuiltinHeldOutSet(t *testing.T) {
	recall, fpr := evaluate(t, "held-out", heldOut)
	if recall < 85 || fpr > 10 {
		t.Errorf("held-out set: recall %.1f%% (want ≥ 85), FPR %.1f%% (want ≤ 10)", recall, fpr)
	}
	_ = fmt.Sprint()
}
