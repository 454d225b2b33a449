package e2e

import (
	"bytes"
	"context"
	"errors"
	"github.com/aiforge/aiforge/internal/app"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestFilesAPIWithTheSDK: upload, list, get, content and delete through
// the official SDK; another tenant's file answers 404.
func TestFilesAPIWithTheSDK(t *testing.T) {
	s := startStack(t, stackOpts{})
	acme, _ := s.tenantKey("acme")
	globex, _ := s.tenantKey("globex")
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(acme), option.WithMaxRetries(0))
	other := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(globex), option.WithMaxRetries(0))

	content := strings.Repeat("The quick brown fox jumps over the lazy dog.\n", 1000)
	f, err := client.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader(content), "fox.txt", "text/plain"),
		Purpose: openai.FilePurposeAssistants,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.ID, "file-") || f.Bytes != int64(len(content)) || f.Filename != "fox.txt" || string(f.Purpose) != "assistants" {
		t.Fatalf("file = %+v", f)
	}
	second, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("{}"), "b.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}

	got, err := client.Files.Get(ctx, f.ID)
	if err != nil || got.ID != f.ID {
		t.Fatalf("get: %v %+v", err, got)
	}
	resp, err := client.Files.Content(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != content {
		t.Fatalf("content differs: %d bytes", len(body))
	}
	page, err := client.Files.List(ctx, openai.FileListParams{})
	if err != nil || len(page.Data) != 2 || page.Data[0].ID != second.ID {
		t.Fatalf("list: %v %+v", err, page)
	}
	page, err = client.Files.List(ctx, openai.FileListParams{Purpose: openai.String("batch")})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != second.ID {
		t.Fatalf("list by purpose: %v %+v", err, page)
	}
	page, err = client.Files.List(ctx, openai.FileListParams{Limit: openai.Int(1), Order: openai.FileListParamsOrderAsc})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != f.ID || !page.HasMore {
		t.Fatalf("paged list: %v %+v", err, page)
	}

	// Another tenant cannot see it.
	var apiErr *openai.Error
	if _, err := other.Files.Get(ctx, f.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("other tenant got %v", err)
	}
	if p, _ := other.Files.List(ctx, openai.FileListParams{}); p == nil || len(p.Data) != 0 {
		t.Fatalf("other tenant lists %+v", p)
	}

	del, err := client.Files.Delete(ctx, f.ID)
	if err != nil || !del.Deleted {
		t.Fatalf("delete: %v %+v", err, del)
	}
	if _, err := client.Files.Get(ctx, f.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("after delete: %v", err)
	}

	// A bad purpose names the param.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("purpose", "fine-tune-me")
	fw, _ := mw.CreateFormFile("file", "x.txt")
	_, _ = fw.Write([]byte("x"))
	_ = mw.Close()
	req, _ := http.NewRequest("POST", s.url+"/v1/files", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+acme)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 400 || !strings.Contains(string(b), `"param":"purpose"`) {
		t.Fatalf("bad purpose: %d %s", r.StatusCode, b)
	}
}

// TestFileTooLargeIs413AndLeavesNothing: an upload over the limit gets a
// clear 413 and no file is recorded.
func TestFileTooLargeIs413AndLeavesNothing(t *testing.T) {
	s := startStack(t, stackOpts{mutate: func(o *app.Options) { o.Edge.MaxFileBytes = 64 << 10 }})
	key, _ := s.tenantKey("acme")
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	_, err := client.Files.New(context.Background(), openai.FileNewParams{
		File:    openai.File(bytes.NewReader(make([]byte, 200<<10)), "big.bin", "application/octet-stream"),
		Purpose: openai.FilePurposeUserData,
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 413 || apiErr.Code != "request_too_large" {
		t.Fatalf("got %v", err)
	}
	page, err := client.Files.List(context.Background(), openai.FileListParams{})
	if err != nil || len(page.Data) != 0 {
		t.Fatalf("a refused upload was recorded: %v %+v", err, page)
	}
}
