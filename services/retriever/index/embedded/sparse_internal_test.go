package embedded

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/lexical"
	"github.com/aiforge/aiforge/services/retriever/index"
)

var an = lexical.NewEnglish()

func textChunk(tenant, file string, i int, text string, headings ...string) index.Chunk {
	terms, n := an.TermFreqs(text)
	return index.Chunk{ID: index.ChunkID(tenant, "s", file, i), Tenant: tenant, StoreID: "s", FileID: file, Index: i,
		Text: text, Terms: terms, Length: n, HeadingPath: headings}
}

func sparseIDs(t *testing.T, e *Index, q index.Query) []string {
	t.Helper()
	q.Mode = index.ModeSparse
	hits, err := e.Search(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.Chunk.FileID
	}
	return ids
}

func weighted(text string) index.Query {
	q := an.Query(text, lexical.QueryOptions{NoSynonyms: true})
	return index.Query{Tenant: "a", TermWeights: q.Weights, Ordered: q.Ordered, Phrase: q.Words}
}

// TestBM25FHeadingsCountMore: a chunk under a heading that names the query's subject outranks a chunk that
// mentions it once in passing; plain BM25 over the text alone ranks the passing mention first (it is shorter).
func TestBM25FHeadingsCountMore(t *testing.T) {
	e := openT(t, Config{Dir: t.TempDir()})
	defer e.Close()
	ctx := context.Background()
	err := e.Upsert(ctx, []index.Chunk{
		textChunk("a", "passing", 0, "Printers are set up elsewhere; persistence is mentioned here."),
		textChunk("a", "section", 0, "Make the home directory and the APT cache survive a reboot with an overlay volume on the stick, labelled as described below in the configuration file.",
			"Live Systems Manual", "Persistence"),
		textChunk("a", "other", 0, "Nothing relevant at all in this chunk of text about keyboards."),
	})
	if err != nil {
		t.Fatal(err)
	}
	q := weighted("persistence")
	if ids := sparseIDs(t, e, q); len(ids) != 2 || ids[0] != "section" {
		t.Fatalf("BM25F ranking = %v, want the Persistence section first", ids)
	}
	plain := index.Query{Tenant: "a", Scoring: index.ScoringBM25}
	plain.Terms, _ = an.TermFreqs("persistence")
	if ids := sparseIDs(t, e, plain); len(ids) != 1 || ids[0] != "passing" {
		t.Fatalf("plain BM25 ranking = %v, want only the chunk whose text has the word", ids)
	}
	// The heading fields are derived from the stored heading path: a reopened index ranks the same.
	dir := e.cfg.Dir
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := openT(t, Config{Dir: dir})
	defer e2.Close()
	if ids := sparseIDs(t, e2, q); len(ids) != 2 || ids[0] != "section" {
		t.Fatalf("after reopening: %v", ids)
	}
	// Deleting the section removes its heading-only postings too.
	if err := e2.DeleteFile(ctx, "a", "s", "section"); err != nil {
		t.Fatal(err)
	}
	if ids := sparseIDs(t, e2, q); len(ids) != 1 || ids[0] != "passing" {
		t.Fatalf("after deleting the section: %v", ids)
	}
}

// TestProximityBoost: with the same terms, the chunk where they stand together ranks first.
func TestProximityBoost(t *testing.T) {
	e := openT(t, Config{Dir: t.TempDir()})
	defer e.Close()
	err := e.Upsert(context.Background(), []index.Chunk{
		textChunk("a", "apart", 0, "The kernel is configured first. Later, after many unrelated steps and checks, the package is built."),
		textChunk("a", "together", 0, "Build a kernel package after configuring it. Unrelated steps and checks follow, many later, first."),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ids := sparseIDs(t, e, weighted("kernel package")); len(ids) != 2 || ids[0] != "together" {
		t.Fatalf("ranking = %v, want the adjacent terms first", ids)
	}
	// Without proximity the shorter chunk ranks first: the boost is what puts "together" ahead.
	q := weighted("kernel package")
	hits, err := e.Search(context.Background(), index.Query{Tenant: "a", Mode: index.ModeSparse, TermWeights: q.TermWeights})
	if err != nil || len(hits) != 2 || hits[0].Chunk.FileID != "apart" {
		t.Fatalf("without proximity: %+v, %v", hits, err)
	}
}

// TestStopWordQueryMatchesAPhrase: a query of stop words only matches chunks holding the phrase.
func TestStopWordQueryMatchesAPhrase(t *testing.T) {
	e := openT(t, Config{Dir: t.TempDir()})
	defer e.Close()
	err := e.Upsert(context.Background(), []index.Chunk{
		textChunk("a", "hamlet", 0, "Hamlet asks: to be, or not to be?"),
		textChunk("a", "heading", 0, "A chapter about a famous line.", "Plays", "To be or not to be"),
		textChunk("a", "other", 0, "To be honest, not everyone would be."),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ids := sparseIDs(t, e, weighted("to be or not to be")); len(ids) != 2 || ids[0] != "heading" || ids[1] != "hamlet" {
		t.Fatalf("phrase ranking = %v", ids)
	}
}

// TestHeadingStatisticsArePerTenant: another tenant's chunks, with or without headings, do not change a
// tenant's scores.
func TestHeadingStatisticsArePerTenant(t *testing.T) {
	e := openT(t, Config{Dir: t.TempDir()})
	defer e.Close()
	ctx := context.Background()
	mine := []index.Chunk{
		textChunk("a", "x", 0, "Encrypt the persistence volume with a passphrase.", "Manual", "Encrypted persistence"),
		textChunk("a", "y", 0, "Persistence keeps files across reboots.", "Manual", "Persistence"),
	}
	if err := e.Upsert(ctx, mine); err != nil {
		t.Fatal(err)
	}
	search := func() []index.Hit {
		q := weighted("persistence passphrase")
		q.Mode = index.ModeSparse
		hits, err := e.Search(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return hits
	}
	before := search()
	var theirs []index.Chunk
	for i := range 50 {
		theirs = append(theirs, textChunk("b", "z", i, "persistence persistence passphrase, a long text about other things entirely and more", "Persistence passphrase heading that is long"))
	}
	if err := e.Upsert(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	after := search()
	if len(before) != 2 || len(after) != 2 {
		t.Fatalf("hits %d then %d", len(before), len(after))
	}
	for i := range before {
		if before[i].Chunk.ID != after[i].Chunk.ID || before[i].Score != after[i].Score {
			t.Fatalf("tenant b changed tenant a's scores: %+v → %+v", before[i], after[i])
		}
	}
}

// TestWeightedFusion: hybrid search with ranking weights; a text weight of 0 is keyword-blind, an embedding
// weight of 0 is vector-blind.
func TestWeightedFusion(t *testing.T) {
	e := openT(t, Config{Dir: t.TempDir()})
	defer e.Close()
	ctx := context.Background()
	kw := textChunk("a", "keyword", 0, "persistence volume label")
	kw.Dense = []float32{0, 1}
	vec := textChunk("a", "vector", 0, "nothing about it")
	vec.Dense = []float32{1, 0}
	if err := e.Upsert(ctx, []index.Chunk{kw, vec}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f     index.Fusion
		first string
	}{
		{index.Fusion{Method: index.FusionWeighted, DenseWeight: 1, SparseWeight: 0}, "vector"},
		{index.Fusion{Method: index.FusionWeighted, DenseWeight: 0, SparseWeight: 1}, "keyword"},
		{index.Fusion{Method: index.FusionRRF, DenseWeight: 1, SparseWeight: 0}, "vector"},
		{index.Fusion{Method: index.FusionRRF, DenseWeight: 1, SparseWeight: 3}, "keyword"},
	} {
		q := weighted("persistence")
		q.Dense, q.Mode, q.Fusion = []float32{1, 0.1}, index.ModeHybrid, c.f
		hits, err := e.Search(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) == 0 || hits[0].Chunk.FileID != c.first || hits[0].Score > 1 || hits[0].Score <= 0 {
			t.Fatalf("fusion %+v: %+v, want %s first with a score in (0, 1]", c.f, hits, c.first)
		}
	}
	if _, err := e.Search(ctx, index.Query{Tenant: "a", Dense: []float32{1, 0}, Fusion: index.Fusion{Method: "max"}}); err == nil {
		t.Fatal("unknown fusion accepted")
	}
}

// feedbackCorpus: one chunk says it in the user's words ("stop ... upgraded"), one only in the document's
// ("hold", "apt-mark"), the rest are about other things; "system" is in most chunks.
func feedbackCorpus(t *testing.T) *Index {
	t.Helper()
	e := openT(t, Config{Dir: t.TempDir()})
	err := e.Upsert(context.Background(), []index.Chunk{
		textChunk("a", "words", 0, "To stop a package from being upgraded on your system, put it on hold with apt-mark."),
		textChunk("a", "vocab", 0, "apt-mark hold keeps a package at its installed version; apt-mark unhold releases the hold."),
		textChunk("a", "printer", 0, "Printers are configured with CUPS on this system through its web interface."),
		textChunk("a", "keyboard", 0, "The keyboard layout of the system console is chosen with dpkg-reconfigure."),
		textChunk("a", "sound", 0, "Sound cards are detected by the kernel when the system boots."),
		textChunk("a", "network", 0, "Network interfaces are configured in a file under /etc."),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestFeedbackFindsTheDocumentsVocabulary: pseudo-relevance feedback adds the vocabulary of the best
// first-pass results, so a chunk that shares no word with the query but states the same thing in the
// document's terms is found, below the chunk in the user's words; chunks on other subjects still are not.
func TestFeedbackFindsTheDocumentsVocabulary(t *testing.T) {
	e := feedbackCorpus(t)
	defer e.Close()
	ids := sparseIDs(t, e, weighted("stop upgrades"))
	if len(ids) != 2 || ids[0] != "words" || ids[1] != "vocab" {
		t.Fatalf("ranking with feedback = %v, want [words vocab]", ids)
	}
	plain := index.Query{Tenant: "a", Scoring: index.ScoringBM25}
	plain.Terms, _ = an.TermFreqs("stop upgrades")
	if ids := sparseIDs(t, e, plain); len(ids) != 1 || ids[0] != "words" {
		t.Fatalf("plain BM25 (no feedback) = %v, want only the chunk in the user's words", ids)
	}
}

// TestFeedbackWeights: the expansion keeps the user's terms at feedbackOriginal of their weight, adds terms
// of the feedback documents that share the rest of the query's total weight, never a term found in more than
// feedbackMaxDF of the documents, and is the same on every call.
func TestFeedbackWeights(t *testing.T) {
	e := feedbackCorpus(t)
	defer e.Close()
	q := weighted("stop upgrades")
	p, err := index.PrepareQuery(index.Query{Tenant: "a", Mode: index.ModeSparse, TermWeights: q.TermWeights, Ordered: q.Ordered}, e.dim)
	if err != nil {
		t.Fatal(err)
	}
	tn := e.tenants["a"]
	tie := func(a, b uint32) int { return strings.Compare(tn.docs[a].c.ID, tn.docs[b].c.ID) }
	out, _ := e.sparsePass(tn, &p, p.Weights, tie)
	w := tn.feedback(out, p.Weights)
	if w == nil {
		t.Fatal("no expansion")
	}
	var sumOrig, sum float64
	for term, v := range p.Weights {
		sumOrig += v
		if got := w[term]; math.Abs(got-feedbackOriginal*v) > 1e-9 {
			t.Errorf("user term %q weight %v, want %v", term, got, feedbackOriginal*v)
		}
	}
	for _, v := range w {
		sum += v
	}
	if math.Abs(sum-sumOrig) > 1e-9 {
		t.Errorf("total weight %v, want the query's %v", sum, sumOrig)
	}
	if _, ok := w["hold"]; !ok {
		t.Errorf("expansion %v lacks the feedback document's %q", w, "hold")
	}
	if _, ok := w["system"]; ok {
		t.Errorf("expansion %v has %q, found in most documents", w, "system")
	}
	if len(w) > len(p.Weights)+feedbackTerms {
		t.Errorf("%d terms added, at most %d", len(w)-len(p.Weights), feedbackTerms)
	}
	for range 5 {
		if again := tn.feedback(out, p.Weights); !maps.Equal(again, w) {
			t.Fatalf("expansion differs between calls: %v, then %v", w, again)
		}
	}
}

func TestIsNavigation(t *testing.T) {
	toc := strings.Repeat("7.12 How do I put a package on hold? . . . . . . . . . . 32 ", 5)
	for _, c := range []struct {
		text string
		want bool
	}{
		{toc, true},
		{strings.Repeat("Figure 3: the canvas ......... 12\n", 5), true},
		{strings.Repeat("Entry . . . . 9\n", 4), false}, // four leaders are not enough
		{strings.TrimSpace(toc), true},                  // the last leader ends the text
		{"Wait... what? Then... nothing. Dots . . . here, and an ellipsis... again... and again... and again...", false},
		{"A sentence. Another one. And a third. A fourth. A fifth. A sixth.", false},
		{"", false},
	} {
		if got := isNavigation(c.text); got != c.want {
			t.Errorf("isNavigation(%.40q) = %v, want %v", c.text, got, c.want)
		}
	}
}

// TestNavigationChunksDemoted: a table of contents names every section, so it matches a question better than
// the longer section that answers it (undemoted, the contents rank first here; both hold every word of the
// question, so the coordination factor does not tell them apart); the section comes first, and the contents
// are still found.
func TestNavigationChunksDemoted(t *testing.T) {
	e := openT(t, Config{Dir: t.TempDir()})
	defer e.Close()
	toc := "7.11 What is meant by hold in the package status? . . . . . . . . 31\n" +
		"7.12 How do I put a package on hold? . . . . . . . . . . . . . . 32\n" +
		"7.13 How do I install a source package? . . . . . . . . . . . . 32\n" +
		"7.14 How do I build binary packages from a source package? . . . . 33\n" +
		"7.15 How do I create Debian packages myself? . . . . . . . . . . 33\n"
	section := "There are three ways of holding back packages, with dpkg, apt or aptitude. With apt, run apt-mark " +
		"hold and the name of the package to put it on hold. The other two ways are described in the manual pages " +
		"of dpkg and aptitude, with examples for each of them and notes on what happens at the next upgrade."
	if err := e.Upsert(context.Background(), []index.Chunk{
		textChunk("a", "contents", 0, toc, "Contents"),
		textChunk("a", "section", 0, section, "Basics"),
		textChunk("a", "other", 0, "Keyboards and mice are configured elsewhere in this manual.", "Other"),
	}); err != nil {
		t.Fatal(err)
	}
	q := weighted("put a package on hold")
	if ids := sparseIDs(t, e, q); len(ids) != 2 || ids[0] != "section" || ids[1] != "contents" {
		t.Fatalf("ranking = %v, want the section, then the contents", ids)
	}
	// Plain BM25 (the baseline scorer) is left as it was.
	q.Scoring = index.ScoringBM25
	q.Terms, _ = an.TermFreqs("put a package on hold")
	q.TermWeights = nil
	if ids := sparseIDs(t, e, q); len(ids) != 2 {
		t.Fatalf("plain BM25 = %v", ids)
	}
}

// TestCoordination: a chunk that matches both concepts of a two-word question outranks one that repeats the
// rarer word alone, and a synonym of a user's word covers that word's concept.
func TestCoordination(t *testing.T) {
	e := openT(t, Config{Dir: t.TempDir()})
	defer e.Close()
	chunks := []index.Chunk{
		textChunk("a", "one", 0, "The zebra, the zebra and the zebra graze in the fields near the river today."),
		textChunk("a", "both", 0, "A zebra grazes near a lion in the fields by the river today."),
	}
	for i, s := range []string{"A lion sleeps.", "The lion hunts at night.", "Lion cubs play.", "An old lion roars."} {
		chunks = append(chunks, textChunk("a", "lion", i, s))
	}
	if err := e.Upsert(context.Background(), chunks); err != nil {
		t.Fatal(err)
	}
	if ids := sparseIDs(t, e, weighted("zebra lion")); len(ids) < 2 || ids[0] != "both" {
		t.Fatalf("ranking = %v, want the chunk with both words first", ids)
	}

	if c := coordination(3, 3); c != 1 {
		t.Fatalf("coordination(3, 3) = %v", c)
	}
	if z, a, b := coordination(0, 3), coordination(1, 3), coordination(2, 3); !(0 < z && z < a && a < b && b < 1) {
		t.Fatalf("coordination(0, 3) = %v, (1, 3) = %v, (2, 3) = %v", z, a, b)
	}
	q := an.Query("picture of the house", lexical.QueryOptions{})
	concepts, n := queryConcepts(q.Ordered, q.Weights)
	if n != 2 {
		t.Fatalf("%d concepts in %v, want 2", n, q.Ordered)
	}
	syns := 0
	for term := range q.Weights {
		if concepts[term] == 0 {
			t.Errorf("term %q is in no concept", term)
		}
		if !slices.Contains(q.Ordered, term) {
			syns++
			if concepts[term] != concepts[q.Ordered[0]] && concepts[term] != concepts[q.Ordered[1]] {
				t.Errorf("synonym %q is in concepts %b, not in one user term's", term, concepts[term])
			}
		}
	}
	if syns == 0 {
		t.Fatalf("no synonyms in %v", q.Weights)
	}
	// The full words of a short form belong to its concept: "distribution" covers what "distro" asked.
	q = an.Query("distro for a sysadmin", lexical.QueryOptions{NoSynonyms: true})
	concepts, n = queryConcepts(q.Ordered, q.Weights)
	if n != 2 || concepts["distribut"] != concepts["distro"] || concepts["administr"] != concepts["sysadmin"] ||
		concepts["distribut"] == concepts["administr"] {
		t.Fatalf("concepts %v (%d) of %v", concepts, n, q.Weights)
	}
}
