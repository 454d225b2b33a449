package e2e

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-pdf/fpdf"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestPDFSearchCitesPages: a multi-page PDF is searchable by keyword with no
// embedding engine, and the result names the page its text came from.
func TestPDFSearchCitesPages(t *testing.T) {
	pdf := fpdf.New("P", "mm", "A4", "")
	topics := []string{"billing and invoices", "warranty and repairs", "shipping and returns"}
	for i, topic := range topics {
		pdf.AddPage()
		pdf.SetFont("Helvetica", "B", 18)
		pdf.Cell(0, 10, fmt.Sprintf("Chapter %d: %s", i+1, topic))
		pdf.Ln(14)
		pdf.SetFont("Helvetica", "", 11)
		for p := 0; p < 4; p++ {
			text := fmt.Sprintf("This page is about %s. Paragraph %d explains the policy in detail for customers.", topic, p+1)
			if i == 1 && p == 2 {
				text = "A broken screen is replaced free of charge within two years of purchase."
			}
			pdf.MultiCell(0, 6, text, "", "", false)
			pdf.Ln(4)
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
	file, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(&buf, "policies.pdf", "application/pdf"), Purpose: openai.FilePurposeAssistants})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := client.VectorStores.New(ctx, openai.VectorStoreNewParams{FileIDs: []string{file.ID},
		ChunkingStrategy: openai.FileChunkingStrategyParamUnion{OfStatic: &openai.StaticFileChunkingStrategyObjectParam{
			Static: openai.StaticFileChunkingStrategyParam{MaxChunkSizeTokens: 100, ChunkOverlapTokens: 0}}}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() bool {
		f, err := client.VectorStores.Files.Get(ctx, vs.ID, file.ID)
		return err == nil && f.Status != openai.VectorStoreFileStatusInProgress
	}, "PDF processed")
	if f, _ := client.VectorStores.Files.Get(ctx, vs.ID, file.ID); f.Status != openai.VectorStoreFileStatusCompleted {
		t.Fatalf("PDF %s: %+v", f.Status, f.LastError)
	}
	page, err := client.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
		Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("Will you replace my broken screens?")}})
	if err != nil || len(page.Data) == 0 {
		t.Fatalf("search: %v %+v", err, page)
	}
	top := page.Data[0]
	if !bytes.Contains([]byte(top.Content[0].Text), []byte("broken screen")) || top.Attributes["page"].OfFloat != 2 {
		t.Fatalf("top result: page %v, text %q", top.Attributes["page"], top.Content[0].Text)
	}
}
