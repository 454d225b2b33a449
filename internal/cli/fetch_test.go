package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
)

// publish records a published verdict for a version, as the guardian would.
func publish(t *testing.T, cat *catalog.Store, name string, version int, status string) {
	t.Helper()
	if _, err := cat.ApplyVerdict(context.Background(), events.ModelVerdictV1{Name: name, Version: version, Status: status,
		License: "apache-2.0", Format: "safetensors", ScannedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
}

// dirFiles reads every file below dir (relative "/" paths).
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(t *testing.T, dir string, want map[string][]byte) {
	t.Helper()
	got := dirFiles(t, dir)
	rec, ok := got[cli.VersionFile]
	if !ok {
		t.Fatalf("%s not written; dir holds %v", cli.VersionFile, keys(got))
	}
	delete(got, cli.VersionFile)
	if len(got) != len(want) {
		t.Fatalf("dir holds %v, want %v", keys(got), keys(want))
	}
	for p, b := range want {
		if !bytes.Equal(got[p], b) {
			t.Fatalf("%s differs (%d bytes, want %d)", p, len(got[p]), len(b))
		}
	}
	var fv cli.FetchedVersion
	if err := json.Unmarshal(rec, &fv); err != nil || fv.Name == "" || fv.Version == 0 || len(fv.Files) != len(want) || fv.Source.Type != events.ModelSourceUpload {
		t.Fatalf("%s: %s (%v)", cli.VersionFile, rec, err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestFetchModel(t *testing.T) {
	cl, cat, _ := startEdgeObjects(t)
	ctx := context.Background()
	src := t.TempDir()
	files := map[string][]byte{
		"model.safetensors": bytes.Repeat([]byte("weights!"), 2*partSize/8+3),
		"sub/config.json":   []byte(`{"hidden":8}`),
		"README.md":         []byte("---\nlicense: apache-2.0\n---\n"),
	}
	writeFiles(t, src, files)
	up, err := cl.UploadModel(ctx, cli.UploadOptions{Dir: src, Name: "acme/fetch", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	v := up.Version.Version

	dir := filepath.Join(t.TempDir(), "weights")
	// Scanning: not fetched.
	if _, err := cl.FetchModel(ctx, cli.FetchOptions{Name: "acme/fetch", Version: v, Dir: dir}); err == nil || !strings.Contains(err.Error(), "scanning") {
		t.Fatalf("fetch of a scanning version: %v", err)
	}
	if _, err := cl.FetchModel(ctx, cli.FetchOptions{Name: "acme/fetch", Dir: dir}); err == nil || !strings.Contains(err.Error(), "no published version") {
		t.Fatalf("fetch latest without a published version: %v", err)
	}
	publish(t, cat, "acme/fetch", v, events.VerdictPublished)

	var out bytes.Buffer
	progress := func(total int64) *cli.Progress { return cli.NewProgress(&out, false, "fetch", total) }
	res, err := cl.FetchModel(ctx, cli.FetchOptions{Name: "acme/fetch", Dir: dir, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	if res.Version.Version != v || res.Fetched != 3 || res.Present != 0 || res.FetchedBytes != res.Bytes {
		t.Fatalf("first fetch %+v", res)
	}
	sameFiles(t, dir, files)
	if !strings.Contains(out.String(), "100%") {
		t.Fatalf("progress %q", out.String())
	}

	// Again: nothing to download.
	res, err = cl.FetchModel(ctx, cli.FetchOptions{Name: "acme/fetch", Version: v, Dir: dir})
	if err != nil || res.Fetched != 0 || res.Present != 3 || res.FetchedBytes != 0 {
		t.Fatalf("second fetch %+v %v", res, err)
	}
	sameFiles(t, dir, files)

	// A damaged local file (same size) is downloaded again, the rest kept.
	damaged := bytes.Clone(files["model.safetensors"])
	damaged[10] ^= 0xff
	writeFiles(t, dir, map[string][]byte{"model.safetensors": damaged})
	res, err = cl.FetchModel(ctx, cli.FetchOptions{Name: "acme/fetch", Dir: dir})
	if err != nil || res.Fetched != 1 || res.Present != 2 {
		t.Fatalf("fetch over a damaged file %+v %v", res, err)
	}
	sameFiles(t, dir, files)

	// Through a deployment.
	if err := cl.Do(ctx, "POST", "/admin/v1/deployments", map[string]any{"model": "fetchy", "catalog": "acme/fetch", "version": v}, nil); err != nil {
		t.Fatal(err)
	}
	dep := t.TempDir()
	res, err = cl.FetchModel(ctx, cli.FetchOptions{Deployment: "fetchy", Dir: dep})
	if err != nil || res.Name != "acme/fetch" || res.Version.Version != v || res.Fetched != 3 {
		t.Fatalf("fetch by deployment %+v %v", res, err)
	}
	sameFiles(t, dep, files)
	if _, err := cl.FetchModel(ctx, cli.FetchOptions{Name: "acme/other", Deployment: "fetchy", Dir: dep}); err == nil {
		t.Fatal("a deployment of another catalog entry was fetched")
	}

	// A rejected version is never fetched.
	up2, err := cl.UploadModel(ctx, cli.UploadOptions{Dir: src, Name: "acme/fetch", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, cat, "acme/fetch", up2.Version.Version, events.VerdictRejected)
	empty := t.TempDir()
	_, err = cl.FetchModel(ctx, cli.FetchOptions{Name: "acme/fetch", Version: up2.Version.Version, Dir: empty})
	if err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Fatalf("fetch of a rejected version: %v", err)
	}
	if got := dirFiles(t, empty); len(got) != 0 {
		t.Fatalf("a refused fetch left %v", keys(got))
	}
}

func TestFetchModelRefusesWrongBytes(t *testing.T) {
	cl, cat, objs := startEdgeObjects(t)
	ctx := context.Background()
	src := t.TempDir()
	files := map[string][]byte{"model.safetensors": bytes.Repeat([]byte("abcdefgh"), 100), "config.json": []byte(`{}`)}
	writeFiles(t, src, files)
	up, err := cl.UploadModel(ctx, cli.UploadOptions{Dir: src, Name: "acme/tamper", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, cat, "acme/tamper", up.Version.Version, events.VerdictPublished)

	// A proxy that flips a byte of every model file it passes on: the
	// digest check refuses the file and leaves nothing behind.
	target, _ := url.Parse(cl.BaseURL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Request.URL.Path, "/admin/v1/model-files") {
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if len(b) > 0 {
				b[len(b)/2] ^= 0x01
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
		}
		return nil
	}
	proxy := httptest.NewServer(rp)
	defer proxy.Close()
	evil := &cli.Client{BaseURL: proxy.URL, Token: adminKey}
	dir := t.TempDir()
	_, err = evil.FetchModel(ctx, cli.FetchOptions{Name: "acme/tamper", Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "SHA-256") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("wrong bytes: %v", err)
	}
	if got := dirFiles(t, dir); len(got) != 0 {
		t.Fatalf("a refused file was left: %v", keys(got))
	}

	// An object changed in the store after the scan: the edge refuses it.
	e, err := cat.Get(ctx, "acme/tamper")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := e.Find(up.Version.Version)
	bad := bytes.Repeat([]byte("ABCDEFGH"), 100)
	if _, err := objs.Put(ctx, v.Prefix+"model.safetensors", bytes.NewReader(bad), int64(len(bad)), ""); err != nil {
		t.Fatal(err)
	}
	_, err = cl.FetchModel(ctx, cli.FetchOptions{Name: "acme/tamper", Dir: dir})
	var ae *cli.APIError
	if !errors.As(err, &ae) || ae.Code != "model_file_corrupt" {
		t.Fatalf("tampered object: %v", err)
	}
	got := dirFiles(t, dir)
	if _, ok := got["model.safetensors"]; ok {
		t.Fatal("the tampered file was written")
	}
	if _, ok := got[cli.VersionFile]; ok {
		t.Fatal("an incomplete fetch wrote its record")
	}
	for p := range got {
		if strings.Contains(p, ".tmp") {
			t.Fatalf("temporary file %s left", p)
		}
	}
}

func TestFetchModelKeepsPathsInside(t *testing.T) {
	// A catalog answer naming a file outside the directory (the edge never
	// stores one; a hostile server might answer one).
	for _, p := range []string{"../evil", "/etc/evil", "a/../../evil", cli.VersionFile} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasPrefix(r.URL.Path, "/admin/v1/catalog/") {
				http.Error(w, "unexpected", http.StatusTeapot)
				return
			}
			_ = json.NewEncoder(w).Encode(catalog.Entry{Name: "x", Versions: []catalog.Version{{Version: 1, Status: catalog.StatusPublished,
				Files: []catalog.File{{Path: p, Size: 1, SHA256: hexSum([]byte("x"))}}}}})
		}))
		parent := t.TempDir()
		dir := filepath.Join(parent, "in")
		_, err := (&cli.Client{BaseURL: srv.URL}).FetchModel(context.Background(), cli.FetchOptions{Name: "x", Dir: dir})
		srv.Close()
		if err == nil {
			t.Fatalf("path %q accepted", p)
		}
		if got := dirFiles(t, parent); len(got) != 0 {
			t.Fatalf("path %q: files written %v", p, keys(got))
		}
	}
}
