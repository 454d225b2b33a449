package responses

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/edge/internal/vectorstores"
)

// Citations at the sentence: each file_citation annotation sits at the end
// of the answer sentence it supports (its index is the character position
// just past that sentence's final punctuation and [n] markers), and names
// the pages of the retrieved text that sentence matched.
//
// An answer sentence is supported by a retrieved chunk when it cites the
// chunk's source number ([n], as the prompt asks), or when its terms
// overlap the chunk's best-matching sentence enough (at least minShared
// terms and minCover of the answer sentence's terms); the best such chunk
// is cited. The pages are those of the chunk sentence(s) matched, when the
// chunk knows where its pages lie (ingest marks page breaks in the text,
// vectorstore.SplitPages), else the chunk's pages. An answer no sentence
// of which is supported cites every retrieved file once, at its end.

// Overlap thresholds of lexical support.
const (
	minShared = 2
	minCover  = 0.5
)

// span is the part [start, end) of a text, in bytes.
type span struct{ start, end int }

// sentences splits text at sentence ends (., !, ? and their CJK forms,
// followed by a space or the end, and line breaks); a sentence's end takes
// in the closing quotes, brackets and [n] markers right after it.
func sentences(text string) []span {
	var out []span
	start := -1
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		if start < 0 {
			if unicode.IsSpace(r) {
				i += n
				continue
			}
			start = i
		}
		i += n
		end := -1
		switch r {
		case '\n':
			end = i - n
		case '.', '!', '?':
			if i >= len(text) || isSpaceOrMarker(text[i:]) {
				end = extendEnd(text, i)
			}
		case '。', '！', '？':
			end = extendEnd(text, i)
		}
		if end >= 0 {
			if e := strings.TrimRightFunc(text[start:end], unicode.IsSpace); e != "" {
				out = append(out, span{start, start + len(e)})
			}
			start = -1
			i = max(i, end)
		}
	}
	if start >= 0 {
		if e := strings.TrimRightFunc(text[start:], unicode.IsSpace); e != "" {
			out = append(out, span{start, start + len(e)})
		}
	}
	return out
}

func isSpaceOrMarker(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return unicode.IsSpace(r) || strings.ContainsRune(`"')]”’[`, r)
}

// extendEnd moves a sentence end at i past closing quotes and brackets and
// [n] markers (with a space before them).
func extendEnd(text string, i int) int {
	for i < len(text) {
		switch {
		case strings.ContainsRune(`"')”’`, rune(text[i])) && text[i] < utf8.RuneSelf:
			i++
		case strings.HasPrefix(text[i:], "”") || strings.HasPrefix(text[i:], "’"):
			i += len("”")
		default:
			j := i
			if j < len(text) && text[j] == ' ' {
				j++
			}
			if k := markerEnd(text, j); k > j {
				i = k
				continue
			}
			return i
		}
	}
	return i
}

// markerEnd is the end of a [n] marker at text[i:], or i.
func markerEnd(text string, i int) int {
	if i >= len(text) || text[i] != '[' {
		return i
	}
	j := i + 1
	for j < len(text) && (text[j] >= '0' && text[j] <= '9' || text[j] == ',' || text[j] == ' ') {
		j++
	}
	if j < len(text) && text[j] == ']' && j > i+1 {
		return j + 1
	}
	return i
}

// markers are the source numbers a sentence cites ([1], [2, 3]), from 1.
func markers(s string) []int {
	var out []int
	for i := 0; i < len(s); i++ {
		if s[i] != '[' {
			continue
		}
		k := markerEnd(s, i)
		if k == i {
			continue
		}
		for _, f := range strings.FieldsFunc(s[i+1:k-1], func(r rune) bool { return r == ',' || r == ' ' }) {
			if n, err := strconv.Atoi(f); err == nil && n > 0 && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		i = k - 1
	}
	return out
}

var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an and are as at be been but by can could did do does for from had has have
		how i if in into is it its may me my no not of on or our shall should so than that the their them then there these
		they this those to too was we were what when where which while who why will with would you your yes also just only
		very more most any all each per via`) {
		m[w] = true
	}
	return m
}()

// terms are the distinct content words of s: lower-cased runs of letters
// and digits, without stop words and one-letter words, a plural s cut.
func terms(s string) map[string]bool {
	out := map[string]bool{}
	for _, f := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if utf8.RuneCountInString(f) < 2 || stopWords[f] {
			continue
		}
		if len(f) > 3 && strings.HasSuffix(f, "s") && !strings.HasSuffix(f, "ss") {
			f = f[:len(f)-1]
		}
		out[f] = true
	}
	return out
}

// chunkSentences are a retrieved chunk's sentences with their terms.
type chunkSentence struct {
	span
	terms map[string]bool
}

// match is how well an answer sentence's terms t are supported by chunk
// sentences cs: the shared terms and the cover of the best, and every
// sentence as good as the best (ties).
func match(t map[string]bool, cs []chunkSentence) (shared int, cover float64, best []span) {
	for _, c := range cs {
		n := 0
		for w := range t {
			if c.terms[w] {
				n++
			}
		}
		switch {
		case n == 0 || n < shared:
		case n > shared:
			shared, best = n, []span{c.span}
		default:
			best = append(best, c.span)
		}
	}
	if len(t) > 0 {
		cover = float64(shared) / float64(len(t))
	}
	return shared, cover, best
}

// placeCitations returns the annotations of text for the retrieved
// results (numbered from 1 in the prompt, in this order).
func placeCitations(text string, results []vectorstores.Result) []citation {
	type chunk struct {
		sents []chunkSentence
	}
	chunks := make([]chunk, len(results))
	for i, r := range results {
		t, _ := r.Text().(string)
		for _, s := range sentences(t) {
			chunks[i].sents = append(chunks[i].sents, chunkSentence{s, terms(t[s.start:s.end])})
		}
	}
	var out []citation
	for _, s := range sentences(text) {
		sent := text[s.start:s.end]
		t := terms(sent)
		cited := map[int][]span{} // result -> the chunk sentences it matched (nil: the whole chunk)
		for _, n := range markers(sent) {
			if n <= len(results) {
				_, _, best := match(t, chunks[n-1].sents)
				cited[n-1] = best
			}
		}
		if len(cited) == 0 {
			bestI, bestShared, bestCover := -1, 0, 0.0
			var bestSpans []span
			for i := range results {
				shared, cover, spans := match(t, chunks[i].sents)
				if shared >= minShared && cover >= minCover && (shared > bestShared || shared == bestShared && cover > bestCover) {
					bestI, bestShared, bestCover, bestSpans = i, shared, cover, spans
				}
			}
			if bestI >= 0 {
				cited[bestI] = bestSpans
			}
		}
		if len(cited) == 0 {
			continue
		}
		idx := utf8.RuneCountInString(text[:s.end])
		at := map[string]int{} // file -> its annotation at this sentence
		for i := range results {
			spans, ok := cited[i]
			if !ok {
				continue
			}
			r := results[i]
			pages := citedPages(r, spans)
			if j, ok := at[r.FileID]; ok {
				for _, p := range pages {
					out[j].Pages = appendUnique(out[j].Pages, p)
				}
				slices.Sort(out[j].Pages)
				continue
			}
			at[r.FileID] = len(out)
			out = append(out, citation{Type: "file_citation", Index: idx, FileID: r.FileID, Filename: r.Filename, Pages: pages})
		}
	}
	return out
}

// citedPages are the pages of r's text in spans (the chunk sentences an
// answer sentence matched), when the chunk knows its pages' spans; else
// all of r's pages.
func citedPages(r vectorstores.Result, spans []span) []int {
	if len(r.PageSpans) > 0 && len(spans) > 0 {
		var out []int
		for _, s := range spans {
			for _, p := range vectorstore.PagesOf(r.PageSpans, s.start, s.end) {
				out = appendUnique(out, p)
			}
		}
		slices.Sort(out)
		if len(out) > 0 {
			return out
		}
	}
	return slices.Clone(r.Pages)
}
