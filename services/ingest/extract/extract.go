// Package extract turns uploaded documents (PDF, HTML, Markdown, plain text,
// DOCX) into a flat list of structured text blocks: headings, paragraphs,
// lists, tables and code, each carrying the path of headings above it and,
// for paginated formats, the page it came from.
//
// Every extractor sits behind the Extractor interface so that a stronger
// implementation (for example an OCR or layout-model backed PDF extractor) can
// replace one format without touching callers. Extractors never panic on
// malformed input: they return an error that wraps the cause.
package extract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Block kinds.
const (
	KindHeading   = "heading"
	KindParagraph = "paragraph"
	KindList      = "list"
	KindTable     = "table"
	KindCode      = "code"
)

// Formats understood by ForFormat and returned by Sniff.
const (
	FormatPDF      = "pdf"
	FormatHTML     = "html"
	FormatMarkdown = "markdown"
	FormatText     = "text"
	FormatDOCX     = "docx"
)

// Block is one unit of document structure.
type Block struct {
	Text        string
	Kind        string   // "heading", "paragraph", "list", "table", "code"
	Level       int      // heading level 1-6 (0 for other kinds)
	HeadingPath []string // the headings above this block, outermost first (for headings: the path including itself)
	Page        int      // 1-based page for PDF, 0 otherwise
}

// Document is the result of an extraction.
type Document struct {
	Blocks []Block
	Pages  int    // number of pages for paginated formats, 0 otherwise
	Title  string // document title when one is known (metadata or first heading)
	Format string // one of the Format constants
	// Warnings lists non-fatal problems (for example PDF pages that could
	// not be read completely); the blocks hold what could be extracted.
	Warnings []string
}

// Extractor parses one document format.
type Extractor interface {
	Extract(ctx context.Context, r io.ReaderAt, size int64) (*Document, error)
}

var (
	// ErrUnsupported: the format is not one ingest can parse.
	ErrUnsupported = errors.New("unsupported document format (supported: pdf, html, markdown, text, docx)")
	// ErrEncrypted: the document is password protected.
	ErrEncrypted = errors.New("the document is encrypted (password protected); remove the protection and upload it again")
	// ErrNoText: the document parsed but holds no extractable text.
	ErrNoText = errors.New("the document has no extractable text")
	// ErrTooLarge: a size limit was hit (decompressed size, page count, text size).
	ErrTooLarge = errors.New("the document exceeds an extraction size limit")
)

// errNoTextLayer is ErrNoText with the PDF-specific explanation.
var errNoTextLayer = fmt.Errorf("%w: the PDF has no text layer (scanned?)", ErrNoText)

// Limits shared by the extractors. They bound memory and time on hostile input.
const (
	// MaxTextBytes bounds the text read from text-like formats (HTML, Markdown, text).
	MaxTextBytes = 64 << 20
	// MaxDecompressed bounds the total decompressed size read from a DOCX archive.
	MaxDecompressed = 200 << 20
	// MaxPDFPages bounds the number of PDF pages processed.
	MaxPDFPages = 20000
)

// ForFormat returns the extractor for a format name ("pdf", "html", "markdown",
// "text", "docx"; a few aliases such as "md" and "txt" are accepted).
func ForFormat(format string) (Extractor, bool) {
	switch strings.ToLower(strings.TrimSpace(format)) {
	case FormatPDF:
		return PDF{}, true
	case FormatHTML, "htm":
		return HTML{}, true
	case FormatMarkdown, "md":
		return Markdown{}, true
	case FormatText, "txt", "plain":
		return Text{}, true
	case FormatDOCX:
		return DOCX{}, true
	}
	return nil, false
}

// Sniff names the format of a document from its first bytes and, failing
// that, from its file name. It returns "" when the format is not supported.
//
// Pass at least the first 4 KiB (or the whole file): a DOCX is recognised
// by the name of a "word/" entry in a zip local header, which follows the
// [Content_Types].xml entry; with a shorter head a zip is still taken as
// DOCX when the name ends in .docx.
func Sniff(name string, head []byte) string {
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")
	switch {
	case bytes.HasPrefix(head, []byte("%PDF-")):
		return FormatPDF
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		if bytes.Contains(head, []byte("word/document.xml")) || bytes.Contains(head, []byte("word/")) {
			return FormatDOCX
		}
		if strings.EqualFold(path.Ext(name), ".docx") {
			return FormatDOCX
		}
		return "" // some other zip (xlsx, odt, jar ...)
	case hasPrefixFold(trimmed, "<!doctype html"), hasPrefixFold(trimmed, "<html"):
		return FormatHTML
	}
	switch strings.ToLower(path.Ext(name)) {
	case ".md", ".markdown":
		return FormatMarkdown
	case ".txt", ".text":
		return FormatText
	case ".html", ".htm", ".xhtml":
		return FormatHTML
	case ".docx":
		return FormatDOCX
	case ".pdf":
		return FormatPDF
	}
	return ""
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

// readAllLimited reads a whole ReaderAt up to limit bytes.
func readAllLimited(r io.ReaderAt, size, limit int64) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("extract: negative size %d", size)
	}
	if size > limit {
		return nil, fmt.Errorf("%w: %d bytes of text (limit %d)", ErrTooLarge, size, limit)
	}
	buf := make([]byte, size)
	n, err := r.ReadAt(buf, 0)
	if err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
		return nil, fmt.Errorf("extract: read: %w", err)
	}
	return buf, nil
}

// decodeText turns raw bytes into valid UTF-8: strips a UTF-8 BOM, decodes
// UTF-16 with a BOM, and replaces invalid sequences (treating them as
// Latin-1 when the whole input is not UTF-8).
func decodeText(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\xef\xbb\xbf")):
		b = b[3:]
	case bytes.HasPrefix(b, []byte("\xff\xfe")), bytes.HasPrefix(b, []byte("\xfe\xff")):
		le := b[0] == 0xff
		b = b[2:]
		runes := make([]rune, 0, len(b)/2)
		u := make([]uint16, 0, len(b)/2)
		for i := 0; i+1 < len(b); i += 2 {
			if le {
				u = append(u, uint16(b[i])|uint16(b[i+1])<<8)
			} else {
				u = append(u, uint16(b[i])<<8|uint16(b[i+1]))
			}
		}
		for i := 0; i < len(u); i++ {
			c := rune(u[i])
			if c >= 0xd800 && c < 0xdc00 && i+1 < len(u) && u[i+1] >= 0xdc00 && u[i+1] < 0xe000 {
				c = (c-0xd800)<<10 | (rune(u[i+1]) - 0xdc00) + 0x10000
				i++
			}
			runes = append(runes, c)
		}
		return string(runes)
	}
	if utf8.Valid(b) {
		return string(b)
	}
	// Not UTF-8: assume Windows-1252/Latin-1, the usual culprit.
	var sb strings.Builder
	sb.Grow(len(b))
	for _, c := range b {
		sb.WriteRune(rune(c))
	}
	return sb.String()
}

// cleanInline collapses all whitespace runs to single spaces, drops control
// characters and trims the result.
func cleanInline(s string) string {
	var sb strings.Builder
	sb.Grow(len(s))
	space := false
	for _, r := range s {
		switch {
		case r == utf8.RuneError || r == 0xfeff || r == 0x00ad: // replacement, BOM/ZWNBSP, soft hyphen
			continue
		case unicode.IsSpace(r):
			space = true
			continue
		case unicode.IsControl(r):
			continue
		}
		if space && sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		space = false
		sb.WriteRune(r)
	}
	return sb.String()
}

// cleanPreformatted keeps line structure (for code and tables): it normalises
// line endings, strips control characters other than tab/newline, trims
// trailing spaces on each line and drops leading/trailing blank lines.
func cleanPreformatted(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		l = strings.Map(func(r rune) rune {
			if r == '\t' {
				return r
			}
			if r == utf8.RuneError || unicode.IsControl(r) {
				return -1
			}
			return r
		}, l)
		lines[i] = strings.TrimRightFunc(l, unicode.IsSpace)
	}
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// builder accumulates blocks and maintains the heading path.
type builder struct {
	blocks []Block
	// stack of open headings: levels and texts, outermost first.
	levels []int
	texts  []string
	title  string
}

func (b *builder) heading(level int, text string, page int) {
	text = cleanInline(text)
	if text == "" {
		return
	}
	level = max(1, min(6, level))
	for len(b.levels) > 0 && b.levels[len(b.levels)-1] >= level {
		b.levels = b.levels[:len(b.levels)-1]
		b.texts = b.texts[:len(b.texts)-1]
	}
	b.levels = append(b.levels, level)
	b.texts = append(b.texts, text)
	if b.title == "" {
		b.title = text
	}
	b.blocks = append(b.blocks, Block{
		Text: text, Kind: KindHeading, Level: level, HeadingPath: b.path(), Page: page,
	})
}

// add appends a non-heading block. Inline kinds are whitespace-collapsed;
// code and table keep their line structure.
func (b *builder) add(kind, text string, page int) {
	if kind == KindCode || kind == KindTable || kind == KindList {
		text = cleanPreformatted(text)
		if kind == KindList {
			// collapse whitespace within each item line, keep one item per line
			lines := strings.Split(text, "\n")
			out := lines[:0]
			for _, l := range lines {
				if l = cleanInline(l); l != "" {
					out = append(out, l)
				}
			}
			text = strings.Join(out, "\n")
		}
	} else {
		text = cleanInline(text)
	}
	if strings.TrimSpace(text) == "" {
		return
	}
	b.blocks = append(b.blocks, Block{Text: text, Kind: kind, HeadingPath: b.path(), Page: page})
}

func (b *builder) path() []string {
	if len(b.texts) == 0 {
		return nil
	}
	return append([]string(nil), b.texts...)
}

func (b *builder) document(format string, pages int, title string) (*Document, error) {
	if title == "" {
		title = b.title
	}
	doc := &Document{Blocks: b.blocks, Pages: pages, Title: cleanInline(title), Format: format}
	if len(doc.Blocks) == 0 {
		return nil, ErrNoText
	}
	return doc, nil
}
