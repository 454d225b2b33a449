package app

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestOrderPutsDependenciesFirstAndEdgeLast(t *testing.T) {
	got, err := order([]string{"all"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bus", "usage", "retriever", "embedder", "ingest", "guardian", "workers", "edge"}
	if !slices.Equal(got, want) {
		t.Fatalf("order(all) = %v, want %v (the edge must stop first)", got, want)
	}
	if _, err := order([]string{"nope"}); err == nil {
		t.Fatal("unknown target accepted")
	}
	got, _ = order([]string{"worker"})
	if !slices.Equal(got, []string{"bus", "worker"}) {
		t.Fatalf("order(worker) = %v", got)
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
