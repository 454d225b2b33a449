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
	"unicode/utf8"

	"github.com/aiforge/aiforge/services/ingest/extract/internal/textdoc"
	"github.com/aiforge/aiforge/services/ingest/extract/pdf"
)

// Block kinds.
const (
	KindHeading   = textdoc.KindHeading
	KindParagraph = textdoc.KindParagraph
	KindList      = textdoc.KindList
	KindTable     = textdoc.KindTable
	KindCode      = textdoc.KindCode
)

// Formats understood by ForFormat and returned by Sniff.
const (
	FormatPDF      = textdoc.FormatPDF
	FormatHTML     = textdoc.FormatHTML
	FormatMarkdown = textdoc.FormatMarkdown
	FormatText     = textdoc.FormatText
	FormatDOCX     = textdoc.FormatDOCX
)

type (
	// Block is one unit of document structure: Text, Kind, Level (heading
	// level 1-6, 0 for other kinds), HeadingPath (the headings above it,
	// outermost first; for headings the path including itself) and Page
	// (1-based for PDF, 0 otherwise).
	Block = textdoc.Block
	// Document is the result of an extraction: Blocks, Pages (paginated
	// formats), Title, Format and Warnings (non-fatal problems).
	Document = textdoc.Document
	// ParseError reports a document that could not be parsed. It wraps the
	// cause.
	ParseError = textdoc.ParseError
	// PDF extracts the text layer of PDF files (package extract/pdf).
	PDF = pdf.Extractor
	// LimitError reports a document that broke an extraction limit: Limit
	// names it, Max is its value. It wraps ErrTooLarge.
	LimitError = textdoc.LimitError
)

// Extractor parses one document format.
type Extractor interface {
	Extract(ctx context.Context, r io.ReaderAt, size int64) (*Document, error)
}

var (
	// ErrUnsupported: the format is not one ingest can parse.
	ErrUnsupported = textdoc.ErrUnsupported
	// ErrEncrypted: the document is password protected.
	ErrEncrypted = textdoc.ErrEncrypted
	// ErrNoText: the document parsed but holds no extractable text.
	ErrNoText = textdoc.ErrNoText
	// ErrTooLarge: a size limit was hit (decompressed size, page count, text size).
	ErrTooLarge = textdoc.ErrTooLarge
)

// Limits shared by the extractors. They bound memory and time on hostile input.
const (
	// MaxTextBytes bounds the text read from text-like formats (HTML, Markdown, text).
	MaxTextBytes = 64 << 20
	// MaxDecompressed bounds the total decompressed size read from a DOCX archive.
	MaxDecompressed = 200 << 20
	// MaxPDFPages bounds the number of PDF pages processed.
	MaxPDFPages = pdf.MaxPages
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
		return nil, textdoc.Limit("text.max_bytes", limit, fmt.Sprintf("%d bytes of text", size))
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
