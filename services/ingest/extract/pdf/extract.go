// Package pdf is extract's PDF extractor: the text layer of a PDF, with
// positioned glyphs joined into lines and paragraphs, headings from the
// document outline or inferred from font size and weight, and running headers
// and page numbers dropped.
package pdf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	pdfr "github.com/ledongthuc/pdf"

	"github.com/aiforge/aiforge/services/ingest/extract/internal/textdoc"
)

// Extractor extracts the text layer of PDF files with
// github.com/ledongthuc/pdf (BSD licence; unidoc/unipdf needs a commercial
// licence).
//
// ledongthuc parses the file structure, decrypts (RC4/AES-128 with an empty
// user password), decompresses and tokenises content streams and decodes font
// encodings. Text positioning is done here (see text.go): ledongthuc's
// Page.Content reports width 0 for glyphs of the standard fonts written
// without /Widths and of every composite (CID) font, so words run together.
//
// Blocks carry their 1-based page. Headings and their levels come from the
// document outline (the bookmarks) when the PDF has one that its text
// matches (see outlineLevels); otherwise, and for headings the outline does
// not list, they are inferred from font size (larger than the body text) and
// weight. Running headers, footers and page numbers repeated across pages are
// dropped.
//
// Errors (as package extract exports them): ErrEncrypted for
// password-protected files and encryption ledongthuc cannot read (AES-256);
// ErrNoText (with "the PDF has no text layer (scanned?)") when no page has
// text; a *ParseError for malformed files.
// ledongthuc panics on some malformed inputs: every call into it runs under
// recover, and the whole extraction runs in its own goroutine so that a
// cancelled context returns promptly even if the parser is stuck.
type Extractor struct{}

// MaxPages bounds the number of PDF pages processed.
const MaxPages = 20000

// maxPageTreeDepth bounds the page tree's depth: a balanced tree of
// MaxPages pages is a few levels deep; a cycle is infinitely deep.
const maxPageTreeDepth = 64

// errNoTextLayer is ErrNoText with the PDF-specific explanation.
var errNoTextLayer = fmt.Errorf("%w: the PDF has no text layer (scanned?)", textdoc.ErrNoText)

// Extract implements extract.Extractor.
func (Extractor) Extract(ctx context.Context, r io.ReaderAt, size int64) (*textdoc.Document, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type result struct {
		doc *textdoc.Document
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var res result
		defer func() {
			if p := recover(); p != nil {
				res = result{nil, textdoc.NewParseError("PDF", fmt.Errorf("parser panic: %v\n%s", p, firstLines(debug.Stack(), 12)))}
			}
			ch <- res
		}()
		res.doc, res.err = extractPDF(ctx, r, size)
	}()
	select {
	case res := <-ch:
		return res.doc, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func firstLines(b []byte, n int) string {
	lines := bytes.SplitN(b, []byte("\n"), n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// headerPatch presents a "%PDF-1.7" header to ledongthuc, which refuses
// PDF 2.0 files and headers not followed directly by an end of line, although
// the header line plays no part in parsing the body.
type headerPatch struct {
	r     io.ReaderAt
	patch []byte
}

func (h headerPatch) ReadAt(p []byte, off int64) (int, error) {
	n, err := h.r.ReadAt(p, off)
	for i := 0; i < n; i++ {
		if o := off + int64(i); o < int64(len(h.patch)) {
			p[i] = h.patch[o]
		}
	}
	return n, err
}

func extractPDF(ctx context.Context, r io.ReaderAt, size int64) (*textdoc.Document, error) {
	head := make([]byte, 9)
	if n, _ := r.ReadAt(head, 0); n < 9 || !bytes.HasPrefix(head, []byte("%PDF-")) {
		return nil, textdoc.NewParseError("PDF", errors.New("not a PDF file: missing %PDF- header"))
	}
	if err := prescan(ctx, r, size, DefaultLimits); err != nil {
		return nil, err
	}
	src := r
	if !(head[5] == '1' && head[6] == '.' && head[7] >= '0' && head[7] <= '7' && (head[8] == '\r' || head[8] == '\n')) {
		src = headerPatch{r: r, patch: []byte("%PDF-1.7\n")}
	}
	rd, err := pdfr.NewReader(src, size)
	if err != nil {
		if errors.Is(err, pdfr.ErrInvalidPassword) || strings.Contains(strings.ToLower(err.Error()), "encrypt") || hasEncryptDict(r, size) {
			return nil, fmt.Errorf("%w (%v)", textdoc.ErrEncrypted, err)
		}
		return nil, textdoc.NewParseError("PDF", err)
	}
	pages, err := collectPages(rd)
	if err != nil {
		return nil, err
	}
	check := ctx.Err
	var (
		paras   [][]pdfPara
		pageErr error
		errs    int
	)
	for i, pg := range pages {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		glyphs, err := walkPage(pg, check)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil, err
			}
			errs++
			if pageErr == nil {
				pageErr = fmt.Errorf("page %d: %w", i+1, err)
			}
		}
		paras = append(paras, buildParagraphs(buildLines(glyphs), i+1))
	}
	resolveHyphens(paras)
	removeRunningHeaders(paras, bodySize(paras))

	var all []pdfPara
	for _, ps := range paras {
		all = append(all, ps...)
	}
	if len(all) == 0 {
		if !rd.Trailer().Key("Encrypt").IsNull() {
			// ledongthuc opened the file with the empty user password but
			// could not decrypt it: it derives RC4 object keys without the
			// truncation to n+5 bytes the standard requires, so 40-bit RC4
			// files (the classic "owner password only" protection) fail.
			cause := "no text after decryption"
			if pageErr != nil {
				cause = pageErr.Error()
			}
			return nil, fmt.Errorf("%w (its encryption is not supported by the PDF reader: %s)", textdoc.ErrEncrypted, cause)
		}
		if pageErr != nil {
			return nil, textdoc.NewParseError("PDF", pageErr)
		}
		return nil, errNoTextLayer
	}
	fontLevel := headingLevels(all)
	levels, fromOutline := outlineLevels(all, readOutline(ctx, rd, len(pages)), fontLevel)
	if !fromOutline {
		levels = make([]int, len(all))
		for i, p := range all {
			levels[i] = fontLevel(p)
		}
	}
	var b textdoc.Builder
	label := ""
	for i, p := range all {
		switch lvl := levels[i]; {
		case fromOutline && labelsHeading(all, levels, i):
			// "Chapter 4" printed above the title the outline knows: one heading
			label += p.text + " "
		case lvl > 0:
			b.Heading(lvl, label+p.text, p.page)
			label = ""
		case p.list:
			b.Add(textdoc.KindList, p.text, p.page)
		default:
			b.Add(textdoc.KindParagraph, p.text, p.page)
		}
	}
	doc, err := b.Document(textdoc.FormatPDF, len(pages), pdfTitle(rd))
	if err != nil {
		return nil, errNoTextLayer
	}
	if errs > 0 {
		doc.Warnings = append(doc.Warnings, fmt.Sprintf("%d of %d pages could not be read completely; first problem: %v", errs, len(pages), pageErr))
	}
	return doc, nil
}

// hasEncryptDict reports whether the file's trailer area names an /Encrypt
// dictionary (used only to classify an open failure).
func hasEncryptDict(r io.ReaderAt, size int64) bool {
	const tail = 1 << 20
	off := max(0, size-tail)
	buf := make([]byte, size-off)
	n, _ := r.ReadAt(buf, off)
	return bytes.Contains(buf[:n], []byte("/Encrypt"))
}

// collectPages walks the page tree once (pdfr.Reader.Page walks it from the
// root for every page and trusts /Count), bounded in depth and size so that
// cycles and absurd counts cannot hang the walk.
func collectPages(rd *pdfr.Reader) (pages []pdfr.Value, err error) {
	defer func() {
		if p := recover(); p != nil {
			pages, err = nil, textdoc.NewParseError("PDF", fmt.Errorf("page tree: %v", p))
		}
	}()
	root := rd.Trailer().Key("Root").Key("Pages")
	if root.IsNull() {
		return nil, textdoc.NewParseError("PDF", errors.New("no page tree (missing /Root /Pages)"))
	}
	visited := 0
	var walk func(v pdfr.Value, depth int) error
	walk = func(v pdfr.Value, depth int) error {
		if visited++; visited > 4*MaxPages {
			return textdoc.Limit("pdf.max_page_tree_nodes", 4*MaxPages, "page tree nodes (a cycle?)")
		}
		if depth > maxPageTreeDepth {
			return textdoc.Limit("pdf.max_page_tree_depth", maxPageTreeDepth, "a deeper page tree (a cycle?)")
		}
		kids := v.Key("Kids")
		if v.Key("Type").Name() == "Page" || (kids.Kind() != pdfr.Array && !v.Key("Contents").IsNull()) {
			if len(pages) >= MaxPages {
				return textdoc.Limit("pdf.max_pages", MaxPages, "more pages")
			}
			pages = append(pages, v)
			return nil
		}
		for i := 0; i < kids.Len(); i++ {
			if err := walk(kids.Index(i), depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root, 0); err != nil {
		return nil, err
	}
	if len(pages) == 0 {
		return nil, textdoc.NewParseError("PDF", errors.New("the page tree holds no pages"))
	}
	return pages, nil
}

func pdfTitle(rd *pdfr.Reader) (title string) {
	defer func() {
		if recover() != nil {
			title = ""
		}
	}()
	t := textdoc.CleanInline(rd.Trailer().Key("Info").Key("Title").Text())
	t = strings.TrimPrefix(t, "Microsoft Word - ")
	if strings.EqualFold(t, "untitled") {
		return ""
	}
	return t
}

var pageNumberRE = regexp.MustCompile(`(?i)^(page\s*)?[0-9]{1,5}(\s*(of|/)\s*[0-9]{1,5})?$|^[-–]\s*[0-9]{1,5}\s*[-–]$`)

func roundSize(s float64) float64 { return math.Round(s*2) / 2 }

// bodySize is the font size carrying the most characters.
func bodySize(pages [][]pdfPara) float64 {
	weight := map[float64]int{}
	for _, ps := range pages {
		for _, p := range ps {
			weight[roundSize(p.size)] += utf8.RuneCountInString(p.text)
		}
	}
	body, best := 0.0, -1
	for s, w := range weight {
		if w > best || (w == best && s < body) {
			body, best = s, w
		}
	}
	return body
}

// removeRunningHeaders drops page numbers and running headers and footers:
// short paragraphs at the top or bottom of a page, not set larger than the
// body text, whose text (with the page number masked) repeats on most pages.
func removeRunningHeaders(pages [][]pdfPara, body float64) {
	key := func(p pdfPara) string {
		num := strconv.Itoa(p.page)
		fields := strings.Fields(strings.ToLower(p.text))
		for i, f := range fields {
			if strings.Trim(f, "-–()[]|.,:") == num {
				fields[i] = "#"
			}
		}
		return strings.Join(fields, " ")
	}
	candidate := func(ps []pdfPara, i int) bool {
		return (i < 2 || i >= len(ps)-2) && utf8.RuneCountInString(ps[i].text) <= 200 && roundSize(ps[i].size) <= body*1.05
	}
	counts := map[string]int{}
	for _, ps := range pages {
		seen := map[string]bool{}
		for i := range ps {
			if candidate(ps, i) {
				k := key(ps[i])
				if !seen[k] {
					seen[k] = true
					counts[k]++
				}
			}
		}
	}
	threshold := max(3, (len(pages)+1)/2)
	for pi, ps := range pages {
		out := ps[:0]
		for i, p := range ps {
			if candidate(ps, i) && (pageNumberRE.MatchString(p.text) || (len(pages) >= 3 && counts[key(p)] >= threshold)) {
				continue
			}
			out = append(out, p)
		}
		pages[pi] = out
	}
}

// headingLevels infers heading levels from font sizes: the body size is the
// size carrying the most characters; short paragraphs set clearly larger are
// headings, the largest size being level 1; short bold lines at body size are
// the lowest heading level.
func headingLevels(all []pdfPara) func(pdfPara) int {
	round := roundSize
	body := bodySize([][]pdfPara{all})
	isCandidate := func(p pdfPara) bool {
		n := utf8.RuneCountInString(p.text)
		return !p.list && p.lines <= 3 && n <= 200 && round(p.size) >= body*1.15
	}
	var sizes []float64
	for _, p := range all {
		if isCandidate(p) && !slices.Contains(sizes, round(p.size)) {
			sizes = append(sizes, round(p.size))
		}
	}
	slices.Sort(sizes)
	slices.Reverse(sizes)
	return func(p pdfPara) int {
		if isCandidate(p) {
			return min(6, slices.Index(sizes, round(p.size))+1)
		}
		if p.bold && !p.list && p.lines == 1 && utf8.RuneCountInString(p.text) <= 100 && sameSize(p.size, body) &&
			!strings.ContainsAny(p.text[len(p.text)-1:], ".,;:") {
			return min(6, len(sizes)+1)
		}
		return 0
	}
}
