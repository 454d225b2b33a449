// Package textdoc is the document model every extractor builds: blocks
// with their heading path, the builder that keeps that path, text cleaning,
// and the errors extract reports. Package extract re-exports what callers
// see.
package textdoc

import (
	"errors"
	"fmt"
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

// Formats understood by extract.ForFormat and returned by extract.Sniff.
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

// ParseError reports a document that could not be parsed. It wraps the cause.
type ParseError struct {
	Format string
	Err    error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("extract: cannot parse %s document: %v", e.Format, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// NewParseError returns a *ParseError of format wrapping err.
func NewParseError(format string, err error) error {
	return &ParseError{Format: format, Err: err}
}

// CleanInline collapses all whitespace runs to single spaces, drops control
// characters and trims the result.
func CleanInline(s string) string {
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

// CleanPreformatted keeps line structure (for code and tables): it normalises
// line endings, strips control characters other than tab/newline, trims
// trailing spaces on each line and drops leading/trailing blank lines.
func CleanPreformatted(s string) string {
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

// Builder accumulates blocks and maintains the heading path.
type Builder struct {
	blocks []Block
	// stack of open headings: levels and texts, outermost first.
	levels []int
	texts  []string
	title  string
}

// Heading appends a heading block and makes it the innermost open heading.
func (b *Builder) Heading(level int, text string, page int) {
	text = CleanInline(text)
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

// Add appends a non-heading block. Inline kinds are whitespace-collapsed;
// code and table keep their line structure.
func (b *Builder) Add(kind, text string, page int) {
	if kind == KindCode || kind == KindTable || kind == KindList {
		text = CleanPreformatted(text)
		if kind == KindList {
			// collapse whitespace within each item line, keep one item per line
			lines := strings.Split(text, "\n")
			out := lines[:0]
			for _, l := range lines {
				if l = CleanInline(l); l != "" {
					out = append(out, l)
				}
			}
			text = strings.Join(out, "\n")
		}
	} else {
		text = CleanInline(text)
	}
	if strings.TrimSpace(text) == "" {
		return
	}
	b.blocks = append(b.blocks, Block{Text: text, Kind: kind, HeadingPath: b.path(), Page: page})
}

func (b *Builder) path() []string {
	if len(b.texts) == 0 {
		return nil
	}
	return append([]string(nil), b.texts...)
}

// Document returns the blocks as a document; ErrNoText when there are none.
// title, when empty, is the first heading.
func (b *Builder) Document(format string, pages int, title string) (*Document, error) {
	if title == "" {
		title = b.title
	}
	doc := &Document{Blocks: b.blocks, Pages: pages, Title: CleanInline(title), Format: format}
	if len(doc.Blocks) == 0 {
		return nil, ErrNoText
	}
	return doc, nil
}

// LimitError reports a document that broke one of the extraction limits.
// Limit names the limit (for example "pdf.max_stream_bytes"), Max its value
// and Detail what was seen. It wraps ErrTooLarge. A document that breaks a
// limit breaks it again on every attempt: callers fail it permanently.
type LimitError struct {
	Limit  string
	Max    int64
	Detail string
}

func (e *LimitError) Error() string {
	s := fmt.Sprintf("the document exceeds the extraction limit %s (%d)", e.Limit, e.Max)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *LimitError) Unwrap() error { return ErrTooLarge }

// Limit returns a *LimitError.
func Limit(limit string, max int64, detail string) error {
	return &LimitError{Limit: limit, Max: max, Detail: detail}
}
