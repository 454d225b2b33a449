package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/aiforge/aiforge/pkg/objstore"
)

// Materialise copies a version's files from the object store into dir, for
// an engine to load, checking each file's size and SHA-256 against the
// catalog. A file already there and intact is kept. Files are written to a
// temporary name, synced and renamed, so dir never holds a partial or
// unverified file under its real name. It returns the number of bytes
// copied.
func Materialise(ctx context.Context, objs objstore.Store, v Version, dir string) (int64, error) {
	if len(v.Files) == 0 {
		return 0, fmt.Errorf("version %d has no files", v.Version)
	}
	var copied int64
	for _, f := range v.Files {
		rel := filepath.FromSlash(f.Path)
		if !filepath.IsLocal(rel) {
			return copied, fmt.Errorf("version %d: file path %q leaves the directory", v.Version, f.Path)
		}
		if f.SHA256 == "" {
			return copied, fmt.Errorf("version %d: file %q has no SHA-256 in the catalog", v.Version, f.Path)
		}
		dst := filepath.Join(dir, rel)
		if VerifyFile(dst, f) == nil {
			continue
		}
		if err := fetchFile(ctx, objs, v.Prefix+f.Path, dst, f); err != nil {
			return copied, fmt.Errorf("version %d: %w", v.Version, err)
		}
		copied += f.Size
	}
	return copied, nil
}

// VerifyFile checks that path holds f (size and SHA-256).
func VerifyFile(path string, f File) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	h := sha256.New()
	n, err := io.Copy(h, fh)
	if err != nil {
		return err
	}
	return checkDigest(f, n, h.Sum(nil))
}

func checkDigest(f File, n int64, sum []byte) error {
	if n != f.Size {
		return fmt.Errorf("file %q has %d bytes, the catalog says %d", f.Path, n, f.Size)
	}
	if got := hex.EncodeToString(sum); !strings.EqualFold(got, f.SHA256) {
		return fmt.Errorf("file %q has SHA-256 %s, the catalog says %s", f.Path, got, f.SHA256)
	}
	return nil
}

func fetchFile(ctx context.Context, objs objstore.Store, key, dst string, f File) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("file %q: %w", f.Path, err)
	}
	rc, _, err := objs.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("file %q: object store: %w", f.Path, err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".partial-"+filepath.Base(dst)+"-*")
	if err != nil {
		return fmt.Errorf("file %q: %w", f.Path, err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	// Read one byte past the expected size so an object that grew is caught.
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(rc, f.Size+1))
	if err != nil {
		return fmt.Errorf("file %q: copying: %w", f.Path, err)
	}
	if err := checkDigest(f, n, h.Sum(nil)); err != nil {
		return fmt.Errorf("object store copy does not match the catalog: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("file %q: %w", f.Path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("file %q: %w", f.Path, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("file %q: %w", f.Path, err)
	}
	keep = true
	return nil
}
