package pdf

import (
	"strings"
	"testing"

	"github.com/aiforge/aiforge/services/ingest/internal/testpdf"
)

func TestResolveHyphens(t *testing.T) {
	m := string(lineBreakHyphen)
	pages := [][]pdfPara{
		{
			{text: "The docu" + m + "mentation of Debian" + m + "based systems."},
			{text: "Every Debian-based system, and kfreebsd" + m + "amd64, and one" + m + "line answers."},
		},
		{
			{text: "Run the re" + m + "configure step; reconfigure is the word. A well-known tool, a well" + m + "known one."},
			{text: "One-line fixes and one-liners, and the over" + m + "written files, overwritten."},
			{text: "Send e-mail or email, an e" + m + "mail."},
		},
	}
	resolveHyphens(pages)
	var got []string
	for _, ps := range pages {
		for _, p := range ps {
			got = append(got, p.text)
		}
	}
	want := []string{
		"The documentation of Debian-based systems.",                           // "Debian-based" appears, "Debianbased" does not
		"Every Debian-based system, and kfreebsd-amd64, and one-line answers.", // digits: a name; "One-line" appears on page 2
		"Run the reconfigure step; reconfigure is the word. A well-known tool, a well-known one.",
		"One-line fixes and one-liners, and the overwritten files, overwritten.", // only the joined form appears
		"Send e-mail or email, an email.",                                        // both appear: the word wins
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("paragraph %d:\n got %q\nwant %q", i, got[i], want[i])
		}
	}
	for _, g := range got {
		if strings.ContainsRune(g, lineBreakHyphen) {
			t.Errorf("marker left in %q", g)
		}
	}
}

// TestHyphenatedLinesEndToEnd: a PDF whose lines break at hyphens.
func TestHyphenatedLinesEndToEnd(t *testing.T) {
	doc, err := extractPDFBytes(t, testpdf.GlyphByGlyph(t, "Most Debian-", "based systems keep the docu-", "mentation in one place.", "", "Each Debian-based system does."))
	if err != nil {
		t.Fatal(err)
	}
	text := allText(doc)
	for _, want := range []string{"Debian-based systems", "documentation in one place"} {
		if !strings.Contains(text, want) {
			t.Errorf("%q not in %q", want, text)
		}
	}
}
