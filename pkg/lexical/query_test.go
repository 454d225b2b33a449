package lexical

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestQueryWeighsQuestionWordsAndSynonymsBelowTheUsersTerms(t *testing.T) {
	a := NewEnglish()
	q := a.Query("How can I change the colour of a picture?", QueryOptions{})
	for _, own := range []string{"chang", "colour", "pictur"} {
		if q.Weights[own] != 1 {
			t.Errorf("user term %q weighs %v, want 1 (weights %v)", own, q.Weights[own], q.Weights)
		}
	}
	if w := q.Weights["can"]; w != QuestionWordWeight {
		t.Errorf("question word 'can' weighs %v, want %v", w, QuestionWordWeight)
	}
	if _, ok := q.Weights["how"]; ok {
		t.Error("stop word 'how' kept")
	}
	if w := q.Weights["color"]; w != SynonymWeight {
		t.Errorf("synonym 'color' of 'colour' weighs %v, want %v", w, SynonymWeight)
	}
	if !slices.Equal(q.Ordered, []string{"chang", "colour", "pictur"}) {
		t.Errorf("ordered = %v", q.Ordered)
	}
	if q.Words != nil {
		t.Errorf("words set for a query with terms: %v", q.Words)
	}
	n := a.Query("How can I change the colour of a picture?", QueryOptions{NoSynonyms: true})
	if _, ok := n.Weights["color"]; ok {
		t.Error("NoSynonyms expanded")
	}
}

func TestQueryOfOnlyStopWordsKeepsAPhrase(t *testing.T) {
	a := NewEnglish()
	q := a.Query("To be, or not to be", QueryOptions{})
	if len(q.Weights) != 0 || !slices.Equal(q.Words, []string{"to", "be", "or", "not", "to", "be"}) {
		t.Fatalf("query = %+v", q)
	}
	if !PhraseMatch("Hamlet: To be or NOT to be; that is the question.", q.Words) {
		t.Error("phrase not found")
	}
	if PhraseMatch("to be or to be not", q.Words) {
		t.Error("words out of order matched")
	}
	// Only question words: they stay, at their low weight, so it finds something.
	if q := a.Query("can I?", QueryOptions{}); q.Weights["can"] != QuestionWordWeight {
		t.Errorf("'can I?' = %+v", q)
	}
	if q := a.Query("   ", QueryOptions{}); q.Weights != nil || q.Words != nil {
		t.Errorf("blank query = %+v", q)
	}
}

func TestSynonymsTable(t *testing.T) {
	if !slices.Contains(Synonyms("colour"), "color") || !slices.Contains(Synonyms("holiday"), "vacat") {
		t.Fatalf("colour → %v, holiday → %v", Synonyms("colour"), Synonyms("holiday"))
	}
	if Synonyms("the") != nil || Synonyms("zzzz") != nil {
		t.Fatal("synonyms for a stop word or a non-word")
	}
	for _, s := range Synonyms("start") {
		if len(s) < 3 {
			t.Fatalf("short synonym %q", s)
		}
	}
}

func TestProximityRewardsTermsCloseTogether(t *testing.T) {
	one := func(string) float64 { return 1 }
	q := []string{"keep", "file", "reboot"}
	near := Proximity([]string{"keep", "file", "across", "reboot"}, q, one)
	far := Proximity([]string{"keep", "a", "b", "c", "d", "e", "f", "g", "h", "i", "file", "x", "y", "z", "w", "v", "u", "t", "s", "reboot"}, q, one)
	if near <= far || far != 0 {
		t.Fatalf("near %v, far %v", near, far)
	}
	// keep–file at 1, file–reboot at 2, keep–reboot at 3.
	if want := 1 + 1.0/2 + 1.0/3; math.Abs(near-want) > 1e-9 {
		t.Fatalf("near = %v, want %v", near, want)
	}
	if Proximity([]string{"keep", "keep"}, []string{"keep"}, one) != 0 {
		t.Fatal("a single term has no proximity")
	}
	idf := func(t string) float64 { return map[string]float64{"keep": 1, "file": 4}[t] }
	if p := Proximity([]string{"file", "keep"}, []string{"keep", "file"}, idf); p != 1 {
		t.Fatalf("pair weight = %v, want the smaller weight 1", p)
	}
}

func TestFieldTF(t *testing.T) {
	p := BM25{K1: 1.2, B: 0.75}
	fields := []Field{{Weight: 1, B: 0.75}, {Weight: 3, B: 0.5}}
	avg := []float64{100, 4}
	body := p.FieldTF(fields, []uint32{1, 0}, []int{100, 4}, avg)
	head := p.FieldTF(fields, []uint32{0, 1}, []int{100, 4}, avg)
	both := p.FieldTF(fields, []uint32{1, 1}, []int{100, 4}, avg)
	if !(head > body && both > head) {
		t.Fatalf("body %v, heading %v, both %v", body, head, both)
	}
	// One occurrence in the body of an average document is plain BM25's TF.
	if want := float64(p.TF(1, 100, 100)); math.Abs(body-want) > 1e-6 {
		t.Fatalf("body = %v, want BM25's %v", body, want)
	}
	// Saturation: however many occurrences, below k1+1.
	if many := p.FieldTF(fields, []uint32{1000, 1000}, []int{100, 4}, avg); many >= 2.2 {
		t.Fatalf("unsaturated: %v", many)
	}
	if p.FieldTF(fields, []uint32{0, 0}, []int{10, 1}, avg) != 0 {
		t.Fatal("no occurrence scores")
	}
}

func TestQueryAddsTheFullWordsOfShortForms(t *testing.T) {
	a := NewEnglish()
	q := a.Query("which distro is best for a sysadmin?", QueryOptions{NoSynonyms: true})
	for _, full := range []string{"distribut", "system", "administr"} {
		if q.Weights[full] != ClippingWeight {
			t.Errorf("full word %q weighs %v, want %v (weights %v)", full, q.Weights[full], ClippingWeight, q.Weights)
		}
	}
	// The user's own short forms stay at their weight and in order; the full words are not the user's order.
	if q.Weights["distro"] != 1 || !slices.Equal(q.Ordered, []string{"distro", "best", "sysadmin"}) {
		t.Errorf("weights %v, ordered %v", q.Weights, q.Ordered)
	}
	// Plurals are the same short form; a full word the user also wrote keeps the user's weight.
	q = a.Query("apps in the distribution and other distros", QueryOptions{NoSynonyms: true})
	if q.Weights["applic"] != ClippingWeight || q.Weights["distribut"] != 1 {
		t.Errorf("weights %v", q.Weights)
	}
	// A word that is no short form adds nothing.
	if q := a.Query("kernel", QueryOptions{NoSynonyms: true}); len(q.Weights) != 1 {
		t.Errorf("'kernel' = %v", q.Weights)
	}
}

func TestClippingsTable(t *testing.T) {
	if c := Clippings("app"); !slices.Equal(c, []string{"applic"}) {
		t.Errorf("app → %v", c)
	}
	if c := Clippings("config"); !slices.Equal(c, []string{"configur"}) {
		t.Errorf("config → %v", c)
	}
	if c := Clippings("applic"); c != nil {
		t.Errorf("a full word has short forms: %v", c)
	}
	// Stems that are paths or words of their own in technical text are not short forms: "/dev/sda" and
	// "stat the file" must not ask for developers or statistics.
	for _, w := range []string{"/dev/sda", "devs", "stat", "stats", "dist-upgrade", "temp"} {
		if q := NewEnglish().Query(w, QueryOptions{NoSynonyms: true}); len(q.Weights) != len(q.Ordered) {
			t.Errorf("%q expanded: %v", w, q.Weights)
		}
	}
	// Every short form of the table is kept by the analyzer (not a stop word, not dropped) and leads to the terms
	// the analyzer indexes for the full words, so a document that writes them matches.
	a := NewEnglish()
	for _, line := range strings.Split(clippingTable, "\n") {
		short, full, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		want := a.Terms(full)
		if len(want) == 0 {
			t.Errorf("%q: no full word kept", line)
		}
		for _, w := range strings.Fields(short) {
			s := a.Terms(w)
			if len(s) != 1 {
				t.Errorf("short form %q analyses to %v", w, s)
				continue
			}
			for _, f := range want {
				if f != s[0] && !slices.Contains(Clippings(s[0]), f) {
					t.Errorf("%q → %v, missing %q", w, Clippings(s[0]), f)
				}
			}
		}
	}
}

// TestExpansionsAreWhatQueryAdds: every term Query adds for a user's word is among that word's Expansions, which
// an index uses to group a query's terms by the word they came from.
func TestExpansionsAreWhatQueryAdds(t *testing.T) {
	a := NewEnglish()
	q := a.Query("which distro shows the colour of a picture", QueryOptions{})
	from := map[string]bool{}
	for _, s := range q.Ordered {
		from[s] = true
		for e := range Expansions(s) {
			from[e] = true
		}
	}
	for term := range q.Weights {
		if !from[term] {
			t.Errorf("query term %q is no user word's expansion (weights %v)", term, q.Weights)
		}
	}
	var first []string
	for e := range Expansions("distro") {
		first = append(first, e)
		break
	}
	if !slices.Equal(first, []string{"distribut"}) {
		t.Errorf("first expansion of distro = %v", first)
	}
}
