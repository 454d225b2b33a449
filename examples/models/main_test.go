package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/aiforge/aiforge/services/guardian/scan"
)

// The folders get the guardian's verdicts the README shows: tiny-chat and
// support-lora pass, bad-model is refused for its pickle.
func TestFoldersMeetTheGuardian(t *testing.T) {
	dir := t.TempDir()
	if err := write(io.Discard, dir, 1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v := scan.ScanDirWith(ctx, os.DirFS(filepath.Join(dir, "tiny-chat")), scan.Options{})
	if !v.Accepted || v.Format != "safetensors" || v.Params != 45056 || v.License != "apache-2.0" || len(v.Files) != 5 {
		t.Fatalf("tiny-chat: %+v", v)
	}
	v = scan.ScanDirWith(ctx, os.DirFS(filepath.Join(dir, "support-lora")), scan.Options{Kind: scan.KindAdapter})
	if !v.Accepted || v.Params != 1024 || v.License != "needs-review" {
		t.Fatalf("support-lora: %+v", v)
	}
	v = scan.ScanDirWith(ctx, os.DirFS(filepath.Join(dir, "bad-model")), scan.Options{})
	if v.Accepted || len(v.Reasons) != 1 || v.Reasons[0].Code != "code_bearing_pickle" || v.Reasons[0].File != "pytorch_model.bin" {
		t.Fatalf("bad-model: %+v", v)
	}
	// Another revision is another version's content: same shapes, new digests.
	dir2 := t.TempDir()
	if err := write(io.Discard, dir2, 2); err != nil {
		t.Fatal(err)
	}
	v2 := scan.ScanDirWith(ctx, os.DirFS(filepath.Join(dir2, "tiny-chat")), scan.Options{})
	if !v2.Accepted || v2.Params != 45056 {
		t.Fatalf("tiny-chat revision 2: %+v", v2)
	}
	digest := func(v scan.Verdict, p string) string {
		for _, f := range v.Files {
			if f.Path == p {
				return f.SHA256
			}
		}
		return ""
	}
	v1 := scan.ScanDirWith(ctx, os.DirFS(filepath.Join(dir, "tiny-chat")), scan.Options{})
	if d := digest(v1, "model.safetensors"); d == "" || d == digest(v2, "model.safetensors") {
		t.Fatalf("revision 2 has the same weights as revision 1 (%s)", d)
	}
}
