package guardian

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
)

const (
	testToken = "hf_GuardianTestToken_9876543210"
	commitOne = "1111111111111111111111111111111111111111"
)

type fakeRepo struct {
	commit   string
	gated    bool
	files    map[string][]byte
	served   map[string][]byte // what the CDN serves instead (tampering)
	evil     map[string]bool   // LFS files redirected to a host not allowed
	pageSize int
}

// fakeHub is a Hugging Face Hub on loopback: the API and file host, a CDN
// that LFS downloads redirect to, and a host no download may reach.
type fakeHub struct {
	hub, cdn, evil *httptest.Server

	mu        sync.Mutex
	repos     map[string]*fakeRepo
	revisions int // revision API requests
	pages     int // tree pages served
	fileHits  int // file downloads from the hub
	cdnHits   int
	evilHits  int
	auth      map[string][]string // host kind -> Authorization headers seen
}

func newFakeHub(t *testing.T) *fakeHub {
	f := &fakeHub{repos: map[string]*fakeRepo{}, auth: map[string][]string{}}
	f.cdn = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.cdnHits++
		f.auth["cdn"] = append(f.auth["cdn"], r.Header.Get("Authorization"))
		repo, p, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/blob/"), "@")
		rp := f.repos[repo]
		if rp == nil || r.URL.Query().Get("sig") != "signed" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		body, ok := rp.served[p]
		if !ok {
			body = rp.files[p]
		}
		_, _ = w.Write(body)
	}))
	f.evil = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.evilHits++
		f.mu.Unlock()
		_, _ = w.Write([]byte("evil"))
	}))
	f.hub = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() { f.hub.Close(); f.cdn.Close(); f.evil.Close() })
	return f
}

func (f *fakeHub) cdnHost() string { return strings.TrimPrefix(f.cdn.URL, "http://") }

func (f *fakeHub) counts() (revisions, pages, files, cdn int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.revisions, f.pages, f.fileHits, f.cdnHits
}

func (f *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth["hub"] = append(f.auth["hub"], r.Header.Get("Authorization"))
	p := r.URL.EscapedPath()
	api := strings.HasPrefix(p, "/api/models/")
	rest := strings.TrimPrefix(p, "/api/models/")
	parts := strings.SplitN(strings.TrimPrefix(rest, "/"), "/", 5) // org, name, op, arg, path
	if len(parts) < 4 {
		http.NotFound(w, r)
		return
	}
	repoName := parts[0] + "/" + parts[1]
	rp := f.repos[repoName]
	if rp == nil {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if rp.gated && r.Header.Get("Authorization") != "Bearer "+testToken {
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "gated", http.StatusUnauthorized)
		return
	}
	switch {
	case api && parts[2] == "revision":
		f.revisions++
		_ = json.NewEncoder(w).Encode(map[string]any{"sha": rp.commit})
	case api && parts[2] == "tree" && parts[3] == rp.commit:
		f.pages++
		var paths []string
		for path := range rp.files {
			paths = append(paths, path)
		}
		sort.Strings(paths)
		cursor, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		size := rp.pageSize
		if size == 0 {
			size = len(paths)
		}
		end := min(cursor+size, len(paths))
		if end < len(paths) {
			w.Header().Set("Link", fmt.Sprintf(`<%s%s?recursive=true&cursor=%d>; rel="next"`, f.hub.URL, r.URL.Path, end))
		}
		var entries []map[string]any
		for _, path := range paths[cursor:end] {
			e := map[string]any{"type": "file", "path": path, "size": len(rp.files[path]), "oid": "abc"}
			if strings.HasSuffix(path, ".safetensors") {
				e["lfs"] = map[string]any{"oid": sha(rp.files[path]), "size": len(rp.files[path]), "pointerSize": 134}
				e["size"] = 134
			}
			entries = append(entries, e)
		}
		_ = json.NewEncoder(w).Encode(entries)
	case !api && parts[2] == "resolve" && parts[3] == rp.commit && len(parts) == 5:
		f.fileHits++
		path, _ := url.PathUnescape(parts[4])
		body, ok := rp.files[path]
		if !ok {
			w.Header().Set("X-Error-Code", "EntryNotFound")
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		w.Header().Set("X-Repo-Commit", rp.commit)
		if strings.HasSuffix(path, ".safetensors") {
			w.Header().Set("X-Linked-Etag", `"`+sha(body)+`"`)
			w.Header().Set("X-Linked-Size", strconv.Itoa(len(body)))
			target := f.cdn.URL + "/blob/" + repoName + "@" + path + "?sig=signed"
			if rp.evil[path] {
				target = f.evil.URL + "/steal"
			}
			http.Redirect(w, r, target, http.StatusFound)
			return
		}
		_, _ = w.Write(body)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeHub) add(name string, r *fakeRepo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.commit == "" {
		r.commit = commitOne
	}
	f.repos[name] = r
}

func startMirror(t *testing.T, f *fakeHub, token string) *env {
	return start(t, Config{HubURL: f.hub.URL, HubToken: token, HubRedirectHosts: []string{f.cdnHost()}}, nil)
}

func (e *env) pull(t *testing.T, id, name, repo, revision string) {
	t.Helper()
	ev := events.ModelPullRequestedV1{PullID: id, Name: name, Kind: events.ModelKindModel, Repo: repo, Revision: revision, RequestedAt: time.Now().UTC()}
	if _, err := events.Publish(context.Background(), e.js, ev,
		events.Envelope{ID: "pull-" + id, Source: "test"}); err != nil {
		t.Fatal(err)
	}
}

// handled waits until the mirror consumer has acknowledged every pull
// request published so far.
func (e *env) handled(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	stream, err := e.js.Stream(ctx, events.StreamModels)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		last, err := stream.GetLastMsgForSubject(ctx, events.ModelsPullRequestedAll)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.js.Consumer(ctx, events.StreamModels, "guardian-mirror")
		if err == nil {
			info, err := c.Info(ctx)
			if err == nil && info.AckFloor.Stream >= last.Sequence && info.NumAckPending == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pull requests not handled\nlogs:\n%s", e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMirrorPinsCommitAndPublishes(t *testing.T) {
	f := newFakeHub(t)
	files := shardedModel()
	f.add("org/tiny", &fakeRepo{files: files, pageSize: 2}) // 6 files: 3 pages
	e := startMirror(t, f, "")
	e.pull(t, "p1", "tiny", "org/tiny", "main")
	v := e.settled(t, "tiny", 1)
	if v.Status != catalog.StatusPublished {
		t.Fatalf("status %s, reasons %+v\nlogs:\n%s", v.Status, v.Reasons, e.logs.String())
	}
	want := catalog.Source{Type: events.ModelSourceHub, Repo: "org/tiny", Revision: "main", Commit: commitOne}
	if v.Source != want || v.Parameters != 26 || v.License != "apache-2.0" || len(v.Files) != len(files) {
		t.Fatalf("version = %+v", v)
	}
	for _, file := range v.Files {
		if file.SHA256 != sha(files[file.Path]) {
			t.Errorf("%s: sha %s", file.Path, file.SHA256)
		}
		info, err := e.objects.Stat(context.Background(), v.Prefix+file.Path)
		if err != nil || info.SHA256 != sha(files[file.Path]) {
			t.Errorf("%s in the store: %+v %v", file.Path, info, err)
		}
	}
	revisions, pages, hubFiles, cdn := f.counts()
	if revisions != 1 || pages != 3 || hubFiles != len(files) || cdn != 2 {
		t.Fatalf("requests: revisions %d pages %d files %d cdn %d", revisions, pages, hubFiles, cdn)
	}
	f.mu.Lock()
	for _, a := range f.auth["cdn"] {
		if a != "" {
			t.Errorf("the CDN got an Authorization header")
		}
	}
	f.mu.Unlock()

	// The same revision again: resolved to the same commit, nothing
	// downloaded, no new version.
	e.pull(t, "p2", "tiny", "org/tiny", "main")
	e.handled(t)
	revisions2, pages2, hubFiles2, cdn2 := f.counts()
	if revisions2 != revisions+1 || pages2 != pages || hubFiles2 != hubFiles || cdn2 != cdn {
		t.Fatalf("second pull requested: revisions %d pages %d files %d cdn %d", revisions2, pages2, hubFiles2, cdn2)
	}
	entry, err := e.cat.Get(context.Background(), "tiny")
	if err != nil || len(entry.Versions) != 1 {
		t.Fatalf("entry %+v %v", entry, err)
	}
	// Each pull's record leads its requester to the version.
	p1, err := e.cat.GetPull(context.Background(), "p1")
	if err != nil || p1.Status != catalog.PullDone || p1.Version != 1 || p1.Skipped || p1.Commit != commitOne {
		t.Fatalf("first pull's record %+v %v", p1, err)
	}
	p2, err := e.cat.GetPull(context.Background(), "p2")
	if err != nil || p2.Status != catalog.PullDone || p2.Version != 1 || !p2.Skipped {
		t.Fatalf("second pull's record %+v %v", p2, err)
	}
}

func TestMirrorRejectsCDNHashMismatch(t *testing.T) {
	f := newFakeHub(t)
	files := shardedModel()
	bad := []byte(strings.Repeat("x", len(files["model-00002-of-00002.safetensors"])))
	f.add("org/tampered", &fakeRepo{files: files, served: map[string][]byte{"model-00002-of-00002.safetensors": bad}})
	e := startMirror(t, f, "")
	e.pull(t, "p1", "tampered", "org/tampered", "main")
	v := e.settled(t, "tampered", 1)
	if v.Status != catalog.StatusRejected || !hasReason(v, "hash_mismatch", "model-00002-of-00002.safetensors") {
		t.Fatalf("version = %+v", v)
	}
	if _, err := e.objects.Stat(context.Background(), v.Prefix+"model-00002-of-00002.safetensors"); err == nil {
		t.Fatal("the tampered file was stored")
	}
	e.handled(t) // the pull's record is written after the verdict
	p, err := e.cat.GetPull(context.Background(), "p1")
	if err != nil || p.Status != catalog.PullFailed || p.Version != 1 || p.Reason == nil || p.Reason.Code != "hash_mismatch" {
		t.Fatalf("pull record %+v %v", p, err)
	}
}

func TestMirrorRefusesRedirectToHostNotAllowed(t *testing.T) {
	f := newFakeHub(t)
	files := shardedModel()
	f.add("org/redirect", &fakeRepo{files: files, evil: map[string]bool{"model-00001-of-00002.safetensors": true}})
	e := startMirror(t, f, testToken)
	e.pull(t, "p1", "redirect", "org/redirect", "main")
	v := e.settled(t, "redirect", 1)
	if v.Status != catalog.StatusRejected || !hasReason(v, CodeHubError, "model-00001-of-00002.safetensors") {
		t.Fatalf("version = %+v", v)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.evilHits != 0 {
		t.Fatal("a download reached a host not allowed")
	}
}

func TestMirrorGatedRepoNeedsTokenThatNeverLeaks(t *testing.T) {
	f := newFakeHub(t)
	files := shardedModel()
	f.add("org/gated", &fakeRepo{files: files, gated: true})

	anon := startMirror(t, f, "")
	anon.pull(t, "p1", "gated", "org/gated", "main")
	v := anon.settled(t, "gated", 1)
	if v.Status != catalog.StatusRejected || !hasReason(v, CodeHubError, "") {
		t.Fatalf("without a token: %+v", v)
	}

	e := startMirror(t, f, testToken)
	e.pull(t, "p2", "gated", "org/gated", "main")
	v = e.settled(t, "gated", 1)
	if v.Status != catalog.StatusPublished || v.Source.Commit != commitOne {
		t.Fatalf("with the token: %+v\nlogs:\n%s", v, e.logs.String())
	}
	f.mu.Lock()
	sawToken := false
	for _, a := range f.auth["hub"] {
		sawToken = sawToken || a == "Bearer "+testToken
	}
	for _, a := range f.auth["cdn"] {
		if a != "" {
			t.Error("the token reached the CDN")
		}
	}
	f.mu.Unlock()
	if !sawToken {
		t.Fatal("the hub never got the token")
	}
	// Not in any log line, catalog entry or event.
	for _, x := range []*env{anon, e} {
		if strings.Contains(x.logs.String(), testToken) {
			t.Fatal("the token is in the logs")
		}
		entry, err := x.cat.Get(context.Background(), "gated")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(entry)
		if strings.Contains(string(b), testToken) {
			t.Fatal("the token is in the catalog")
		}
		assertStreamClean(t, x.js, testToken)
	}
}

// assertStreamClean fails if secret appears in any message of MODELS.
func assertStreamClean(t *testing.T, js jetstream.JetStream, secret string) {
	t.Helper()
	ctx := context.Background()
	stream, err := js.Stream(ctx, events.StreamModels)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		n++
		if strings.Contains(string(msg.Data), secret) || strings.Contains(fmt.Sprint(msg.Header), secret) {
			t.Fatalf("the token is in event %s", msg.Subject)
		}
	}
	if n == 0 {
		t.Fatal("no events to check")
	}
}

func TestMirrorResumesInterruptedPull(t *testing.T) {
	f := newFakeHub(t)
	files := shardedModel()
	f.add("org/resume", &fakeRepo{files: files})
	e := startMirror(t, f, "")
	ctx := context.Background()
	// A pull that crashed after storing the first shard.
	v, err := e.cat.AddVersion(ctx, "resume", events.ModelKindModel, "", catalog.Version{Status: catalog.StatusMirroring,
		Source: catalog.Source{Type: events.ModelSourceHub, Repo: "org/resume", Revision: "main", Commit: commitOne}})
	if err != nil {
		t.Fatal(err)
	}
	shard := files["model-00001-of-00002.safetensors"]
	if _, err := e.objects.Put(ctx, v.Prefix+"model-00001-of-00002.safetensors", strings.NewReader(string(shard)), int64(len(shard)), ""); err != nil {
		t.Fatal(err)
	}
	e.pull(t, "p1", "resume", "org/resume", "main")
	got := e.settled(t, "resume", 1)
	if got.Status != catalog.StatusPublished || got.Parameters != 26 {
		t.Fatalf("version = %+v", got)
	}
	if _, _, hubFiles, cdn := f.counts(); cdn != 1 || hubFiles != len(files)-1 {
		t.Fatalf("resumed pull fetched %d hub files and %d CDN files", hubFiles, cdn)
	}
	entry, _ := e.cat.Get(ctx, "resume")
	if len(entry.Versions) != 1 {
		t.Fatalf("versions %+v", entry.Versions)
	}
}
