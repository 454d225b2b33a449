// Package testpdf generates real PDF files for the ingest tests and
// benchmarks (with github.com/go-pdf/fpdf).
package testpdf

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/go-pdf/fpdf"
	"golang.org/x/image/font/gofont/goregular"
)

// KnownSentence is placed on page 3 of the generated report.
const KnownSentence = "The quick zebra computes eigenvalues at midnight."

var loremWords = strings.Fields(`sovereign inference platforms keep weights and documents inside the
operator's own infrastructure while still exposing a familiar programming interface to application
teams who need retrieval augmented generation with citations budgets quotas and audit trails that
survive restarts replays and partial failures across many tenants and regions`)

// Sentence returns a deterministic pseudo-random sentence.
func Sentence(seed, n int) string {
	var w []string
	for i := range n {
		w = append(w, loremWords[(seed*7+i*13)%len(loremWords)])
	}
	s := strings.Join(w, " ")
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

// Paragraph returns a deterministic paragraph of sentences.
func Paragraph(seed, sentences int) string {
	var s []string
	for i := range sentences {
		s = append(s, Sentence(seed*31+i, 8+(seed+i)%9))
	}
	return strings.Join(s, " ")
}

// Report generates a multi-page report: a chapter heading (18pt bold)
// per page, a section heading (14pt bold) and body paragraphs (11pt), with
// KnownSentence in the second paragraph of page 3 (when pages >= 3).
func Report(t testing.TB, pages int) []byte {
	t.Helper()
	f := fpdf.New("P", "mm", "A4", "")
	f.SetTitle("Generated Report", true)
	f.SetAutoPageBreak(false, 15)
	for p := 1; p <= pages; p++ {
		f.AddPage()
		f.SetFont("Helvetica", "B", 18)
		f.CellFormat(0, 10, fmt.Sprintf("Chapter %d: Topic %d", p, p), "", 1, "L", false, 0, "")
		f.Ln(4)
		for s := 1; s <= 2; s++ {
			f.SetFont("Helvetica", "B", 14)
			f.CellFormat(0, 8, fmt.Sprintf("Section %d.%d Details", p, s), "", 1, "L", false, 0, "")
			f.Ln(2)
			f.SetFont("Helvetica", "", 11)
			for k := range 2 {
				text := Paragraph(p*10+s*3+k, 4)
				if p == 3 && s == 1 && k == 1 {
					text = Paragraph(99, 2) + " " + KnownSentence + " " + Paragraph(98, 1)
				}
				f.MultiCell(0, 5, text, "", "L", false)
				f.Ln(4)
			}
		}
		// footer with a page number, as real documents have
		f.SetFont("Helvetica", "", 9)
		f.SetXY(100, 285)
		f.CellFormat(10, 5, fmt.Sprintf("%d", p), "", 0, "C", false, 0, "")
	}
	return bytesOf(t, f)
}

// bytesOf renders f reproducibly: same calls, same bytes.
func bytesOf(t testing.TB, f *fpdf.Fpdf) []byte {
	t.Helper()
	f.SetCatalogSort(true)
	f.SetCreationDate(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	f.SetModificationDate(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var buf bytes.Buffer
	if err := f.Output(&buf); err != nil {
		t.Fatalf("fpdf: %v", err)
	}
	return buf.Bytes()
}

// GlyphByGlyph draws every character at its own position with Text and no
// space glyphs at all: word breaks exist only as gaps in the geometry.
func GlyphByGlyph(t testing.TB, lines ...string) []byte {
	t.Helper()
	f := fpdf.New("P", "pt", "A4", "")
	f.AddPage()
	f.SetFont("Helvetica", "", 12)
	y := 100.0
	for _, line := range lines {
		x := 72.0
		for _, ch := range line {
			s := string(ch)
			if s != " " {
				f.Text(x, y, s)
			}
			x += f.GetStringWidth(s)
		}
		y += 16
	}
	return bytesOf(t, f)
}

// UTF8Font uses an embedded TrueType font: a composite (Type0, Identity-H)
// font with a /W width array and a ToUnicode map.
func UTF8Font(t testing.TB, lines ...string) []byte {
	t.Helper()
	f := fpdf.New("P", "mm", "A4", "")
	f.AddUTF8FontFromBytes("goregular", "", goregular.TTF)
	f.AddPage()
	f.SetFont("goregular", "", 16)
	f.CellFormat(0, 10, "Unicode Heading", "", 1, "L", false, 0, "")
	f.SetFont("goregular", "", 11)
	for _, l := range lines {
		f.MultiCell(0, 5, l, "", "L", false)
		f.Ln(3)
	}
	return bytesOf(t, f)
}

// ImageOnly has a page with only an image: a scanned document.
func ImageOnly(t testing.TB) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 64, 64))
	for y := range 64 {
		for x := range 64 {
			img.Set(x, y, color.RGBA{uint8(x * 4), uint8(y * 4), 128, 255})
		}
	}
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, img); err != nil {
		t.Fatal(err)
	}
	f := fpdf.New("P", "mm", "A4", "")
	f.AddPage()
	opt := fpdf.ImageOptions{ImageType: "PNG"}
	f.RegisterImageOptionsReader("scan", opt, &pngBuf)
	f.ImageOptions("scan", 10, 10, 190, 270, false, opt, 0, "")
	return bytesOf(t, f)
}

// Protected is encrypted (RC4) with the given user password ("" opens without one).
func Protected(t testing.TB, userPass string) []byte {
	t.Helper()
	f := fpdf.New("P", "mm", "A4", "")
	f.SetProtection(fpdf.CnProtectPrint, userPass, "owner-secret")
	f.AddPage()
	f.SetFont("Helvetica", "", 12)
	f.MultiCell(0, 6, "Confidential quarterly numbers for the board.", "", "L", false)
	return bytesOf(t, f)
}

// Raw assembles a PDF from object bodies (object i+1 is objs[i]; object 1
// must be the catalog) with a correct cross-reference table. Streams are
// written with "stream:" prefix: the rest is the uncompressed content.
func Raw(header string, objs ...string) []byte {
	return RawTrailer(header, "", objs...)
}

// RawTrailer is Raw with extra trailer entries (for example an /Encrypt
// dictionary).
func RawTrailer(header, trailerExtra string, objs ...string) []byte {
	var b bytes.Buffer
	b.WriteString(header + "\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n", i+1)
		if content, ok := strings.CutPrefix(o, "stream:"); ok {
			fmt.Fprintf(&b, "<< /Length %d >>\nstream\n%s\nendstream\n", len(content), content)
		} else {
			b.WriteString(o + "\n")
		}
		b.WriteString("endobj\n")
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R %s >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, trailerExtra, xref)
	return b.Bytes()
}

// OnePage is a raw single-page PDF with the given content stream and a
// Helvetica font (no /Widths) named /F1.
func OnePage(header, content string) []byte {
	return Raw(header,
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
		"stream:"+content,
	)
}

// Manual generates a two-chapter manual laid out as real ones are, for the
// outline tests: page 1 holds the title and a table of contents (one entry
// without dot leaders, printed exactly as its section's heading is); each
// chapter prints a label (18pt bold: "Chapter 1", or Sphinx's "CHAPTER" and
// "TWO" on lines of their own) above its title (18pt bold), its sections are numbered ("1.1 Installing", 14pt bold) and a
// sample set in a 48pt display font ("SPUMONI") sits in section 1.2, the
// kind of text font sizes alone make the top heading; a 9pt caption after
// section 1.1 repeats its title. With bookmarks, the
// outline lists the chapter and section titles without their numbers, as
// the Debian FAQ's does.
func Manual(t testing.TB, bookmarks bool) []byte {
	t.Helper()
	f := fpdf.New("P", "mm", "A4", "")
	f.SetAutoPageBreak(false, 15)
	mark := func(title string, level int) {
		if bookmarks {
			f.Bookmark(title, level, -1)
		}
	}
	body := func(seed int) {
		f.SetFont("Helvetica", "", 11)
		f.MultiCell(0, 5, Paragraph(seed, 3), "", "L", false)
		f.Ln(4)
	}
	f.AddPage()
	f.SetFont("Helvetica", "B", 18)
	f.CellFormat(0, 10, "The Widget Manual", "", 1, "L", false, 0, "")
	f.Ln(6)
	f.SetFont("Helvetica", "B", 14)
	f.CellFormat(0, 8, "Contents", "", 1, "L", false, 0, "")
	f.Ln(2)
	f.SetFont("Helvetica", "", 11)
	for _, line := range []string{"1 Getting started . . . . . . 2", "1.1 Installing", "1.2 Display samples . . . . . . 2", "2 Everyday use . . . . . . 3", "2.1 Daily tasks . . . . . . 3"} {
		f.CellFormat(0, 6, line, "", 1, "L", false, 0, "")
		f.Ln(2)
	}
	chapter := func(labels []string, title string) {
		f.AddPage()
		mark(title, 0)
		f.SetFont("Helvetica", "B", 18)
		for _, l := range labels {
			f.CellFormat(0, 10, l, "", 1, "L", false, 0, "")
			f.Ln(6)
		}
		f.CellFormat(0, 10, title, "", 1, "L", false, 0, "")
		f.Ln(4)
	}
	section := func(number, title string) {
		mark(title, 1)
		f.SetFont("Helvetica", "B", 14)
		f.CellFormat(0, 8, number+" "+title, "", 1, "L", false, 0, "")
		f.Ln(2)
	}
	chapter([]string{"Chapter 1"}, "Getting started")
	section("1.1", "Installing")
	body(1)
	f.SetFont("Helvetica", "", 9) // a caption that repeats the section's title
	f.CellFormat(0, 5, "Installing", "", 1, "L", false, 0, "")
	f.Ln(4)
	section("1.2", "Display samples")
	body(2)
	f.SetFont("Helvetica", "B", 48)
	f.CellFormat(0, 20, "SPUMONI", "", 1, "L", false, 0, "")
	f.Ln(4)
	body(3)
	chapter([]string{"CHAPTER", "TWO"}, "Everyday use") // as Sphinx prints them
	section("2.1", "Daily tasks")
	body(4)
	body(5)
	return bytesOf(t, f)
}
