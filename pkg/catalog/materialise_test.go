package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/objstore"
)

func TestMaterialise(t *testing.T) {
	ctx := context.Background()
	objs, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"model.safetensors": bytes.Repeat([]byte{7}, 4096), "sub/config.json": []byte(`{"a":1}`)}
	v := Version{Version: 3, Prefix: "models/m/v3/"}
	for p, b := range files {
		info, err := objs.Put(ctx, v.Prefix+p, bytes.NewReader(b), int64(len(b)), "")
		if err != nil {
			t.Fatal(err)
		}
		v.Files = append(v.Files, File{Path: p, Size: info.Size, SHA256: info.SHA256})
	}
	dir := t.TempDir()
	n, err := Materialise(ctx, objs, v, dir)
	if err != nil || n != 4096+7 {
		t.Fatalf("materialise: %d bytes, %v", n, err)
	}
	for p, b := range files {
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%s: %v", p, err)
		}
	}
	// Intact files are kept; a damaged one is fetched again.
	if err := os.WriteFile(filepath.Join(dir, "sub/config.json"), []byte(`{"a":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := Materialise(ctx, objs, v, dir); err != nil || n != 7 {
		t.Fatalf("second materialise: %d bytes, %v (want only the damaged file)", n, err)
	}
	// An object that no longer matches the catalog is refused and leaves
	// nothing under the file's name.
	bad := bytes.Repeat([]byte{8}, 4096)
	if _, err := objs.Put(ctx, v.Prefix+"model.safetensors", bytes.NewReader(bad), int64(len(bad)), ""); err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	if _, err := Materialise(ctx, objs, v, dir2); err == nil || !strings.Contains(err.Error(), "does not match the catalog") {
		t.Fatalf("tampered object: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, "model.safetensors")); !os.IsNotExist(err) {
		t.Fatalf("a tampered file was left: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir2, ".partial-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	// Paths that leave the directory and files without digests are refused.
	sum := sha256.Sum256(nil)
	for _, f := range []File{{Path: "../x", Size: 0, SHA256: hex.EncodeToString(sum[:])}, {Path: "y", Size: 0}} {
		if _, err := Materialise(ctx, objs, Version{Version: 1, Prefix: "p/", Files: []File{f}}, t.TempDir()); err == nil {
			t.Fatalf("file %+v accepted", f)
		}
	}
}
