package extract

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/aiforge/aiforge/services/ingest/extract/internal/textdoc"
)

// DOCX extracts Office Open XML word-processing documents. It reads
// word/document.xml (and word/styles.xml for heading styles) with
// encoding/xml: paragraphs (w:p) with their runs' text (w:t), headings from
// the paragraph style (Heading1..Heading6, Title, or a style/paragraph
// outline level), list paragraphs (w:numPr) and tables (w:tbl, one block per
// table, a line per row, cells separated by " | ").
//
// The archive is checked before anything is read: entries whose names escape
// the archive (absolute paths, "..", backslashes) make the whole file refused
// with ErrUnsafeArchive, and the total decompressed size read is bounded by
// MaxDecompressed (ErrTooLarge), which defeats zip bombs whatever the headers
// claim.
type DOCX struct{}

// ErrUnsafeArchive: a zip-based document holds entries that would escape the
// archive when unpacked (path traversal) or is otherwise hostile.
var ErrUnsafeArchive = errors.New("the archive holds unsafe entry names (path traversal)")

const maxZipEntries = 10000

// MaxParagraphBytes bounds the text of one DOCX paragraph (runs, tabs and
// breaks included); a paragraph this large is not prose but a payload.
const MaxParagraphBytes = 8 << 20

// maxXMLDepth bounds the nesting of DOCX XML elements.
const maxXMLDepth = 1000

var cfbMagic = []byte{0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1}

// Extract implements Extractor.
func (DOCX) Extract(ctx context.Context, r io.ReaderAt, size int64) (*Document, error) {
	head := make([]byte, 8)
	if n, _ := r.ReadAt(head, 0); n == 8 && bytes.Equal(head, cfbMagic) {
		// An OLE compound file: either a password-protected OOXML file
		// (which Office stores as an "EncryptedPackage" stream) or a legacy .doc.
		if cfbHasEncryptedPackage(r, size) {
			return nil, ErrEncrypted
		}
		return nil, fmt.Errorf("%w: legacy Word .doc (OLE) files are not supported, save as .docx", ErrUnsupported)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, textdoc.NewParseError("DOCX", err)
	}
	if len(zr.File) > maxZipEntries {
		return nil, textdoc.Limit("docx.max_zip_entries", maxZipEntries, fmt.Sprintf("%d zip entries", len(zr.File)))
	}
	files := make(map[string]*zip.File, len(zr.File))
	for _, f := range zr.File {
		if !safeZipName(f.Name) {
			return nil, fmt.Errorf("%w: %q", ErrUnsafeArchive, f.Name)
		}
		files[f.Name] = f
	}
	budget := &zipBudget{left: maxDecompressed, limit: maxDecompressed}

	mainPart := "word/document.xml"
	if rels, ok := files["_rels/.rels"]; ok {
		if target, err := officeDocumentTarget(rels, budget); err == nil && target != "" {
			if _, ok := files[target]; ok {
				mainPart = target
			}
		} else if errors.Is(err, ErrTooLarge) {
			return nil, err
		}
	}
	docFile, ok := files[mainPart]
	if !ok {
		return nil, textdoc.NewParseError("DOCX", fmt.Errorf("no %s in the archive", mainPart))
	}
	styles := map[string]docxStyle{}
	if sf, ok := files[path.Join(path.Dir(mainPart), "styles.xml")]; ok {
		styles, err = readDocxStyles(sf, budget)
		if errors.Is(err, ErrTooLarge) {
			return nil, err
		}
		// a broken styles part only costs us heading detection by style name
	}
	rc, err := docFile.Open()
	if err != nil {
		return nil, textdoc.NewParseError("DOCX", err)
	}
	defer rc.Close()
	p := &docxParser{ctx: ctx, styles: styles}
	if err := p.parse(budget.reader(rc)); err != nil {
		if errors.Is(err, ErrTooLarge) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		return nil, textdoc.NewParseError("DOCX", err)
	}
	return p.b.Document(FormatDOCX, 0, p.title)
}

// safeZipName rejects names that would escape an extraction directory.
func safeZipName(name string) bool {
	if name == "" || strings.ContainsAny(name, "\\\x00") || strings.HasPrefix(name, "/") {
		return false
	}
	if len(name) >= 2 && name[1] == ':' { // C:foo
		return false
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == ".." {
			return false
		}
	}
	return true
}

// zipBudget bounds the total decompressed bytes read from an archive.
type zipBudget struct{ left, limit int64 }

// maxDecompressed is MaxDecompressed; a variable so tests can lower it.
var maxDecompressed int64 = MaxDecompressed

func (b *zipBudget) reader(r io.Reader) io.Reader { return &budgetReader{r: r, b: b} }

type budgetReader struct {
	r io.Reader
	b *zipBudget
}

func (br *budgetReader) Read(p []byte) (int, error) {
	if br.b.left <= 0 {
		return 0, textdoc.Limit("docx.max_decompressed_bytes", br.b.limit, "more bytes decompressed from the archive (zip bomb?)")
	}
	if int64(len(p)) > br.b.left {
		p = p[:br.b.left]
	}
	n, err := br.r.Read(p)
	br.b.left -= int64(n)
	return n, err
}

func cfbHasEncryptedPackage(r io.ReaderAt, size int64) bool {
	var u []byte
	for _, c := range utf16.Encode([]rune("EncryptedPackage")) {
		u = append(u, byte(c), byte(c>>8))
	}
	const chunk = 1 << 20
	buf := make([]byte, chunk+len(u))
	for off := int64(0); off < size && off < 64<<20; off += chunk {
		n, _ := r.ReadAt(buf, off)
		if n <= 0 {
			break
		}
		if bytes.Contains(buf[:n], u) {
			return true
		}
	}
	return false
}

func officeDocumentTarget(f *zip.File, budget *zipBudget) (string, error) {
	rc, err := f.Open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var rels struct {
		Rel []struct {
			Type   string `xml:"Type,attr"`
			Target string `xml:"Target,attr"`
		} `xml:"Relationship"`
	}
	if err := xml.NewDecoder(budget.reader(rc)).Decode(&rels); err != nil {
		return "", err
	}
	for _, rel := range rels.Rel {
		if strings.HasSuffix(rel.Type, "/officeDocument") {
			t := strings.TrimPrefix(path.Clean("/"+rel.Target), "/")
			if safeZipName(t) {
				return t, nil
			}
		}
	}
	return "", nil
}

type docxStyle struct {
	name    string
	basedOn string
	outline int // 0-based outline level, -1 when unset
}

func readDocxStyles(f *zip.File, budget *zipBudget) (map[string]docxStyle, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	dec := xml.NewDecoder(budget.reader(rc))
	styles := map[string]docxStyle{}
	var cur *docxStyle
	var curID string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return styles, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "style":
				cur = &docxStyle{outline: -1}
				curID = wAttr(t, "styleId")
			case "name":
				if cur != nil {
					cur.name = wAttr(t, "val")
				}
			case "basedOn":
				if cur != nil {
					cur.basedOn = wAttr(t, "val")
				}
			case "outlineLvl":
				if cur != nil {
					if v, err := strconv.Atoi(wAttr(t, "val")); err == nil {
						cur.outline = v
					}
				}
			}
		case xml.EndElement:
			if t.Name.Local == "style" && cur != nil {
				if curID != "" {
					styles[curID] = *cur
				}
				cur = nil
			}
		}
	}
	return styles, nil
}

// wAttr returns the attribute with the given local name (w:val, w:styleId ...).
func wAttr(e xml.StartElement, local string) string {
	for _, a := range e.Attr {
		if a.Name.Local == local {
			return a.Value
		}
	}
	return ""
}

var headingStyleRE = regexp.MustCompile(`(?i)^heading\s*([1-9])$`)

// headingLevel resolves a paragraph style to a heading level (0 = not a
// heading) and reports whether it is the Title style.
func (p *docxParser) headingLevel(styleID string) (level int, title bool) {
	seen := 0
	for id := styleID; id != "" && seen < 16; seen++ {
		if m := headingStyleRE.FindStringSubmatch(id); m != nil {
			return int(m[1][0] - '0'), false
		}
		if strings.EqualFold(id, "Title") {
			return 1, true
		}
		st, ok := p.styles[id]
		if !ok {
			return 0, false
		}
		if m := headingStyleRE.FindStringSubmatch(st.name); m != nil {
			return int(m[1][0] - '0'), false
		}
		if strings.EqualFold(st.name, "title") {
			return 1, true
		}
		if st.outline >= 0 && st.outline < 9 {
			return st.outline + 1, false
		}
		id = st.basedOn
	}
	return 0, false
}

type docxPara struct {
	text    strings.Builder
	style   string
	outline int
	list    bool
}

type docxCell struct{ paras []string }

type docxTable struct {
	rows [][]string
	row  []string
	cell *docxCell
}

type docxParser struct {
	ctx    context.Context
	styles map[string]docxStyle
	b      textdoc.Builder
	title  string
	para   *docxPara    // innermost open paragraph
	paras  []*docxPara  // open paragraphs (text boxes nest paragraphs inside runs)
	tables []*docxTable // open tables, innermost last
}

func (p *docxParser) parse(r io.Reader) error {
	dec := xml.NewDecoder(r)
	dec.Strict = false
	inText := false // inside w:t
	skip := 0       // depth inside skipped subtrees (deleted text, field code, fallback)
	depth := 0
	for n := 0; ; n++ {
		if n%8192 == 0 {
			if err := p.ctx.Err(); err != nil {
				return err
			}
		}
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth > maxXMLDepth {
				return textdoc.Limit("docx.max_nesting_depth", maxXMLDepth, "XML elements nested deeper")
			}
			if skip > 0 {
				skip++
				continue
			}
			switch t.Name.Local {
			case "delText", "instrText", "Fallback", "footnoteReference", "commentReference":
				skip = 1
			case "p":
				p.para = &docxPara{outline: -1}
				p.paras = append(p.paras, p.para)
			case "pStyle":
				if p.para != nil {
					p.para.style = wAttr(t, "val")
				}
			case "outlineLvl":
				if p.para != nil {
					if v, err := strconv.Atoi(wAttr(t, "val")); err == nil {
						p.para.outline = v
					}
				}
			case "numPr":
				if p.para != nil {
					p.para.list = true
				}
			case "t":
				inText = true
			case "tab":
				if p.para != nil {
					p.para.text.WriteByte('\t')
				}
			case "br", "cr":
				if p.para != nil {
					p.para.text.WriteByte('\n')
				}
			case "tbl":
				p.tables = append(p.tables, &docxTable{})
			case "tr":
				if tb := p.table(); tb != nil {
					tb.row = nil
				}
			case "tc":
				if tb := p.table(); tb != nil {
					tb.cell = &docxCell{}
				}
			}
		case xml.EndElement:
			depth--
			if skip > 0 {
				skip--
				continue
			}
			switch t.Name.Local {
			case "t":
				inText = false
			case "p":
				p.endParagraph()
			case "tc":
				if tb := p.table(); tb != nil && tb.cell != nil {
					tb.row = append(tb.row, textdoc.CleanInline(strings.Join(tb.cell.paras, " ")))
					tb.cell = nil
				}
			case "tr":
				if tb := p.table(); tb != nil {
					if strings.TrimSpace(strings.Join(tb.row, "")) != "" {
						tb.rows = append(tb.rows, tb.row)
					}
					tb.row = nil
				}
			case "tbl":
				p.endTable()
			}
		case xml.CharData:
			if inText && skip == 0 && p.para != nil {
				if p.para.text.Len()+len(t) > MaxParagraphBytes {
					return textdoc.Limit("docx.max_paragraph_bytes", MaxParagraphBytes, "a longer paragraph")
				}
				p.para.text.Write(t)
			}
		}
	}
	for len(p.tables) > 0 { // unterminated tables in a truncated part
		p.endTable()
	}
	return nil
}

func (p *docxParser) table() *docxTable {
	if len(p.tables) == 0 {
		return nil
	}
	return p.tables[len(p.tables)-1]
}

func (p *docxParser) endParagraph() {
	if len(p.paras) == 0 {
		return
	}
	para := p.paras[len(p.paras)-1]
	p.paras = p.paras[:len(p.paras)-1]
	p.para = nil
	if len(p.paras) > 0 {
		p.para = p.paras[len(p.paras)-1]
	}
	text := para.text.String()
	if tb := p.table(); tb != nil {
		if tb.cell != nil {
			tb.cell.paras = append(tb.cell.paras, text)
		}
		return
	}
	level, isTitle := p.headingLevel(para.style)
	if level == 0 && para.outline >= 0 && para.outline < 9 {
		level = para.outline + 1
	}
	switch {
	case level > 0:
		if isTitle && p.title == "" {
			p.title = textdoc.CleanInline(text)
		}
		p.b.Heading(level, text, 0)
	case para.list:
		p.b.Add(KindList, textdoc.CleanInline(text), 0)
	default:
		p.b.Add(KindParagraph, text, 0)
	}
}

func (p *docxParser) endTable() {
	tb := p.table()
	p.tables = p.tables[:len(p.tables)-1]
	if tb == nil {
		return
	}
	lines := make([]string, 0, len(tb.rows))
	for _, row := range tb.rows {
		lines = append(lines, strings.Join(row, " | "))
	}
	text := strings.Join(lines, "\n")
	if outer := p.table(); outer != nil {
		// nested table: its text belongs to the enclosing cell
		if outer.cell != nil {
			outer.cell.paras = append(outer.cell.paras, strings.ReplaceAll(text, "\n", " ; "))
		}
		return
	}
	p.b.Add(KindTable, text, 0)
}
