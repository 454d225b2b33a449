package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const (
	testToken = "hf_SuperSecretToken_0123456789"
	commitA   = "0123456789abcdef0123456789abcdef01234567"
	commitB   = "fedcba9876543210fedcba9876543210fedcba98"
)

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// echoHeaders writes an error body that echoes every request header, like a
// careless server would; the client must never surface it.
func echoHeaders(w http.ResponseWriter, r *http.Request, code int) {
	var b strings.Builder
	for k, v := range r.Header {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(v, ","))
	}
	w.Header().Set("X-Echo", r.Header.Get("Authorization"))
	http.Error(w, b.String(), code)
}

type fakeHub struct {
	t        *testing.T
	hub      *httptest.Server
	cdn      *httptest.Server
	evil     *httptest.Server
	mu       sync.Mutex
	cdnAuth  []string
	evilHits int
	files    map[string][]byte // path -> content served by CDN
	tree     [][]map[string]any
}

func newFakeHub(t *testing.T) *fakeHub {
	f := &fakeHub{t: t, files: map[string][]byte{}}
	f.cdn = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.cdnAuth = append(f.cdnAuth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		if r.URL.Query().Get("sig") != "s3cr3t" {
			echoHeaders(w, r, http.StatusForbidden)
			return
		}
		content, ok := f.files[strings.TrimPrefix(r.URL.Path, "/blob/")]
		if !ok {
			echoHeaders(w, r, http.StatusNotFound)
			return
		}
		_, _ = w.Write(content)
	}))
	f.evil = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.evilHits++
		f.mu.Unlock()
		_, _ = w.Write([]byte("evil"))
	}))
	f.hub = httptest.NewServer(http.HandlerFunc(f.serveHub))
	t.Cleanup(func() { f.hub.Close(); f.cdn.Close(); f.evil.Close() })
	return f
}

func (f *fakeHub) authorized(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer "+testToken
}

func (f *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	gated := strings.Contains(p, "org/gated")
	if gated && !f.authorized(r) {
		w.Header().Set("X-Error-Code", "GatedRepo")
		echoHeaders(w, r, http.StatusUnauthorized)
		return
	}
	switch {
	case p == "/api/models/org/model/revision/main" || p == "/api/models/org/gated/revision/main":
		_ = json.NewEncoder(w).Encode(map[string]any{"sha": commitA, "id": "org/model"})
	case p == "/api/models/org/model/revision/refs%2Fpr%2F1":
		_ = json.NewEncoder(w).Encode(map[string]any{"sha": commitB})
	case strings.HasPrefix(p, "/api/models/org/model/tree/"+commitA) || strings.HasPrefix(p, "/api/models/org/bad/tree/"+commitA):
		if r.URL.Query().Get("recursive") != "true" {
			http.Error(w, "want recursive", 400)
			return
		}
		page, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		if page+1 < len(f.tree) {
			w.Header().Set("Link", fmt.Sprintf(`<%s%s?recursive=true&cursor=%d>; rel="next"`, f.hub.URL, r.URL.Path, page+1))
		}
		_ = json.NewEncoder(w).Encode(f.tree[page])
	case strings.HasPrefix(p, "/org/model/resolve/") || strings.HasPrefix(p, "/org/gated/resolve/"):
		rest := strings.SplitN(strings.TrimPrefix(strings.TrimPrefix(p, "/org/model/resolve/"), "/org/gated/resolve/"), "/", 2)
		commit, path := rest[0], rest[1]
		path, _ = url.PathUnescape(path)
		served := commit
		if path == "wrong-commit.bin" {
			served = commitB
		}
		w.Header().Set("X-Repo-Commit", served)
		content, ok := f.files[path]
		if !ok {
			w.Header().Set("X-Error-Code", "EntryNotFound")
			echoHeaders(w, r, http.StatusNotFound)
			return
		}
		switch {
		case path == "evil.bin":
			http.Redirect(w, r, f.evil.URL+"/steal", http.StatusFound)
		case strings.HasSuffix(path, ".safetensors"):
			w.Header().Set("X-Linked-Etag", `"`+sha(content)+`"`)
			w.Header().Set("X-Linked-Size", strconv.Itoa(len(content)))
			http.Redirect(w, r, f.cdn.URL+"/blob/"+path+"?sig=s3cr3t", http.StatusFound)
		default:
			w.Header().Set("ETag", `"abc"`)
			_, _ = w.Write(content)
		}
	default:
		echoHeaders(w, r, http.StatusNotFound)
	}
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func (f *fakeHub) client(t *testing.T, token string, logs *logBuf) *Client {
	cdnHost := strings.TrimPrefix(f.cdn.URL, "http://")
	cfg := Config{BaseURL: f.hub.URL, Token: token, AllowedRedirectHosts: []string{cdnHost}, UserAgent: "test"}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func noLeak(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), testToken) {
		t.Fatalf("token leaked into error: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("signed URL leaked into error: %v", err)
	}
}

func TestResolve(t *testing.T) {
	f := newFakeHub(t)
	c := f.client(t, testToken, nil)
	got, err := c.Resolve(context.Background(), "org/model", "")
	if err != nil || got != commitA {
		t.Fatalf("Resolve main = %q, %v", got, err)
	}
	got, err = c.Resolve(context.Background(), "org/model", "refs/pr/1")
	if err != nil || got != commitB {
		t.Fatalf("Resolve refs/pr/1 = %q, %v", got, err)
	}
	_, err = c.Resolve(context.Background(), "org/missing", "main")
	noLeak(t, err)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing repo: %v", err)
	}
	for _, bad := range []string{"", "model", "org/../x", "/org/x", "org/x/y", "org/x\x00", "../x"} {
		if _, err := c.Resolve(context.Background(), bad, "main"); !errors.Is(err, ErrInvalidRepo) {
			t.Errorf("repo %q: %v", bad, err)
		}
	}
	if _, err := c.Resolve(context.Background(), "org/model", "../../x"); !errors.Is(err, ErrInvalidRevision) {
		t.Errorf("bad revision: %v", err)
	}
}

func TestListFilesPagination(t *testing.T) {
	f := newFakeHub(t)
	lfsOID := sha([]byte("weights"))
	f.tree = [][]map[string]any{
		{
			{"type": "file", "path": "config.json", "size": 12, "oid": "1111111111111111111111111111111111111111"},
			{"type": "directory", "path": "sub", "size": 0, "oid": "2222222222222222222222222222222222222222"},
		},
		{
			{"type": "file", "path": "sub/model.safetensors", "size": 134, "oid": "3333333333333333333333333333333333333333",
				"lfs": map[string]any{"oid": lfsOID, "size": 7, "pointerSize": 134}},
		},
	}
	c := f.client(t, "", nil)
	files, err := c.ListFiles(context.Background(), "org/model", commitA)
	if err != nil {
		t.Fatal(err)
	}
	want := []File{
		{Path: "config.json", Size: 12},
		{Path: "sub/model.safetensors", Size: 7, SHA256: lfsOID, LFS: true},
	}
	if len(files) != len(want) {
		t.Fatalf("got %+v", files)
	}
	for i := range want {
		if files[i] != want[i] {
			t.Errorf("file %d = %+v, want %+v", i, files[i], want[i])
		}
	}
	if _, err := c.ListFiles(context.Background(), "org/model", "main"); !errors.Is(err, ErrInvalidRevision) {
		t.Errorf("non-commit revision accepted: %v", err)
	}
}

func TestListFilesRejectsTraversal(t *testing.T) {
	for _, bad := range []string{"../etc/passwd", "/etc/passwd", "a/../../b", "a/./b", "a//b", "a\x00b", `a\..\b`, "C:/x", "a/"} {
		f := newFakeHub(t)
		f.tree = [][]map[string]any{
			{{"type": "file", "path": "ok.txt", "size": 1}},
			{{"type": "file", "path": bad, "size": 1}},
		}
		c := f.client(t, "", nil)
		_, err := c.ListFiles(context.Background(), "org/bad", commitA)
		if !errors.Is(err, ErrInvalidPath) {
			t.Errorf("path %q: err = %v, want ErrInvalidPath", bad, err)
		}
	}
	c := newFakeHub(t).client(t, "", nil)
	if _, err := c.Download(context.Background(), "org/model", commitA, File{Path: "../x"}, io.Discard, nil); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Download with traversal: %v", err)
	}
}

func TestDownloadLFSRedirect(t *testing.T) {
	f := newFakeHub(t)
	content := bytes.Repeat([]byte("tensor-bytes-"), 50000)
	f.files["sub/model.safetensors"] = content
	logs := &logBuf{}
	c := f.client(t, testToken, logs)
	var buf bytes.Buffer
	var total int64
	calls := 0
	file := File{Path: "sub/model.safetensors", Size: int64(len(content)), SHA256: sha(content), LFS: true}
	got, err := c.Download(context.Background(), "org/model", commitA, file, &buf, func(n int64) { total += n; calls++ })
	if err != nil {
		t.Fatal(err)
	}
	if got != sha(content) || !bytes.Equal(buf.Bytes(), content) {
		t.Fatal("content or digest mismatch")
	}
	if total != int64(len(content)) || calls == 0 {
		t.Fatalf("progress total %d (calls %d), want %d", total, calls, len(content))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.cdnAuth) != 1 {
		t.Fatalf("cdn hits = %d", len(f.cdnAuth))
	}
	if f.cdnAuth[0] != "" {
		t.Fatal("Authorization header reached the redirect host")
	}
	if strings.Contains(logs.String(), testToken) || strings.Contains(logs.String(), "s3cr3t") {
		t.Fatalf("secret in logs: %s", logs.String())
	}
	if logs.String() == "" {
		t.Fatal("expected debug logs")
	}
}

func TestDownloadSmallFileComputesHash(t *testing.T) {
	f := newFakeHub(t)
	content := []byte(`{"model_type":"llama"}`)
	f.files["config.json"] = content
	c := f.client(t, "", nil)
	var buf bytes.Buffer
	got, err := c.Download(context.Background(), "org/model", commitA, File{Path: "config.json", Size: int64(len(content))}, &buf, nil)
	if err != nil || got != sha(content) || buf.String() != string(content) {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestDownloadRedirectRefused(t *testing.T) {
	f := newFakeHub(t)
	f.files["evil.bin"] = []byte("x")
	logs := &logBuf{}
	c := f.client(t, testToken, logs)
	_, err := c.Download(context.Background(), "org/model", commitA, File{Path: "evil.bin", Size: 1}, io.Discard, nil)
	noLeak(t, err)
	if !errors.Is(err, ErrRedirectRefused) {
		t.Fatalf("err = %v, want ErrRedirectRefused", err)
	}
	if f.evilHits != 0 {
		t.Fatal("request reached non-allowed host")
	}
	if strings.Contains(logs.String(), testToken) {
		t.Fatal("token in logs")
	}
}

func TestDownloadCommitMismatch(t *testing.T) {
	f := newFakeHub(t)
	f.files["wrong-commit.bin"] = []byte("abc")
	c := f.client(t, "", nil)
	_, err := c.Download(context.Background(), "org/model", commitA, File{Path: "wrong-commit.bin", Size: 3}, io.Discard, nil)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("err = %v, want ErrMismatch", err)
	}
}

func TestDownloadShaMismatch(t *testing.T) {
	f := newFakeHub(t)
	content := []byte("tampered weights")
	f.files["model.bin"] = content // served directly, no X-Linked-Etag
	c := f.client(t, "", nil)
	file := File{Path: "model.bin", Size: int64(len(content)), SHA256: sha([]byte("original weights")), LFS: true}
	_, err := c.Download(context.Background(), "org/model", commitA, file, io.Discard, nil)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("err = %v, want ErrMismatch", err)
	}
	// Linked etag from the hub disagrees with the listing.
	f.files["x.safetensors"] = content
	file = File{Path: "x.safetensors", Size: int64(len(content)), SHA256: sha([]byte("other")), LFS: true}
	_, err = c.Download(context.Background(), "org/model", commitA, file, io.Discard, nil)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("etag: err = %v, want ErrMismatch", err)
	}
}

func TestDownloadSizeMismatch(t *testing.T) {
	f := newFakeHub(t)
	content := []byte("0123456789")
	f.files["a.bin"] = content
	f.files["b.safetensors"] = content
	c := f.client(t, "", nil)
	for _, file := range []File{
		{Path: "a.bin", Size: 5},
		{Path: "a.bin", Size: 50},
		{Path: "b.safetensors", Size: 9, SHA256: sha(content), LFS: true},
	} {
		_, err := c.Download(context.Background(), "org/model", commitA, file, io.Discard, nil)
		if !errors.Is(err, ErrMismatch) {
			t.Errorf("%+v: err = %v, want ErrMismatch", file, err)
		}
	}
}

// A server that streams more/less bytes than declared, without Content-Length.
func TestDownloadSizeMismatchChunked(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush() // forces chunked encoding, no Content-Length
		_, _ = w.Write([]byte("0123456789"))
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{5, 20} {
		_, err := c.Download(context.Background(), "org/model", commitA, File{Path: "f", Size: size}, io.Discard, nil)
		if !errors.Is(err, ErrMismatch) {
			t.Errorf("size %d: err = %v, want ErrMismatch", size, err)
		}
	}
}

func TestGated(t *testing.T) {
	f := newFakeHub(t)
	content := []byte("gated weights")
	f.files["w.safetensors"] = content
	logs := &logBuf{}
	anon := f.client(t, "", logs)
	_, err := anon.Resolve(context.Background(), "org/gated", "main")
	noLeak(t, err)
	if !errors.Is(err, ErrGated) {
		t.Fatalf("anon resolve: %v", err)
	}

	// Wrong token: the server echoes it back; it must not surface.
	wrong, _ := New(Config{BaseURL: f.hub.URL, Token: testToken + "-wrong", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	_, err = wrong.Resolve(context.Background(), "org/gated", "main")
	if !errors.Is(err, ErrGated) || strings.Contains(err.Error(), testToken) {
		t.Fatalf("wrong token: %v", err)
	}

	c := f.client(t, testToken, logs)
	commit, err := c.Resolve(context.Background(), "org/gated", "main")
	if err != nil || commit != commitA {
		t.Fatalf("authed resolve: %q %v", commit, err)
	}
	file := File{Path: "w.safetensors", Size: int64(len(content)), SHA256: sha(content), LFS: true}
	if _, err := anon.Download(context.Background(), "org/gated", commit, file, io.Discard, nil); !errors.Is(err, ErrGated) {
		t.Fatalf("anon download: %v", err)
	} else {
		noLeak(t, err)
	}
	var buf bytes.Buffer
	if _, err := c.Download(context.Background(), "org/gated", commit, file, &buf, nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.Download(context.Background(), "org/gated", commit, File{Path: "missing.bin", Size: 1}, io.Discard, nil)
	noLeak(t, err)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if strings.Contains(logs.String(), testToken) {
		t.Fatal("token in logs")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.cdnAuth {
		if a != "" {
			t.Fatal("Authorization reached CDN")
		}
	}
}

func TestNewValidation(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "http://user:pw@host", "notaurl", "https://h/?q=1"} {
		if _, err := New(Config{BaseURL: u}); err == nil {
			t.Errorf("BaseURL %q accepted", u)
		}
	}
	if _, err := New(Config{BaseURL: "https://huggingface.co", Token: "a\nb"}); err == nil {
		t.Error("token with newline accepted")
	}
}
