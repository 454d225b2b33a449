package lexical

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzTerms(f *testing.F) {
	for _, s := range []string{
		"", "How do I connect the device?", "state-of-the-art", "don't 'tis students'",
		"3.14 1,000 v1.2.3.", "東京は日本", "Café ＣＡＦＥ ﬁle", "a'b'c x’y ʼz", "\xff\xfe bad",
		strings.Repeat("é", 40), "cafe\u0301s", "ΟΔΟΣ", "\u0301\u0301abc",
	} {
		f.Add(s)
	}
	a := NewEnglish()
	f.Fuzz(func(t *testing.T, s string) {
		ts := a.Terms(s)
		tf, n := a.TermFreqs(s)
		if n != len(ts) {
			t.Fatalf("TermFreqs length %d, len(Terms) %d", n, len(ts))
		}
		for _, term := range ts {
			if term == "" || len(term) > MaxTermBytes || !utf8.ValidString(term) || tf[term] == 0 {
				t.Fatalf("bad term %q (tf %d) from %q", term, tf[term], s)
			}
		}
		// Re-analysing the terms never fails.
		_ = a.Terms(strings.Join(ts, " "))
	})
}
