package pdf

import (
	"cmp"
	"context"
	"regexp"
	"slices"
	"strings"
	"unicode"

	pdfr "github.com/ledongthuc/pdf"
)

// The document outline (the bookmarks a viewer shows beside the pages) is
// the author's own table of contents: chapter, section, sub-section, in
// order. When a PDF has one, its entries decide which paragraphs are
// headings and at what level; font sizes alone cannot tell a chapter title
// from a sample set in a display font (the ReportLab user guide sets
// "SPUMONI" at 85 points on page 26, which font sizes make the document's
// top heading, above every chapter after it).

const (
	// outlineEntriesPerPage and maxOutlineEntries bound the outline walk: a
	// cycle of /Next or /First links (malformed, or hostile) would otherwise
	// never end. A real outline has a few bookmarks a page (the ReportLab
	// user guide: 104 over 134 pages); one cut short by the bound is not used.
	outlineEntriesPerPage = 8
	maxOutlineEntries     = 4 * MaxPages
	// maxOutlineDepth bounds its nesting for the same reason.
	maxOutlineDepth = 16
	// minOutlineEntries: a shorter outline (a single bookmark to the first
	// page) says nothing about the structure.
	minOutlineEntries = 3
)

// outlineEntry is one bookmark: its title's match key (see headingKey) and its
// depth, 1 for the top level.
type outlineEntry struct {
	key   string
	depth int
}

// readOutline returns the outline of a document of pages pages in order, or
// nil when there is none, it is too short, or it breaks a bound.
func readOutline(ctx context.Context, rd *pdfr.Reader, pages int) (out []outlineEntry) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	limit := min(outlineEntriesPerPage*pages+64, maxOutlineEntries)
	seen := 0
	var walk func(v pdfr.Value, depth int) bool
	walk = func(first pdfr.Value, depth int) bool {
		if depth > maxOutlineDepth {
			return false
		}
		for v := first; v.Kind() == pdfr.Dict; v = v.Key("Next") {
			if seen++; seen > limit || ctx.Err() != nil {
				return false
			}
			if k := headingKey(v.Key("Title").Text()); k != "" {
				out = append(out, outlineEntry{key: k, depth: depth})
			}
			if !walk(v.Key("First"), depth+1) {
				return false
			}
		}
		return true
	}
	if !walk(rd.Trailer().Key("Root").Key("Outlines").Key("First"), 1) || len(out) < minOutlineEntries {
		return nil
	}
	return out
}

// headingKey is what a heading and its bookmark are compared by: the letters
// and digits, lower-cased. Spacing, punctuation, quotes and the accents a
// text layer splits off as separate marks (the Debian FAQ's `stable' comes
// out as "\u0300stable’") differ between the two.
func headingKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
		}
		if b.Len() > 1024 {
			break
		}
	}
	return b.String()
}

// sectionNumber is a section number or label opening a heading: "1.2 ",
// "A.1 ", "Chapter 3 ", "Appendix B. ". Bookmarks often leave it out.
var sectionNumber = regexp.MustCompile(`^\s*((?i:chapter|appendix|part|section)\s+)?([0-9]{1,3}|[A-Z]|[IVXLC]{1,6})(\.[0-9]{1,3})*\.?(\s+|$)`)

// sectionLabel is a paragraph that only labels the heading after it: "Chapter
// 4", "Appendix A", or Sphinx's "CHAPTER" and "ONE" on lines of their own.
var sectionLabel = regexp.MustCompile(`^\s*(?i:(chapter|appendix|part|section)(\s+([0-9]{1,3}|[a-z]|[ivxlc]{1,6}|` + numberWords + `))?|[0-9]{1,3}(\.[0-9]{1,3})*|[ivxlc]{1,6}|` + numberWords + `)\.?\s*$`)

const numberWords = `one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty`

// titleKeys are the keys under which a paragraph may be a bookmark's title:
// as printed, and without its section number.
func titleKeys(text string) [2]string {
	return [2]string{headingKey(text), headingKey(sectionNumber.ReplaceAllString(text, ""))}
}

// outlineLevels assigns heading levels from the outline: a paragraph that is
// a bookmark's title (with or without its section number) is a heading at
// the bookmark's depth. A title printed more often than it is bookmarked
// (in the table of contents and then over its section, or in a running
// header) is the heading where it is printed largest, and of those where it
// is printed last, since the contents come first. Other paragraphs that
// look like headings (fontLevel > 0, see headingLevels) become headings below
// the outline's deepest level, in their font-size order: a display sample
// then heads at most the rest of its section, and a table of contents the
// outline does not list keeps its entries under its title. ok is false when
// there is no outline or too few of its bookmarks are found in the text (an
// outline of another edition, or titles the text layer spells differently):
// font sizes decide then.
func outlineLevels(all []pdfPara, outline []outlineEntry, fontLevel func(pdfPara) int) (levels []int, ok bool) {
	if len(outline) == 0 {
		return nil, false
	}
	depthOf := map[string]int{}
	want := map[string]int{} // how many times each title is bookmarked
	deepest := 0
	for _, e := range outline {
		if _, seen := depthOf[e.key]; !seen {
			depthOf[e.key] = min(e.depth, 5)
		}
		want[e.key]++
		deepest = max(deepest, min(e.depth, 5))
	}
	at := map[string][]int{} // the paragraphs that are each title
	for i, p := range all {
		if p.list || p.lines > 4 || len(p.text) > 400 {
			continue
		}
		for _, k := range titleKeys(p.text) {
			if _, found := depthOf[k]; found && k != "" {
				at[k] = append(at[k], i)
				break
			}
		}
	}
	levels = make([]int, len(all))
	found := 0
	for k, idx := range at {
		// the largest print first (a heading over a contents line or a
		// running header), then the last
		slices.SortStableFunc(idx, func(a, b int) int {
			if c := cmp.Compare(roundSize(all[b].size), roundSize(all[a].size)); c != 0 {
				return c
			}
			return cmp.Compare(b, a)
		})
		n := min(want[k], len(idx))
		found += n
		for _, i := range idx[:n] {
			levels[i] = depthOf[k]
		}
	}
	if 2*found < len(outline) {
		return nil, false
	}
	for i, p := range all {
		if levels[i] == 0 && fontLevel(p) > 0 {
			levels[i] = min(6, deepest+fontLevel(p))
		}
	}
	return levels, true
}

// isSectionLabel reports whether a paragraph is only a section label
// (sectionLabel).
func isSectionLabel(text string) bool {
	return strings.TrimSpace(text) != "" && sectionLabel.MatchString(text)
}

// labelsHeading reports whether paragraph i is a section label that, with at
// most two more labels after it ("CHAPTER", "ONE"), stands above a heading
// the outline placed (at a level above the label's own).
func labelsHeading(all []pdfPara, levels []int, i int) bool {
	if levels[i] == 0 || !isSectionLabel(all[i].text) {
		return false
	}
	for j := i + 1; j < len(all) && j <= i+3; j++ {
		switch {
		case levels[j] > 0 && levels[j] < levels[i]:
			return true
		case levels[j] == 0 || !isSectionLabel(all[j].text):
			return false
		}
	}
	return false
}
