package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded"
	"github.com/aiforge/aiforge/services/retriever/index/qdrant"
	"github.com/aiforge/aiforge/services/retriever/index/qdrantfake"
)

func TestOrderPutsDependenciesFirstAndEdgeLast(t *testing.T) {
	for _, tc := range []struct {
		targets []string
		want    []string
	}{
		// The bus and the one object store first; the edge after every
		// service it routes to, so it starts last and stops first.
		{[]string{"all"}, []string{"bus", "objects", "batch", "embedder", "guardian", "ingest", "retriever", "sandbox", "usage", "workers", "edge"}},
		{[]string{"worker"}, []string{"bus", "worker"}},
		{[]string{"edge"}, []string{"bus", "objects", "edge"}},
		{[]string{"edge", "usage"}, []string{"bus", "objects", "usage", "edge"}},
		{[]string{"usage", "edge", "all"}, []string{"bus", "objects", "batch", "embedder", "guardian", "ingest", "retriever", "sandbox", "usage", "workers", "edge"}},
	} {
		got, err := order(tc.targets)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("order(%v) = %v, want %v", tc.targets, got, tc.want)
		}
	}
	for _, bad := range []string{"nope", "objects", "bus"} {
		if _, err := order([]string{bad}); err == nil {
			t.Errorf("target %q accepted: only services can be run", bad)
		}
	}
	if slices.Contains(Targets(), "objects") || slices.Contains(Targets(), "bus") {
		t.Errorf("Targets() = %v lists infrastructure", Targets())
	}
}

func TestAdminKeyGeneratedOnceWithMode0600(t *testing.T) {
	dir := t.TempDir()
	var shown []string
	a := &App{opts: Options{DataDir: dir, OnAdminKey: func(key, _ string) { shown = append(shown, key) }}}
	k1, err := a.adminKey()
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key mode %v", st.Mode().Perm())
	}
	k2, err := a.adminKey()
	if err != nil {
		t.Fatal(err)
	}
	if k1 != k2 || len(shown) != 1 || shown[0] != k1 || len(k1) < 40 {
		t.Fatalf("key regenerated or shown twice: %q %q %v", k1, k2, shown)
	}
	b := &App{opts: Options{AdminKey: "from-the-environment-123"}}
	if k, _ := b.adminKey(); k != "from-the-environment-123" {
		t.Fatalf("explicit key ignored: %q", k)
	}
}

func TestDataDirIsMadeAbsolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	a, err := New(Options{DataDir: "./aiforge-data"})
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir may sit behind a symlink (macOS /var): compare resolved.
	wd, _ := os.Getwd()
	if got, want := a.DataDir(), filepath.Join(wd, "aiforge-data"); got != want || !filepath.IsAbs(got) {
		t.Fatalf("DataDir = %q, want %q", got, want)
	}
	// Every path derived from it is absolute too, so a symlink such as
	// models/<model>/current resolves from any working directory.
	if p := filepath.Join(a.DataDir(), "models", "m", "current"); !filepath.IsAbs(p) {
		t.Fatalf("derived path %q is relative", p)
	}
	b, err := New(Options{NATSURL: "nats://127.0.0.1:4222", Targets: []string{"worker"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.DataDir() != "" {
		t.Fatalf("no data dir became %q", b.DataDir())
	}
}

func TestModuleErrorPrefixesOnce(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"edge", "edge: listen: address already in use", "edge: listen: address already in use"},
		{"usage", "usage config: bad", "usage config: bad"},
		{"retriever", "index: open: denied", "retriever: index: open: denied"},
		{"edge", "edgeless: x", "edge: edgeless: x"},
	} {
		inner := errors.New(tc.in)
		err := moduleError(tc.name, inner)
		if err.Error() != tc.want || !errors.Is(err, inner) {
			t.Errorf("moduleError(%q, %q) = %q, want %q (wrapping the original)", tc.name, tc.in, err, tc.want)
		}
	}
}

// A busy port fails the edge with its own message, named once.
func TestBusyPortIsNamedOnce(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	a, err := New(Options{Targets: []string{"edge"}, DataDir: t.TempDir(), Listen: busy.Addr().String(), AdminKey: "ak-test-key-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = a.Run(ctx)
	if err == nil {
		t.Fatal("the edge started on a busy port")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "edge: ") || strings.HasPrefix(msg, "edge: edge:") || !strings.Contains(msg, "address already in use") {
		t.Fatalf("error %q: want the edge named once and the cause", msg)
	}
}

func TestOpenIndexChoosesTheVectorIndex(t *testing.T) {
	ctx := context.Background()
	open := func(o RetrieverOptions, dataDir string) (index.Index, error) {
		a := &App{opts: Options{DataDir: dataDir, Retriever: o}, log: slog.New(slog.DiscardHandler)}
		return a.openIndex()
	}
	for name, tc := range map[string]struct {
		o       RetrieverOptions
		dataDir string
		want    string
	}{
		"qdrant without url": {RetrieverOptions{Index: IndexQdrant}, "", "--qdrant-url"},
		"unknown index":      {RetrieverOptions{Index: "pinecone"}, "", `unknown vector index "pinecone"`},
		"embedded, no dir":   {RetrieverOptions{}, "", "needs a data dir"},
		"rest port":          {RetrieverOptions{Index: IndexQdrant, QdrantURL: "http://qdrant:6333"}, "", "REST port"},
		"unreachable": {RetrieverOptions{Index: IndexQdrant, QdrantURL: "127.0.0.1:1",
			Qdrant: qdrant.Config{Dim: 8, Timeout: 2 * time.Second}}, "", "cannot reach Qdrant"},
	} {
		if idx, err := open(tc.o, tc.dataDir); err == nil || !strings.Contains(err.Error(), tc.want) {
			if idx != nil {
				idx.Close()
			}
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}

	dir := t.TempDir()
	idx, err := open(RetrieverOptions{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := idx.(*embedded.Index); !ok {
		t.Fatalf("default index is %T, want the embedded one", idx)
	}
	idx.Close()

	srv, err := qdrantfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	idx, err = open(RetrieverOptions{Index: IndexQdrant, QdrantURL: "http://" + srv.Addr, Qdrant: qdrant.Config{Dim: 4}}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	if _, ok := idx.(*qdrant.Index); !ok {
		t.Fatalf("index is %T, want the Qdrant adapter", idx)
	}
	c := index.Chunk{ID: "c1", Tenant: "t", StoreID: "s", FileID: "f", Text: "hello", Dense: []float32{1, 0, 0, 0}}
	if err := idx.Upsert(ctx, []index.Chunk{c}); err != nil {
		t.Fatal(err)
	}
	hits, err := idx.Search(ctx, index.Query{Tenant: "t", Dense: []float32{1, 0, 0, 0}, Mode: index.ModeDense})
	if err != nil || len(hits) != 1 || hits[0].Chunk.ID != "c1" {
		t.Fatalf("search through the Qdrant adapter: %v %+v", err, hits)
	}
	if srv.Points("aiforge_chunks") != 1 {
		t.Fatalf("%d points in the default collection, want 1", srv.Points("aiforge_chunks"))
	}
}
