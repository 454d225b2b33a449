package e2e

import (
	"bytes"
	"context"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-pdf/fpdf"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

var (
	tagRE   = regexp.MustCompile(`(?s)<[^>]*>`)
	spaceRE = regexp.MustCompile(`[ \t]+`)
)

// specPDF renders a real document, the Go language specification shipped
// with every Go installation (BSD licence), as a PDF of 70+ pages.
func specPDF(t *testing.T) ([]byte, int) {
	t.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "doc", "go_spec.html"))
	if err != nil {
		t.Fatalf("the Go specification is part of every Go installation: %v", err)
	}
	text := html.UnescapeString(tagRE.ReplaceAllString(string(raw), ""))
	pdf := fpdf.New("P", "mm", "A4", "")
	tr := pdf.UnicodeTranslatorFromDescriptor("")
	pdf.SetFont("Helvetica", "", 11)
	pdf.AddPage()
	for _, para := range strings.Split(text, "\n\n") {
		para = strings.TrimSpace(spaceRE.ReplaceAllString(strings.ReplaceAll(para, "\n", " "), " "))
		if para == "" {
			continue
		}
		pdf.MultiCell(0, 6, tr(para), "", "", false)
		pdf.Ln(2)
	}
	var buf bytes.Buffer
	if err := pdf.Output(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), pdf.PageNo()
}

// TestRealPDFKeywordSearch: a real document of more than 70 pages, with no
// embedding engine configured, completes and keyword search answers
// paraphrased questions from the right passages.
func TestRealPDFKeywordSearch(t *testing.T) {
	doc, pages := specPDF(t)
	if pages < 70 {
		t.Fatalf("the fixture has %d pages, want 70 or more", pages)
	}
	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	vs, took := storePDF(t, client, "go_spec.pdf", doc, 120*time.Second)
	t.Logf("%d-page PDF (%d KiB) searchable %s after it was added", pages, len(doc)>>10, took.Round(time.Millisecond))
	for q, want := range map[string]string{
		"How do I start a goroutine running a function concurrently?": "goroutine",
		"What happens when a deferred function panics and recovers?":  "recover",
		"Which kinds of values can be compared for equality?":         "comparable",
	} {
		res, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String(q)}})
		if err != nil || len(res.Data) == 0 {
			t.Fatalf("%q: %v", q, err)
		}
		hit := false
		for _, r := range res.Data[:min(3, len(res.Data))] {
			if strings.Contains(strings.ToLower(r.Content[0].Text), want) && r.Attributes["page"].OfFloat >= 1 {
				hit = true
			}
		}
		if !hit {
			t.Fatalf("%q: no top-3 passage about %q (top: %.200q)", q, want, res.Data[0].Content[0].Text)
		}
	}
}
