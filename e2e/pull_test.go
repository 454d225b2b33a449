package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/catalog"
)

// hubRepo is one repository of the test hub: its files at one commit.
type hubRepo struct {
	commit string
	files  map[string][]byte
}

// testHub speaks the shapes of the Hugging Face hub's API that the mirror
// uses: revision → commit, the recursive tree with LFS digests, and resolve
// with X-Repo-Commit, X-Linked-Etag and X-Linked-Size. It counts downloads.
type testHub struct {
	mu        sync.Mutex
	repos     map[string]hubRepo
	downloads int
	srv       *httptest.Server
}

func newTestHub(t *testing.T) *testHub {
	h := &testHub{repos: map[string]hubRepo{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *testHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := r.URL.Path
	for name, repo := range h.repos {
		switch {
		case strings.HasPrefix(p, "/api/models/"+name+"/revision/"):
			_ = json.NewEncoder(w).Encode(map[string]string{"sha": repo.commit})
			return
		case p == "/api/models/"+name+"/tree/"+repo.commit:
			var entries []map[string]any
			for path, b := range repo.files {
				e := map[string]any{"type": "file", "path": path, "size": len(b), "oid": "git-oid"}
				if strings.HasSuffix(path, ".safetensors") {
					e["lfs"] = map[string]any{"oid": sha256Hex(b), "size": len(b)}
				}
				entries = append(entries, e)
			}
			_ = json.NewEncoder(w).Encode(entries)
			return
		case strings.HasPrefix(p, "/"+name+"/resolve/"+repo.commit+"/"):
			path := strings.TrimPrefix(p, "/"+name+"/resolve/"+repo.commit+"/")
			b, ok := repo.files[path]
			if !ok {
				http.NotFound(w, r)
				return
			}
			h.downloads++
			w.Header().Set("X-Repo-Commit", repo.commit)
			if strings.HasSuffix(path, ".safetensors") {
				w.Header().Set("X-Linked-Etag", `"`+sha256Hex(b)+`"`)
				w.Header().Set("X-Linked-Size", strconv.Itoa(len(b)))
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			_, _ = w.Write(b)
			return
		}
	}
	http.NotFound(w, r)
}

func (h *testHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.downloads
}

// TestModelPullThroughMirror runs `aiforge models pull`'s code path against
// the all-in-one stack whose guardian mirrors from a test hub: the revision
// is pinned to its commit, the files are scanned and published; pulling the
// same revision again downloads nothing and ends on the same version; an
// unknown repository fails with the hub's reason.
func TestModelPullThroughMirror(t *testing.T) {
	hub := newTestHub(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	shard := safetensorsFile(t, map[string][]int64{"w": {8, 8}})
	hub.repos["acme/tiny-hub"] = hubRepo{commit: commit, files: map[string][]byte{
		"model.safetensors": shard,
		"config.json":       []byte(`{"model_type":"llama"}`),
		"README.md":         []byte("---\nlicense: mit\n---\n# tiny\n"),
	}}
	s := startStack(t, stackOpts{mutate: func(o *app.Options) { o.Guardian.HubURL = hub.srv.URL }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var out bytes.Buffer
	ans, err := s.admin.RequestPull(ctx, cli.PullOptions{Repo: "acme/tiny-hub", Name: "tiny-hub"})
	if err != nil {
		t.Fatal(err)
	}
	p, v, err := s.admin.FollowPull(ctx, ans, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := catalog.Source{Type: "hub", Repo: "acme/tiny-hub", Revision: "main", Commit: commit}
	if p.Skipped || v.Status != catalog.StatusPublished || v.Source != want || v.Parameters != 64 || v.License != "mit" {
		t.Fatalf("pull %+v, version %+v", p, v)
	}
	if n := hub.count(); n != 3 {
		t.Fatalf("%d downloads, want 3", n)
	}
	if !strings.Contains(out.String(), "is commit "+commit) {
		t.Fatalf("output %q", out.String())
	}

	// Again: the commit is already mirrored.
	out.Reset()
	ans, err = s.admin.RequestPull(ctx, cli.PullOptions{Repo: "acme/tiny-hub", Revision: "main", Name: "tiny-hub"})
	if err != nil {
		t.Fatal(err)
	}
	p, v2, err := s.admin.FollowPull(ctx, ans, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Skipped || v2.Version != v.Version || hub.count() != 3 || !strings.Contains(out.String(), "nothing downloaded") {
		t.Fatalf("second pull %+v, version %d, %d downloads, output %q", p, v2.Version, hub.count(), out.String())
	}

	// A repository the hub does not have.
	ans, err = s.admin.RequestPull(ctx, cli.PullOptions{Repo: "acme/missing", Name: "missing"})
	if err != nil {
		t.Fatal(err)
	}
	if _, v3, err := s.admin.FollowPull(ctx, ans, &out, nil); err != nil || v3.Status != catalog.StatusRejected || len(v3.Reasons) == 0 || v3.Reasons[0].Code != "hub_error" {
		t.Fatalf("missing repository: version %+v, err %v", v3, err)
	}
}
