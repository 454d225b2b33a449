package lexical

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"strings"
	"sync"
)

// Query analysis: a user's question ("How do I keep my files between
// reboots?") is turned into weighted terms for field-aware BM25:
//
//   - the user's own words, analysed as documents are (stop words dropped,
//     stems), weigh 1 per occurrence;
//   - question and request words ("can", "may", "need", "want", "please",
//     "way" ...) that are not stop words weigh QuestionWordWeight: they say
//     how the user asks, not what about, yet a query made only of them still
//     finds something;
//   - synonyms of the user's stems from WordNet 3.0 (see Synonyms) are added
//     with SynonymWeight, less than the user's own terms, so that "picture"
//     also finds "image" without outranking a passage that says "picture";
//   - the full words of a short form ("distro" → "distribution", see
//     Clippings) are added with ClippingWeight, nearly the user's own;
//   - a query made only of stop words ("what is it", "to be or not to be")
//     keeps its words in QueryTerms.Words for a phrase match on the text
//     instead of matching nothing.

//go:generate go run ./internal/wngen -dict /usr/share/wordnet -out synonyms.tsv.gz

// synonymsGz is derived from WordNet 3.0 (see WORDNET-LICENSE).
//
//go:embed synonyms.tsv.gz
var synonymsGz []byte

var (
	synOnce  sync.Once
	synTable map[string][]string
)

// Synonyms returns the synonyms of a stem (as the analyzer produces stems)
// from the bundled WordNet 3.0 table, most frequent sense first, or nil.
// The table covers single-word nouns, verbs and adjectives through their
// two most frequent senses that occur in WordNet's sense-tagged corpus.
func Synonyms(stem string) []string {
	synOnce.Do(loadSynonyms)
	return synTable[stem]
}

func loadSynonyms() {
	synTable = make(map[string][]string, 8192)
	zr, err := gzip.NewReader(bytes.NewReader(synonymsGz))
	if err != nil {
		return
	}
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "\t")
		if ok && k != "" {
			synTable[k] = strings.Fields(v)
		}
	}
}

// Default weights of query terms that are not the user's own content words.
const (
	SynonymWeight      = 0.3
	ClippingWeight     = 0.8 // the full words of a short form (see Clippings)
	QuestionWordWeight = 0.15
	MaxSynonyms        = 3 // per user term
	maxQueryOrdered    = 64
)

// questionWords are words of how a question is asked. They are not stop
// words (documents keep them), so the query keeps them at a low weight.
var questionWords = func() map[string]struct{} {
	m := map[string]struct{}{}
	for _, w := range strings.Fields(`can may might will shall must please tell possible possibly way ways able
anyone someone somebody anybody anything something want wants wanted wanna need needs needed
thing things stuff ok okay hi hello thanks thank also just really actually im dont cant doesnt isnt whats`) {
		m[w] = struct{}{}
	}
	return m
}()

// QueryOptions tune Query. The zero value applies the defaults.
type QueryOptions struct {
	NoSynonyms    bool
	SynonymWeight float64 // 0: SynonymWeight
	MaxSynonyms   int     // per user term; 0: MaxSynonyms
}

// QueryTerms is an analysed query.
type QueryTerms struct {
	// Weights maps each term to its weight (see the package's query notes).
	Weights map[string]float64
	// Ordered are the user's content terms in the order written (proximity).
	Ordered []string
	// Words is set only when no term is left: the query's words, lowercased
	// and unstemmed, stop words included, for a phrase match on the text.
	Words []string
}

// Query analyses a search query.
func (a *Analyzer) Query(text string, o QueryOptions) QueryTerms {
	if o.SynonymWeight == 0 {
		o.SynonymWeight = SynonymWeight
	}
	if o.MaxSynonyms == 0 {
		o.MaxSynonyms = MaxSynonyms
	}
	q := QueryTerms{Weights: map[string]float64{}}
	var words []string
	var t tokenizer
	t.reset(text)
	for {
		word, kind, ok := t.next()
		if !ok {
			break
		}
		if len(words) < maxQueryOrdered {
			words = append(words, string(word))
		}
		if kind == kindNumber {
			q.Weights[string(word)]++
			q.Ordered = appendBounded(q.Ordered, string(word))
			continue
		}
		if _, stop := a.stop[string(word)]; stop {
			continue
		}
		_, s := a.stemShared(word, kind == kindStem)
		if _, qw := questionWords[string(word)]; qw {
			q.Weights[s] += QuestionWordWeight
			continue
		}
		q.Weights[s]++
		q.Ordered = appendBounded(q.Ordered, s)
	}
	if len(q.Weights) == 0 {
		q.Weights = nil
		q.Words = words
		return q
	}
	own := make(map[string]bool, len(q.Ordered))
	for _, s := range q.Ordered {
		own[s] = true
	}
	for s := range own {
		for _, full := range Clippings(s) {
			if !own[full] {
				q.Weights[full] = max(q.Weights[full], ClippingWeight)
			}
		}
	}
	if !o.NoSynonyms {
		for s := range own {
			n := 0
			for _, syn := range Synonyms(s) {
				if n == o.MaxSynonyms {
					break
				}
				if own[syn] {
					continue
				}
				n++
				q.Weights[syn] = max(q.Weights[syn], o.SynonymWeight)
			}
		}
	}
	return q
}

func appendBounded(s []string, v string) []string {
	if len(s) < maxQueryOrdered {
		s = append(s, v)
	}
	return s
}

// ProximityWindow is the largest distance, in kept terms, at which two query
// terms in a document count as near each other.
const ProximityWindow = 8

// Proximity scores how close together the distinct query terms occur in a
// document's term sequence (Terms of its text): for each pair of query terms,
// the smallest distance d ≤ ProximityWindow between an occurrence of one and
// of the other contributes min(weight of the two) / d. Adjacent terms (a
// phrase of the query) contribute most; terms far apart or alone contribute
// nothing. weight gives each query term's weight (its IDF, say).
func Proximity(doc, query []string, weight func(term string) float64) float64 {
	idx := make(map[string]int, len(query))
	var terms []string
	for _, t := range query {
		if _, ok := idx[t]; !ok && len(terms) < 16 {
			idx[t] = len(terms)
			terms = append(terms, t)
		}
	}
	n := len(terms)
	if n < 2 {
		return 0
	}
	last := make([]int, n)
	for i := range last {
		last[i] = -1 << 30
	}
	best := make([]int, n*n) // best[i*n+j], i<j: smallest distance
	for i := range best {
		best[i] = ProximityWindow + 1
	}
	for p, t := range doc {
		i, ok := idx[t]
		if !ok {
			continue
		}
		for j := 0; j < n; j++ {
			if j == i {
				continue
			}
			if d := p - last[j]; d <= ProximityWindow {
				a, b := min(i, j), max(i, j)
				best[a*n+b] = min(best[a*n+b], d)
			}
		}
		last[i] = p
	}
	ws := make([]float64, n)
	for i, t := range terms {
		ws[i] = weight(t)
	}
	var s float64
	for a := 0; a < n; a++ {
		for b := a + 1; b < n; b++ {
			if d := best[a*n+b]; d <= ProximityWindow {
				s += min(ws[a], ws[b]) / float64(d)
			}
		}
	}
	return s
}

// Field is one field of a BM25F document: its weight (how much an occurrence
// in it counts against one in the body) and its length normalisation B.
type Field struct{ Weight, B float64 }

// FieldTF is BM25F's saturated term frequency: the per-field frequencies tf[f]
// are normalised by their own field length (length[f] against the average
// avg[f], with that field's B), weighted and summed into one pseudo
// frequency, which is then saturated once with K1:
//
//	tf~ = Σ_f w_f · tf_f / (1 − b_f + b_f · len_f / avg_f);  tf~·(k1+1) / (k1 + tf~)
//
// so a term in a heading counts several occurrences in the body, but many
// occurrences in all fields together still saturate like one BM25 term.
func (p BM25) FieldTF(fields []Field, tf []uint32, length []int, avg []float64) float64 {
	k1, _ := p.params()
	var pseudo float64
	for f, fd := range fields {
		if f >= len(tf) || tf[f] == 0 {
			continue
		}
		norm := 1.0
		if f < len(avg) && avg[f] > 0 && f < len(length) {
			norm = 1 - fd.B + fd.B*float64(max(length[f], 0))/avg[f]
		}
		pseudo += fd.Weight * float64(tf[f]) / norm
	}
	if pseudo == 0 {
		return 0
	}
	return pseudo * (k1 + 1) / (k1 + pseudo)
}

// PhraseMatch reports whether words (lowercased, as Query's Words) occur
// consecutively in text, as whole words and in order, ignoring case and the
// punctuation between words. It is the match of a query made only of stop
// words.
func PhraseMatch(text string, words []string) bool {
	if len(words) == 0 {
		return false
	}
	var t tokenizer
	t.reset(text)
	var window []string
	for {
		w, _, ok := t.next()
		if !ok {
			return false
		}
		window = append(window, string(w))
		if len(window) > len(words) {
			window = window[1:]
		}
		if len(window) == len(words) {
			match := true
			for k := range words {
				if window[k] != words[k] {
					match = false
					break
				}
			}
			if match {
				return true
			}
		}
	}
}
