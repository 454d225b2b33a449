package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-pdf/fpdf"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestSeventyPagePDFKeywordSearch: with no embedding engine configured, a
// 70-page PDF completes and keyword search (stems, stop words) finds
// paraphrased questions on the right pages.
func TestSeventyPagePDFKeywordSearch(t *testing.T) {
	subjects := []string{"the kettle", "the heater", "the blender", "the lamp", "the fan", "the toaster", "the scale"}
	actions := []string{"cleaning", "storing", "descaling", "unpacking", "moving", "repairing", "recycling"}
	special := map[int]string{
		12: "The warranty does not cover devices that were dropped or damaged by water.",
		37: "Batteries must be charged fully before the first use and replaced every two years.",
		58: "Children under eight years old should never operate the appliance without supervision.",
	}
	pdf := fpdf.New("P", "mm", "A4", "")
	for page := 1; page <= 70; page++ {
		pdf.AddPage()
		pdf.SetFont("Helvetica", "B", 16)
		pdf.Cell(0, 10, fmt.Sprintf("Section %d", page))
		pdf.Ln(12)
		pdf.SetFont("Helvetica", "", 11)
		for p := 0; p < 5; p++ {
			s, a := subjects[(page+p)%len(subjects)], actions[(page*3+p)%len(actions)]
			text := fmt.Sprintf("When %s %s, follow the printed steps in order. Notes about %s appear at the end of the section, with advice on %s.", a, s, s, a)
			if p == 2 {
				if sp, ok := special[page]; ok {
					text = sp
				}
			}
			pdf.MultiCell(0, 6, text, "", "", false)
			pdf.Ln(3)
		}
	}
	var buf bytes.Buffer
	if err := pdf.Output(&buf); err != nil {
		t.Fatal(err)
	}

	s := startStack(t, stackOpts{})
	key, _ := s.tenantKey("acme")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	vs, took := storePDF(t, client, "manual.pdf", buf.Bytes(), 60*time.Second)
	t.Logf("70-page PDF searchable %s after it was added", took.Round(time.Millisecond))
	for q, page := range map[string]int{
		"Is my warranty still valid if I drop the device?": 12,
		"How often should the battery be replaced?":        37,
		"Can kids use this appliance without an adult?":    58,
	} {
		res, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String(q)}})
		if err != nil || len(res.Data) == 0 {
			t.Fatalf("%q: %v", q, err)
		}
		found := false
		for _, r := range res.Data[:min(3, len(res.Data))] {
			if int(r.Attributes["page"].OfFloat) == page || slices.Contains(strings.Split(r.Attributes["pages"].OfString, ","), strconv.Itoa(page)) {
				found = true
			}
		}
		if !found {
			t.Fatalf("%q: page %d not in the top 3 (top: page %v %q)", q, page, res.Data[0].Attributes["page"].OfFloat, res.Data[0].Content[0].Text)
		}
	}
}
