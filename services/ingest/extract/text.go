package extract

import (
	"context"
	"io"
	"strings"

	"github.com/aiforge/aiforge/services/ingest/extract/internal/textdoc"
)

// Text extracts plain text: paragraphs are separated by blank lines.
type Text struct{}

// Extract implements Extractor.
func (Text) Extract(ctx context.Context, r io.ReaderAt, size int64) (*Document, error) {
	raw, err := readAllLimited(r, size, MaxTextBytes)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := decodeText(raw)
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	var b textdoc.Builder
	var para []string
	flush := func() {
		if len(para) > 0 {
			b.Add(KindParagraph, strings.Join(para, " "), 0)
			para = para[:0]
		}
	}
	for line := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		para = append(para, line)
	}
	flush()
	return b.Document(FormatText, 0, "")
}
