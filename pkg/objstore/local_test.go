package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/objstore"
)

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// tree lists every path under dir, relative and "/"-separated.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLocalConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (objstore.LocalConfig{}).Validate(); err == nil {
		t.Error("empty Dir accepted")
	}
	if _, err := objstore.NewLocal(objstore.LocalConfig{Dir: "  "}); err == nil {
		t.Error("blank Dir accepted")
	}
}

// TestLocalPathTraversal throws hostile keys at the store and checks that
// nothing appears outside its directory.
func TestLocalPathTraversal(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	if err := os.WriteFile(filepath.Join(parent, "secret.txt"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "store")
	s, err := objstore.NewLocal(objstore.LocalConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx := t.Context()

	refused := []string{
		"../secret.txt", "../../etc/passwd", "/etc/passwd", "a/../../secret.txt", "..", "../store/objects/x",
		"./../secret.txt", "a/./../..", "x\x00/../../secret.txt", "a//../secret.txt",
	}
	for _, key := range refused {
		if _, err := s.Put(ctx, key, strings.NewReader("pwned"), 5, ""); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
		if rc, _, err := s.Get(ctx, key); err == nil {
			_ = rc.Close()
			t.Errorf("Get(%q) succeeded", key)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	// Odd but valid keys stay inside objects/ under their literal names.
	odd := []string{"..a", "a..", "...", "a/..b", ".hidden", "%2e%2e/secret.txt", `..\..\secret.txt`, "~/x", "$HOME/x", "tmp/x", "meta/x"}
	for _, key := range odd {
		if _, err := s.Put(ctx, key, strings.NewReader(key), int64(len(key)), ""); err != nil {
			t.Errorf("Put(%q): %v", key, err)
			continue
		}
		got, err := os.ReadFile(filepath.Join(dir, "objects", filepath.FromSlash(key)))
		if err != nil || string(got) != key {
			t.Errorf("key %q is not the file objects/%s: %q, %v", key, key, got, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(parent, "secret.txt")); string(got) != "secret" {
		t.Errorf("secret.txt changed: %q", got)
	}
	if got := tree(t, parent); !slices.Equal(got[:1], []string{"secret.txt"}) || slices.ContainsFunc(got[1:], func(p string) bool { return !strings.HasPrefix(p, "store") }) {
		t.Errorf("files outside the store: %q", got)
	}
	for _, p := range tree(t, filepath.Join(dir, "tmp")) {
		t.Errorf("temp file left behind: %s", p)
	}
}

// TestLocalSymlinkEscape plants symlinks inside the store that point out of
// it: the store must neither read nor write through them.
func TestLocalSymlinkEscape(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	outside := filepath.Join(parent, "outside")
	if err := os.Mkdir(outside, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "store")
	s, err := objstore.NewLocal(objstore.LocalConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx := t.Context()
	objects := filepath.Join(dir, "objects")
	if err := os.Symlink(outside, filepath.Join(objects, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(objects, "rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(objects, "file")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"abs/secret.txt", "rel/secret.txt", "file"} {
		if rc, _, err := s.Get(ctx, key); err == nil {
			body, _ := io.ReadAll(rc)
			_ = rc.Close()
			t.Errorf("Get(%q) read %q through a symlink out of the store", key, body)
		}
		if _, err := s.Stat(ctx, key); err == nil {
			t.Errorf("Stat(%q) followed a symlink out of the store", key)
		}
	}
	for _, key := range []string{"abs/evil.txt", "rel/evil.txt", "file"} {
		if _, err := s.Put(ctx, key, strings.NewReader("evil"), 4, ""); err == nil && key != "file" {
			t.Errorf("Put(%q) wrote through a symlink", key)
		}
	}
	// Replacing the link "file" with a real object is fine; the target is untouched.
	if got, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(got) != "secret" {
		t.Errorf("outside/secret.txt changed: %q", got)
	}
	for _, p := range tree(t, outside) {
		if p != "secret.txt" {
			t.Errorf("file created outside the store: %s", p)
		}
	}
	for info, err := range s.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		if info.Key != "file" {
			t.Errorf("List yields %q from outside the store", info.Key)
		}
	}
}

// TestLocalForeignFile: a file copied into objects/ by hand is served, and
// hashed once.
func TestLocalForeignFile(t *testing.T) {
	t.Parallel()
	s := newLocal(t)
	body := []byte("weights copied in by an operator")
	p := filepath.Join(s.Dir(), "objects", "manual", "weights.bin")
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, body, 0o640); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		info, err := s.Stat(t.Context(), "manual/weights.bin")
		if err != nil {
			t.Fatal(err)
		}
		if info.SHA256 != sha(body) || info.Size != int64(len(body)) || info.ContentType != objstore.DefaultContentType {
			t.Errorf("Stat = %+v", info)
		}
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "meta", "manual", "weights.bin")); err != nil {
		t.Errorf("sidecar not written: %v", err)
	}
}

// warnCounter counts the warnings a store logs.
type warnCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (c *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		c.mu.Lock()
		c.msgs = append(c.msgs, r.Message)
		c.mu.Unlock()
	}
	return nil
}
func (c *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *warnCounter) WithGroup(string) slog.Handler      { return c }

func (c *warnCounter) warnings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

// TestLocalRepairNewPrefix: the sidecar of a file placed by hand under a
// prefix that has no metadata directory yet is written after creating that
// directory, and the successful retry logs no warning.
func TestLocalRepairNewPrefix(t *testing.T) {
	t.Parallel()
	warns := &warnCounter{}
	s, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir(), Logger: slog.New(warns)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	body := []byte("weights copied in by an operator")
	p := filepath.Join(s.Dir(), "objects", "deep", "er", "w.bin")
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, body, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(t.Context(), "deep/er/w.bin"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "meta", "deep", "er", "w.bin")); err != nil {
		t.Errorf("sidecar not written: %v", err)
	}
	if w := warns.warnings(); len(w) > 0 {
		t.Errorf("a repair that succeeded on retry logged warnings %q", w)
	}
	if left := tree(t, filepath.Join(s.Dir(), "tmp")); len(left) > 0 {
		t.Errorf("temp files left behind: %q", left)
	}
}

// TestLocalStaleSidecar: a body changed behind the store's back (or a crash
// between the two renames of a Put) is detected, not trusted.
func TestLocalStaleSidecar(t *testing.T) {
	t.Parallel()
	s := newLocal(t)
	ctx := t.Context()
	if _, err := s.Put(ctx, "k", strings.NewReader("old body"), 8, "text/plain"); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(s.Dir(), "objects", "k")
	if err := os.WriteFile(p, []byte("new body"), 0o640); err != nil { // same size, same inode
		t.Fatal(err)
	}
	if err := os.Chtimes(p, time.Now(), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.SHA256 != sha([]byte("new body")) {
		t.Errorf("Stat trusted a stale sidecar: %s", info.SHA256)
	}
	if info.ContentType != "text/plain" {
		t.Errorf("content type of a same-size rewrite = %q, want it kept", info.ContentType)
	}
	rc, ginfo, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Close()
	if ginfo.SHA256 != info.SHA256 {
		t.Errorf("Get sha %s != Stat sha %s", ginfo.SHA256, info.SHA256)
	}
	// A garbage sidecar is rebuilt as well.
	if err := os.WriteFile(filepath.Join(s.Dir(), "meta", "k"), []byte("{not json"), 0o640); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "k"); err != nil || info.SHA256 != sha([]byte("new body")) {
		t.Errorf("Stat with a garbage sidecar = %+v, %v", info, err)
	}
}

func TestLocalConflict(t *testing.T) {
	t.Parallel()
	s := newLocal(t)
	ctx := t.Context()
	for _, k := range []string{"a", "c/d"} {
		if _, err := s.Put(ctx, k, strings.NewReader(k), int64(len(k)), ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a/b", "a/b/c", "c"} {
		if _, err := s.Put(ctx, k, strings.NewReader("x"), 1, ""); !errors.Is(err, objstore.ErrConflict) {
			t.Errorf("Put(%q) = %v, want ErrConflict", k, err)
		}
	}
	for _, k := range []string{"a", "c/d"} {
		rc, _, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(rc)
		_ = rc.Close()
		if string(body) != k {
			t.Errorf("%q now holds %q", k, body)
		}
	}
	if err := s.Delete(ctx, "c"); err != nil { // a prefix, not an object
		t.Errorf("Delete(prefix) = %v", err)
	}
	for _, p := range tree(t, filepath.Join(s.Dir(), "tmp")) {
		t.Errorf("temp file left behind: %s", p)
	}
}

func TestLocalReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := objstore.NewLocal(objstore.LocalConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	put, err := s.Put(t.Context(), "docs/x.json", bytes.NewReader([]byte(`{}`)), 2, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()

	// A stale temp file from a crashed Put is collected at open; a fresh one
	// (an upload in progress elsewhere) is left alone.
	stale := filepath.Join(dir, "tmp", "stale.part")
	fresh := filepath.Join(dir, "tmp", "fresh.part")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}

	s, err = objstore.NewLocal(objstore.LocalConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	got, err := s.Stat(t.Context(), "docs/x.json")
	if err != nil || got != put {
		t.Errorf("after reopen Stat = %+v, %v; want %+v", got, err, put)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale temp file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp file removed: %v", err)
	}
}
