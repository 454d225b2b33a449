package vectorstore

import "strings"

// PageBreak marks, in a chunk's text (events.DocChunk.Text), where the
// text of one page ends and the next page's begins: ingest writes it
// before the separator of the first block of each further page of a
// chunk, so that the pages of any part of a chunk are known without a
// field beside the text (the chunk is stored as it is by every index
// backend). It is a form feed, the page break of plain text (pdftotext
// writes one between pages): whitespace to the tokenizers and analyzers.
// Readers show the text without it (SplitPages).
const PageBreak = "\f"

// PageSpan is the part [Start, End) of a chunk's clean text (bytes) that
// came from Page.
type PageSpan struct {
	Start, End int
	Page       int
}

// SplitPages returns text without its page breaks, and the span of each of
// pages (the chunk's distinct, ascending pages) in it: the i-th part
// between breaks is the i-th page. spans is nil when the breaks do not
// match the pages (a chunk written before page breaks were, or a text
// without pages): the pages of its parts are then not known.
func SplitPages(text string, pages []int) (clean string, spans []PageSpan) {
	if !strings.Contains(text, PageBreak) {
		if len(pages) == 1 {
			return text, []PageSpan{{0, len(text), pages[0]}}
		}
		return text, nil
	}
	parts := strings.Split(text, PageBreak)
	clean = strings.Join(parts, "")
	if len(parts) != len(pages) {
		return clean, nil
	}
	spans = make([]PageSpan, len(parts))
	at := 0
	for i, p := range parts {
		spans[i] = PageSpan{Start: at, End: at + len(p), Page: pages[i]}
		at += len(p)
	}
	return clean, spans
}

// PagesOf returns the pages of spans that overlap [start, end), in order.
func PagesOf(spans []PageSpan, start, end int) []int {
	var out []int
	for _, s := range spans {
		if s.Start < end && start < s.End {
			out = append(out, s.Page)
		}
	}
	return out
}
