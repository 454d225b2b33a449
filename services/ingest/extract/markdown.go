package extract

import (
	"context"
	"io"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"
	"golang.org/x/net/html"

	"github.com/aiforge/aiforge/services/ingest/extract/internal/textdoc"
)

// Markdown extracts CommonMark/GFM documents using goldmark's parser (AST):
// headings, paragraphs, list items, code blocks and tables. Inline markup is
// dropped, the text is kept. A leading YAML front matter block is removed
// (its "title:" becomes the document title).
type Markdown struct{}

var mdParser = goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.TaskList)).Parser()

// Extract implements Extractor.
func (Markdown) Extract(ctx context.Context, r io.ReaderAt, size int64) (*Document, error) {
	raw, err := readAllLimited(r, size, MaxTextBytes)
	if err != nil {
		return nil, err
	}
	src := strings.ReplaceAll(decodeText(raw), "\r\n", "\n")
	body, title := stripFrontMatter(src)
	source := []byte(body)
	root := mdParser.Parse(text.NewReader(source))
	w := &mdWalker{src: source, ctx: ctx}
	w.walk(root, KindParagraph, 0)
	if w.err != nil {
		return nil, w.err
	}
	return w.b.Document(FormatMarkdown, 0, title)
}

// stripFrontMatter removes a leading "---" YAML block and returns its title.
func stripFrontMatter(s string) (body, title string) {
	if !strings.HasPrefix(s, "---\n") {
		return s, ""
	}
	end := strings.Index(s[4:], "\n---")
	if end < 0 {
		return s, ""
	}
	fm := s[4 : 4+end]
	rest := s[4+end+4:]
	if i := strings.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[i+1:]
	} else {
		rest = ""
	}
	for line := range strings.SplitSeq(fm, "\n") {
		if v, ok := strings.CutPrefix(line, "title:"); ok {
			title = strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return rest, title
}

type mdWalker struct {
	ctx   context.Context
	err   error
	src   []byte
	b     textdoc.Builder
	steps int
}

func (w *mdWalker) walk(n ast.Node, kind string, depth int) {
	if w.err != nil || depth > 256 {
		return
	}
	if w.steps++; w.steps%4096 == 0 {
		if err := w.ctx.Err(); err != nil {
			w.err = err
			return
		}
	}
	switch n := n.(type) {
	case *ast.Heading:
		w.b.Heading(n.Level, w.inline(n), 0)
		return
	case *ast.Paragraph, *ast.TextBlock:
		w.b.Add(kind, w.inline(n), 0)
		return
	case *ast.FencedCodeBlock:
		w.b.Add(KindCode, w.lines(n), 0)
		return
	case *ast.CodeBlock:
		w.b.Add(KindCode, w.lines(n), 0)
		return
	case *ast.HTMLBlock:
		frag := w.lines(n)
		if doc, err := html.Parse(strings.NewReader(frag)); err == nil {
			w.b.Add(kind, textContent(doc), 0)
		}
		return
	case *east.Table:
		w.b.Add(KindTable, w.table(n), 0)
		return
	case *ast.ThematicBreak:
		return
	case *ast.ListItem:
		kind = KindList
	}
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		w.walk(c, kind, depth+1)
	}
}

func (w *mdWalker) lines(n ast.Node) string {
	var sb strings.Builder
	l := n.Lines()
	for i := 0; i < l.Len(); i++ {
		seg := l.At(i)
		sb.Write(seg.Value(w.src))
	}
	return sb.String()
}

// inline renders the inline children of n as plain text.
func (w *mdWalker) inline(n ast.Node) string {
	var sb strings.Builder
	var rec func(ast.Node, int)
	rec = func(n ast.Node, depth int) {
		if depth > 256 {
			return
		}
		for c := n.FirstChild(); c != nil; c = c.NextSibling() {
			switch c := c.(type) {
			case *ast.Text:
				sb.Write(c.Value(w.src))
				if c.HardLineBreak() {
					sb.WriteByte('\n')
				} else if c.SoftLineBreak() {
					sb.WriteByte(' ')
				}
			case *ast.String:
				sb.Write(c.Value)
			case *ast.AutoLink:
				sb.Write(c.Label(w.src))
			case *ast.RawHTML:
				// inline tags carry no text
			default:
				rec(c, depth+1)
			}
		}
	}
	rec(n, 0)
	return sb.String()
}

func (w *mdWalker) table(t *east.Table) string {
	var rows []string
	for r := t.FirstChild(); r != nil; r = r.NextSibling() {
		var cells []string
		for c := r.FirstChild(); c != nil; c = c.NextSibling() {
			cells = append(cells, textdoc.CleanInline(w.inline(c)))
		}
		if strings.TrimSpace(strings.Join(cells, "")) != "" {
			rows = append(rows, strings.Join(cells, " | "))
		}
	}
	return strings.Join(rows, "\n")
}
