package extract

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/services/ingest/internal/testpdf"
)

func extractString(t *testing.T, format, s string) *Document {
	t.Helper()
	ex, ok := ForFormat(format)
	if !ok {
		t.Fatalf("no extractor for %q", format)
	}
	doc, err := ex.Extract(context.Background(), strings.NewReader(s), int64(len(s)))
	if err != nil {
		t.Fatalf("%s: %v", format, err)
	}
	if doc.Format != format {
		t.Errorf("format = %q, want %q", doc.Format, format)
	}
	return doc
}

type wantBlock struct {
	kind string
	text string
	path []string
}

func checkBlocks(t *testing.T, doc *Document, want []wantBlock) {
	t.Helper()
	if len(doc.Blocks) != len(want) {
		for _, b := range doc.Blocks {
			t.Logf("  %s %q %q", b.Kind, b.Text, b.HeadingPath)
		}
		t.Fatalf("got %d blocks, want %d", len(doc.Blocks), len(want))
	}
	for i, w := range want {
		b := doc.Blocks[i]
		if b.Kind != w.kind || b.Text != w.text || !slices.Equal(b.HeadingPath, w.path) {
			t.Errorf("block %d = %s %q %q, want %s %q %q", i, b.Kind, b.Text, b.HeadingPath, w.kind, w.text, w.path)
		}
		if b.Page != 0 {
			t.Errorf("block %d has page %d", i, b.Page)
		}
	}
}

func TestHTML(t *testing.T) {
	const page = `<!DOCTYPE html>
<html><head><title>Ops  Guide</title><style>body { color: red }</style>
<script>var secret = "do not index";</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/docs">Docs</a></nav>
<h1>Operations <em>Guide</em></h1>
<p>Intro   paragraph with <b>bold</b>
text.</p>
<h2>Install</h2>
<p>Run the installer.</p>
<ul><li>Step one</li><li>Step <code>two</code></li></ul>
<pre>make build
make test</pre>
<h3>Options</h3>
<table><caption>Flags</caption>
<tr><th>Name</th><th>Value</th></tr>
<tr><td>port</td><td>8080</td></tr></table>
<h2>Upgrade</h2>
<div>Loose text in a div.<p>Nested paragraph.</p></div>
<footer>Copyright 2026 ACME</footer>
<script>alert("x")</script>
</body></html>`
	doc := extractString(t, FormatHTML, page)
	if doc.Title != "Ops Guide" {
		t.Errorf("title = %q", doc.Title)
	}
	g := []string{"Operations Guide"}
	gi := []string{"Operations Guide", "Install"}
	gio := []string{"Operations Guide", "Install", "Options"}
	gu := []string{"Operations Guide", "Upgrade"}
	checkBlocks(t, doc, []wantBlock{
		{KindHeading, "Operations Guide", g},
		{KindParagraph, "Intro paragraph with bold text.", g},
		{KindHeading, "Install", gi},
		{KindParagraph, "Run the installer.", gi},
		{KindList, "Step one", gi},
		{KindList, "Step two", gi},
		{KindCode, "make build\nmake test", gi},
		{KindHeading, "Options", gio},
		{KindTable, "Flags\nName | Value\nport | 8080", gio},
		{KindHeading, "Upgrade", gu},
		{KindParagraph, "Loose text in a div.", gu},
		{KindParagraph, "Nested paragraph.", gu},
	})
	if all := allText(doc); strings.Contains(all, "secret") || strings.Contains(all, "Copyright") || strings.Contains(all, "Home") {
		t.Errorf("script/nav/footer leaked: %q", all)
	}
}

func TestMarkdown(t *testing.T) {
	const md = "---\ntitle: \"Runbook\"\nowner: sre\n---\n" +
		"Preamble line.\n\n" +
		"# Service *Runbook*\n\nFirst [paragraph](http://x) with `code`\nand a soft break.\n\n" +
		"## Deploy\n\n- item one\n- item **two**\n  1. nested\n\n" +
		"```go\nfunc main() {}\n```\n\n" +
		"| Key | Value |\n|-----|-------|\n| a   | 1     |\n\n" +
		"### Rollback\n\nRoll back <b>carefully</b>.\n\n" +
		"## Monitor\n\n> Quoted advice.\n"
	doc := extractString(t, FormatMarkdown, md)
	if doc.Title != "Runbook" {
		t.Errorf("title = %q", doc.Title)
	}
	s := []string{"Service Runbook"}
	sd := []string{"Service Runbook", "Deploy"}
	sdr := []string{"Service Runbook", "Deploy", "Rollback"}
	sm := []string{"Service Runbook", "Monitor"}
	checkBlocks(t, doc, []wantBlock{
		{KindParagraph, "Preamble line.", nil},
		{KindHeading, "Service Runbook", s},
		{KindParagraph, "First paragraph with code and a soft break.", s},
		{KindHeading, "Deploy", sd},
		{KindList, "item one", sd},
		{KindList, "item two", sd},
		{KindList, "nested", sd},
		{KindCode, "func main() {}", sd},
		{KindTable, "Key | Value\na | 1", sd},
		{KindHeading, "Rollback", sdr},
		{KindParagraph, "Roll back carefully.", sdr},
		{KindHeading, "Monitor", sm},
		{KindParagraph, "Quoted advice.", sm},
	})
	if doc.Blocks[3].Level != 2 || doc.Blocks[9].Level != 3 {
		t.Errorf("levels %d %d", doc.Blocks[3].Level, doc.Blocks[9].Level)
	}
}

func TestText(t *testing.T) {
	doc := extractString(t, FormatText, "\ufeffFirst paragraph\r\nstill first.\r\n\r\n\r\nSecond  one.\n \nThird.")
	checkBlocks(t, doc, []wantBlock{
		{KindParagraph, "First paragraph still first.", nil},
		{KindParagraph, "Second one.", nil},
		{KindParagraph, "Third.", nil},
	})
	// Latin-1 input is decoded, not turned into replacement characters
	doc = extractString(t, FormatText, "caf\xe9 cr\xe8me")
	if doc.Blocks[0].Text != "café crème" {
		t.Errorf("latin-1: %q", doc.Blocks[0].Text)
	}
	// UTF-16 with BOM
	doc = extractString(t, FormatText, "\xff\xfeh\x00i\x00")
	if doc.Blocks[0].Text != "hi" {
		t.Errorf("utf-16: %q", doc.Blocks[0].Text)
	}
	// nothing but whitespace
	if _, err := (Text{}).Extract(context.Background(), strings.NewReader(" \n\n\t"), 4); !errors.Is(err, ErrNoText) {
		t.Errorf("blank text: err = %v", err)
	}
}

// --- DOCX ---

const contentTypes = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">
<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>
<Default Extension="xml" ContentType="application/xml"/>
<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>
<Override PartName="/word/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml"/>
</Types>`

const rootRels = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>
</Relationships>`

// localised heading style: the id is German, the name is the built-in one
const stylesXML = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
<w:style w:type="paragraph" w:styleId="berschrift3"><w:name w:val="heading 3"/><w:basedOn w:val="Standard"/></w:style>
<w:style w:type="paragraph" w:styleId="Standard"><w:name w:val="Normal"/></w:style>
</w:styles>`

func para(style, text string) string {
	ppr := ""
	if style != "" {
		ppr = `<w:pPr><w:pStyle w:val="` + style + `"/></w:pPr>`
	}
	return `<w:p>` + ppr + `<w:r><w:t xml:space="preserve">` + text + `</w:t></w:r></w:p>`
}

func documentXML(body string) string {
	return `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>` + body + `</w:body></w:document>`
}

func buildZip(t *testing.T, files [][2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		w, err := zw.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func extractDOCX(files [][2]string, t *testing.T) (*Document, error) {
	data := buildZip(t, files)
	return DOCX{}.Extract(context.Background(), bytes.NewReader(data), int64(len(data)))
}

func TestDOCX(t *testing.T) {
	body := para("Title", "Quarterly Report") +
		para("", "Preface text.") +
		para("Heading1", "Results") +
		`<w:p><w:r><w:t>Revenue </w:t></w:r><w:r><w:rPr><w:b/></w:rPr><w:t>grew</w:t></w:r><w:r><w:tab/><w:t>strongly.</w:t></w:r>` +
		`<w:r><w:delText>deleted words</w:delText></w:r></w:p>` +
		para("Heading2", "By Region") +
		`<w:tbl><w:tr><w:tc>` + para("", "Region") + `</w:tc><w:tc>` + para("", "Growth") + `</w:tc></w:tr>` +
		`<w:tr><w:tc>` + para("", "EMEA") + `</w:tc><w:tc>` + para("", "12%") + para("", "(est.)") + `</w:tc></w:tr></w:tbl>` +
		`<w:p><w:pPr><w:pStyle w:val="ListParagraph"/><w:numPr><w:ilvl w:val="0"/><w:numId w:val="1"/></w:numPr></w:pPr><w:r><w:t>First point</w:t></w:r></w:p>` +
		para("berschrift3", "Details") +
		para("", "Detail text.") +
		para("Heading1", "Outlook") +
		`<w:p><w:pPr><w:outlineLvl w:val="1"/></w:pPr><w:r><w:t>Outline level heading</w:t></w:r></w:p>` +
		para("", "Final words.")
	doc, err := extractDOCX([][2]string{
		{"[Content_Types].xml", contentTypes},
		{"_rels/.rels", rootRels},
		{"word/styles.xml", stylesXML},
		{"word/document.xml", documentXML(body)},
	}, t)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Title != "Quarterly Report" || doc.Format != FormatDOCX {
		t.Errorf("title/format = %q/%q", doc.Title, doc.Format)
	}
	q := []string{"Quarterly Report"}
	r := []string{"Results"}
	rb := []string{"Results", "By Region"}
	rbd := []string{"Results", "By Region", "Details"}
	o := []string{"Outlook"}
	oo := []string{"Outlook", "Outline level heading"}
	checkBlocks(t, doc, []wantBlock{
		{KindHeading, "Quarterly Report", q},
		{KindParagraph, "Preface text.", q},
		{KindHeading, "Results", r},
		{KindParagraph, "Revenue grew strongly.", r},
		{KindHeading, "By Region", rb},
		{KindTable, "Region | Growth\nEMEA | 12% (est.)", rb},
		{KindList, "First point", rb},
		{KindHeading, "Details", rbd},
		{KindParagraph, "Detail text.", rbd},
		{KindHeading, "Outlook", o},
		{KindHeading, "Outline level heading", oo},
		{KindParagraph, "Final words.", oo},
	})
}

func TestDOCXWithoutStylesOrRels(t *testing.T) {
	doc, err := extractDOCX([][2]string{
		{"[Content_Types].xml", contentTypes},
		{"word/document.xml", documentXML(para("Heading2", "Only") + para("", "Body."))},
	}, t)
	if err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, doc, []wantBlock{
		{KindHeading, "Only", []string{"Only"}},
		{KindParagraph, "Body.", []string{"Only"}},
	})
}

func TestDOCXRefusesPathTraversal(t *testing.T) {
	for _, name := range []string{"../evil", "word/../../evil.sh", "/etc/passwd", `..\evil`, "C:/evil"} {
		_, err := extractDOCX([][2]string{
			{"[Content_Types].xml", contentTypes},
			{"word/document.xml", documentXML(para("", "x"))},
			{name, "payload"},
		}, t)
		if !errors.Is(err, ErrUnsafeArchive) {
			t.Errorf("%q: err = %v, want ErrUnsafeArchive", name, err)
		}
	}
}

func TestDOCXZipBomb(t *testing.T) {
	old := maxDecompressed
	maxDecompressed = 1 << 20
	defer func() { maxDecompressed = old }()
	// 4 MiB of one paragraph compresses to a few KiB
	big := documentXML(para("", strings.Repeat("A", 4<<20)))
	data := buildZip(t, [][2]string{{"[Content_Types].xml", contentTypes}, {"word/document.xml", big}})
	if len(data) > 64<<10 {
		t.Fatalf("test zip is %d bytes", len(data))
	}
	_, err := DOCX{}.Extract(context.Background(), bytes.NewReader(data), int64(len(data)))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestDOCXBroken(t *testing.T) {
	cases := map[string][]byte{
		"not a zip":     []byte("PK\x03\x04 nope"),
		"no document":   buildZip(t, [][2]string{{"[Content_Types].xml", contentTypes}}),
		"bad xml":       buildZip(t, [][2]string{{"word/document.xml", "<w:document><w:body><w:p><w:t>x</w:p"}}),
		"legacy doc":    append([]byte{0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1}, make([]byte, 512)...),
		"encrypted ole": append(append([]byte{0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1}, make([]byte, 64)...), []byte("E\x00n\x00c\x00r\x00y\x00p\x00t\x00e\x00d\x00P\x00a\x00c\x00k\x00a\x00g\x00e\x00")...),
	}
	for name, data := range cases {
		_, err := DOCX{}.Extract(context.Background(), bytes.NewReader(data), int64(len(data)))
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	_, err := DOCX{}.Extract(context.Background(), bytes.NewReader(cases["encrypted ole"]), int64(len(cases["encrypted ole"])))
	if !errors.Is(err, ErrEncrypted) {
		t.Errorf("encrypted OLE: %v", err)
	}
	_, err = DOCX{}.Extract(context.Background(), bytes.NewReader(cases["legacy doc"]), int64(len(cases["legacy doc"])))
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("legacy doc: %v", err)
	}
}

func TestSniffAndForFormat(t *testing.T) {
	docx := buildZip(t, [][2]string{{"[Content_Types].xml", contentTypes}, {"word/document.xml", documentXML("")}})
	xlsx := buildZip(t, [][2]string{{"[Content_Types].xml", contentTypes}, {"xl/workbook.xml", "<x/>"}})
	cases := []struct {
		name string
		head []byte
		want string
	}{
		{"upload.bin", []byte("%PDF-1.7\n%\xe2\xe3"), FormatPDF},
		{"report.txt", []byte("%PDF-1.4\n"), FormatPDF}, // content wins over the extension
		{"x", docx, FormatDOCX},
		{"book.xlsx", xlsx, ""},
		{"page", []byte("  <!DOCTYPE html><html>"), FormatHTML},
		{"page", []byte("\ufeff<HTML lang=en>"), FormatHTML},
		{"README.md", []byte("# Title"), FormatMarkdown},
		{"notes.markdown", []byte("text"), FormatMarkdown},
		{"notes.TXT", []byte("text"), FormatText},
		{"index.htm", []byte("<p>hi"), FormatHTML},
		{"a.docx", []byte("PK\x03\x04"), FormatDOCX},
		{"a.pdf", []byte("garbage"), FormatPDF},
		{"photo.png", []byte("\x89PNG"), ""},
		{"noext", []byte("plain"), ""},
	}
	for _, c := range cases {
		if got := Sniff(c.name, c.head); got != c.want {
			t.Errorf("Sniff(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	for _, f := range []string{FormatPDF, FormatHTML, FormatMarkdown, FormatText, FormatDOCX} {
		if _, ok := ForFormat(f); !ok {
			t.Errorf("ForFormat(%q) missing", f)
		}
	}
	if _, ok := ForFormat("pptx"); ok {
		t.Error("ForFormat(pptx) should fail")
	}
}

func allText(doc *Document) string {
	var parts []string
	for _, b := range doc.Blocks {
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n")
}

// ForFormat dispatches PDFs to extract/pdf; its errors are extract's.
func TestForFormatPDF(t *testing.T) {
	ctx := context.Background()
	x, ok := ForFormat(FormatPDF)
	if !ok {
		t.Fatal("ForFormat(pdf) missing")
	}
	data := testpdf.Report(t, 2)
	doc, err := x.Extract(ctx, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Format != FormatPDF || doc.Pages != 2 || len(doc.Blocks) == 0 {
		t.Fatalf("format %q, %d pages", doc.Format, doc.Pages)
	}
	img := testpdf.ImageOnly(t)
	if _, err := x.Extract(ctx, bytes.NewReader(img), int64(len(img))); !errors.Is(err, ErrNoText) {
		t.Fatalf("image-only PDF: %v, want ErrNoText", err)
	}
	bad := []byte("%PDF-1.4\ngarbage")
	var pe *ParseError
	if _, err := x.Extract(ctx, bytes.NewReader(bad), int64(len(bad))); !errors.As(err, &pe) || pe.Format != "PDF" {
		t.Fatalf("malformed PDF: %v, want a *ParseError", err)
	}
}
