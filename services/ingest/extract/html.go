package extract

import (
	"context"
	"io"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/aiforge/aiforge/services/ingest/extract/internal/textdoc"
)

// HTML extracts text from HTML with golang.org/x/net/html. Script, style,
// navigation, footer and similar chrome are skipped; h1-h6 build the heading
// path; p, li, pre, blockquote and other block containers become blocks; a
// table becomes one table block with one line per row and cells separated by
// " | ".
type HTML struct{}

// Extract implements Extractor.
func (HTML) Extract(ctx context.Context, r io.ReaderAt, size int64) (*Document, error) {
	raw, err := readAllLimited(r, size, MaxTextBytes)
	if err != nil {
		return nil, err
	}
	root, err := html.Parse(strings.NewReader(decodeText(raw)))
	if err != nil {
		return nil, textdoc.NewParseError("HTML", err)
	}
	w := &htmlWalker{ctx: ctx}
	w.walk(root, 0)
	w.flush()
	if w.err != nil {
		return nil, w.err
	}
	return w.b.Document(FormatHTML, 0, w.title)
}

type htmlWalker struct {
	ctx   context.Context
	err   error
	b     textdoc.Builder
	buf   strings.Builder
	kinds []string // open block containers (innermost last)
	title string
	steps int
}

// maxHTMLDepth bounds recursion on pathological nesting (the parser itself
// caps depth, this is belt and braces).
const maxHTMLDepth = 512

func skipHTML(n *html.Node) bool {
	switch n.DataAtom {
	case atom.Script, atom.Style, atom.Nav, atom.Footer, atom.Noscript, atom.Template,
		atom.Svg, atom.Math, atom.Iframe, atom.Object, atom.Embed, atom.Canvas,
		atom.Button, atom.Select, atom.Textarea, atom.Input, atom.Head:
		return true
	}
	if n.Type == html.ElementNode {
		for _, a := range n.Attr {
			if a.Key == "hidden" || (a.Key == "aria-hidden" && a.Val == "true") {
				return true
			}
		}
	}
	return false
}

func headingLevel(a atom.Atom) int {
	switch a {
	case atom.H1:
		return 1
	case atom.H2:
		return 2
	case atom.H3:
		return 3
	case atom.H4:
		return 4
	case atom.H5:
		return 5
	case atom.H6:
		return 6
	}
	return 0
}

func isBlockContainer(a atom.Atom) bool {
	switch a {
	case atom.P, atom.Li, atom.Div, atom.Section, atom.Article, atom.Main, atom.Header, atom.Aside,
		atom.Blockquote, atom.Dl, atom.Dt, atom.Dd, atom.Ul, atom.Ol, atom.Figure, atom.Figcaption,
		atom.Address, atom.Form, atom.Fieldset, atom.Details, atom.Summary, atom.Body, atom.Hr, atom.Center:
		return true
	}
	return false
}

func (w *htmlWalker) walk(n *html.Node, depth int) {
	if w.err != nil || depth > maxHTMLDepth {
		return
	}
	if w.steps++; w.steps%4096 == 0 {
		if err := w.ctx.Err(); err != nil {
			w.err = err
			return
		}
	}
	switch n.Type {
	case html.TextNode:
		w.buf.WriteString(n.Data)
		return
	case html.DocumentNode:
		// <title> sits in <head>, which is otherwise skipped.
		if t := findFirst(n, atom.Title); t != nil {
			w.title = textdoc.CleanInline(textContent(t))
		}
	case html.ElementNode:
		if skipHTML(n) {
			return
		}
		if lvl := headingLevel(n.DataAtom); lvl > 0 {
			w.flush()
			w.b.Heading(lvl, textContent(n), 0)
			return
		}
		switch n.DataAtom {
		case atom.Pre:
			w.flush()
			w.b.Add(KindCode, textContent(n), 0)
			return
		case atom.Table:
			w.flush()
			w.b.Add(KindTable, tableText(n), 0)
			return
		case atom.Br:
			w.buf.WriteByte('\n')
			return
		case atom.Img:
			return
		}
		if isBlockContainer(n.DataAtom) {
			w.flush()
			kind := KindParagraph
			if n.DataAtom == atom.Li || n.DataAtom == atom.Dt || n.DataAtom == atom.Dd {
				kind = KindList
			}
			w.kinds = append(w.kinds, kind)
			defer func() {
				w.flush()
				w.kinds = w.kinds[:len(w.kinds)-1]
			}()
		}
	default:
		return // comments, doctype
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.walk(c, depth+1)
	}
}

func (w *htmlWalker) flush() {
	if w.buf.Len() == 0 {
		return
	}
	kind := KindParagraph
	if len(w.kinds) > 0 {
		kind = w.kinds[len(w.kinds)-1]
	}
	text := w.buf.String()
	w.buf.Reset()
	if kind == KindList {
		text = textdoc.CleanInline(text)
	}
	w.b.Add(kind, text, 0)
}

func findFirst(n *html.Node, a atom.Atom) *html.Node {
	if n.Type == html.ElementNode && n.DataAtom == a {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := findFirst(c, a); f != nil {
			return f
		}
	}
	return nil
}

// textContent concatenates the text below n, skipping non-content elements.
func textContent(n *html.Node) string {
	var sb strings.Builder
	var rec func(*html.Node, int)
	rec = func(n *html.Node, depth int) {
		if depth > maxHTMLDepth {
			return
		}
		switch n.Type {
		case html.TextNode:
			sb.WriteString(n.Data)
			return
		case html.ElementNode:
			if n.DataAtom != atom.Title && skipHTML(n) {
				return
			}
			if n.DataAtom == atom.Br {
				sb.WriteByte('\n')
				return
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			rec(c, depth+1)
		}
		if n.Type == html.ElementNode && (isBlockContainer(n.DataAtom) || n.DataAtom == atom.Td || n.DataAtom == atom.Th) {
			sb.WriteByte(' ')
		}
	}
	rec(n, 0)
	return sb.String()
}

// tableText renders a table as one line per row, cells separated by " | ".
func tableText(t *html.Node) string {
	var lines []string
	var rec func(*html.Node, int)
	rec = func(n *html.Node, depth int) {
		if depth > maxHTMLDepth {
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type != html.ElementNode || skipHTML(c) {
				continue
			}
			switch c.DataAtom {
			case atom.Caption:
				if s := textdoc.CleanInline(textContent(c)); s != "" {
					lines = append(lines, s)
				}
			case atom.Tr:
				var cells []string
				for td := c.FirstChild; td != nil; td = td.NextSibling {
					if td.Type == html.ElementNode && (td.DataAtom == atom.Td || td.DataAtom == atom.Th) {
						cells = append(cells, textdoc.CleanInline(textContent(td)))
					}
				}
				if strings.TrimSpace(strings.Join(cells, "")) != "" {
					lines = append(lines, strings.Join(cells, " | "))
				}
			case atom.Table:
				// nested table inside a row group: keep its rows
				rec(c, depth+1)
			default: // thead, tbody, tfoot, colgroup
				rec(c, depth+1)
			}
		}
	}
	rec(t, 0)
	return strings.Join(lines, "\n")
}
