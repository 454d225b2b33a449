package pdf

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/services/ingest/extract/internal/textdoc"
	"github.com/aiforge/aiforge/services/ingest/internal/testpdf"
	pdfr "github.com/ledongthuc/pdf"
)

// headings lists a document's headings as "level text path".
func headings(doc *textdoc.Document) []string {
	var out []string
	for _, b := range doc.Blocks {
		if b.Kind == textdoc.KindHeading {
			out = append(out, fmt.Sprintf("%d %s %q", b.Level, b.Text, b.HeadingPath))
		}
	}
	return out
}

func headingNamed(t *testing.T, doc *textdoc.Document, text string, page int) textdoc.Block {
	t.Helper()
	for _, b := range doc.Blocks {
		if b.Kind == textdoc.KindHeading && b.Text == text && (page == 0 || b.Page == page) {
			return b
		}
	}
	t.Fatalf("no heading %q on page %d in\n%s", text, page, strings.Join(headings(doc), "\n"))
	return textdoc.Block{}
}

func TestOutlineDecidesHeadingLevels(t *testing.T) {
	doc, err := extractPDFBytes(t, testpdf.Manual(t, true))
	if err != nil {
		t.Fatal(err)
	}
	// The "Chapter N" label joins the title the outline knows; chapters are
	// the top level, numbered sections (bookmarked without their numbers)
	// the second.
	ch1 := headingNamed(t, doc, "Chapter 1 Getting started", 2)
	if ch1.Level != 1 || !slices.Equal(ch1.HeadingPath, []string{"Chapter 1 Getting started"}) {
		t.Errorf("chapter 1: level %d path %q, want 1 and itself", ch1.Level, ch1.HeadingPath)
	}
	sec := headingNamed(t, doc, "1.1 Installing", 0)
	if sec.Page != 2 || sec.Level != 2 || !slices.Equal(sec.HeadingPath, []string{"Chapter 1 Getting started", "1.1 Installing"}) {
		t.Errorf("section 1.1: page %d level %d path %q, want the heading on page 2 at level 2 under chapter 1 (not the contents' line)", sec.Page, sec.Level, sec.HeadingPath)
	}
	for _, b := range doc.Blocks {
		if b.Text == "Installing" && b.Kind == textdoc.KindHeading {
			t.Errorf("the caption repeating section 1.1's title is a level %d heading, want a paragraph", b.Level)
		}
	}
	// The display sample heads nothing beyond its own section.
	if s := headingNamed(t, doc, "SPUMONI", 2); s.Level <= 2 {
		t.Errorf("SPUMONI at level %d, want below the sections (> 2)", s.Level)
	}
	daily := headingNamed(t, doc, "2.1 Daily tasks", 3)
	if want := []string{"CHAPTER TWO Everyday use", "2.1 Daily tasks"}; !slices.Equal(daily.HeadingPath, want) {
		t.Errorf("section 2.1 path %q, want %q", daily.HeadingPath, want)
	}
	var last textdoc.Block
	for _, b := range doc.Blocks {
		if b.Kind == textdoc.KindParagraph {
			last = b
		}
	}
	if want := []string{"CHAPTER TWO Everyday use", "2.1 Daily tasks"}; !slices.Equal(last.HeadingPath, want) {
		t.Errorf("last paragraph's path %q, want %q", last.HeadingPath, want)
	}
	// The table of contents' entry printed like the heading stays under
	// the contents.
	if toc := headingNamed(t, doc, "Contents", 1); toc.Level <= 2 {
		t.Errorf("the contents' heading at level %d, want below the outline's levels", toc.Level)
	}
}

// TestFontSizesWithoutOutline: the same manual without bookmarks falls back
// to font sizes, where the display sample is the top heading and every later
// heading sits under it. This is what the outline fixes.
func TestFontSizesWithoutOutline(t *testing.T) {
	doc, err := extractPDFBytes(t, testpdf.Manual(t, false))
	if err != nil {
		t.Fatal(err)
	}
	if s := headingNamed(t, doc, "SPUMONI", 2); s.Level != 1 {
		t.Errorf("SPUMONI at level %d, want 1 from font sizes", s.Level)
	}
	if daily := headingNamed(t, doc, "2.1 Daily tasks", 3); !slices.Contains(daily.HeadingPath, "SPUMONI") {
		t.Errorf("section 2.1 path %q: font sizes should put it under SPUMONI", daily.HeadingPath)
	}
	headingNamed(t, doc, "TWO", 3) // the labels stay headings of their own
}

// TestOutlineCyclesAreBounded: an outline whose entries link back to
// themselves (/Next, /First) is dropped after a bounded walk and font sizes
// decide; the extraction completes.
func TestOutlineCyclesAreBounded(t *testing.T) {
	page := func(outlines string, entries ...string) []byte {
		objs := []string{
			"<< /Type /Catalog /Pages 2 0 R /Outlines 6 0 R >>",
			"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
			"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
			"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
			"stream:BT /F1 24 Tf 72 720 Td (Alpha) Tj ET BT /F1 12 Tf 72 690 Td (Body text of the alpha section goes here and on.) Tj ET",
			outlines,
		}
		return testpdf.Raw("%PDF-1.7", append(objs, entries...)...)
	}
	for name, data := range map[string][]byte{
		"next":  page("<< /Type /Outlines /First 7 0 R >>", "<< /Title (Alpha) /Next 7 0 R >>"),
		"first": page("<< /Type /Outlines /First 7 0 R >>", "<< /Title (Alpha) /First 7 0 R >>"),
		"pair":  page("<< /Type /Outlines /First 7 0 R >>", "<< /Title (Alpha) /Next 8 0 R >>", "<< /Title (Beta) /Next 7 0 R /First 7 0 R >>"),
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			doc, err := extractPDFBytes(t, data)
			if err != nil {
				t.Fatal(err)
			}
			if a := headingNamed(t, doc, "Alpha", 1); a.Level != 1 {
				t.Errorf("Alpha at level %d, want 1 (from its font size)", a.Level)
			}
			t.Logf("extracted in %v", time.Since(start))
			rd, err := pdfr.NewReader(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			if o := readOutline(context.Background(), rd, 1); o != nil {
				t.Errorf("a cyclic outline read as %d entries, want none", len(o))
			}
		})
	}
	// the same chain, well formed, is read
	data := page("<< /Type /Outlines /First 7 0 R >>", "<< /Title (Alpha) /Next 8 0 R >>", "<< /Title (Beta) /Next 9 0 R /First 10 0 R >>", "<< /Title (Gamma) >>", "<< /Title (Beta one) >>")
	rd, err := pdfr.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	got := readOutline(context.Background(), rd, 1)
	want := []outlineEntry{{"alpha", 1}, {"beta", 1}, {"betaone", 2}, {"gamma", 1}}
	if !slices.Equal(got, want) {
		t.Errorf("readOutline = %v, want %v", got, want)
	}
}

func TestSectionNumbers(t *testing.T) {
	for text, label := range map[string]bool{
		"Chapter 4": true, "Appendix A": true, "12": true, "3.1": true, "IV": true, "CHAPTER": true, "TWO": true, "Chapter Twelve": true,
		"Chapter 4 Compatibility issues": false, "Installing": false, "I installed it": false,
	} {
		if got := isSectionLabel(text); got != label {
			t.Errorf("isSectionLabel(%q) = %v, want %v", text, got, label)
		}
	}
	for text, want := range map[string]string{
		"3.1.2 Will there be different versions?": "will there be different versions?",
		"A.1 Odyssey":         "odyssey",
		"Chapter 2 Graphics":  "graphics",
		"I installed Knoppix": "installed knoppix", // stripped, but only tried when the whole title does not match
	} {
		if got := strings.ToLower(sectionNumber.ReplaceAllString(text, "")); got != want {
			t.Errorf("without its number %q is %q, want %q", text, got, want)
		}
	}
	if k := headingKey("2.2 Are there package upgrades in \u0300stable\u2019?"); k != "22aretherepackageupgradesinstable" {
		t.Errorf("headingKey = %q", k)
	}
}
