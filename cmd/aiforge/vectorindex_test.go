package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/app"
)

func parseVectorIndex(t *testing.T, args ...string) (app.RetrieverOptions, error) {
	t.Helper()
	var f vectorIndexFlags
	c := &cobra.Command{Use: "x"}
	f.add(c)
	if err := c.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.options()
}

func TestVectorIndexFlags(t *testing.T) {
	o, err := parseVectorIndex(t)
	if err != nil || o.Index != app.IndexEmbedded || o.QdrantURL != "" {
		t.Fatalf("default: %+v %v, want the embedded index", o, err)
	}

	t.Setenv("AIFORGE_QDRANT_API_KEY", "secret-from-env")
	o, err = parseVectorIndex(t, "--vector-index", "qdrant", "--qdrant-url", "https://q.example.com", "--qdrant-dim", "384")
	if err != nil {
		t.Fatal(err)
	}
	if o.Index != app.IndexQdrant || o.QdrantURL != "https://q.example.com" || o.Qdrant.Dim != 384 ||
		o.Qdrant.Collection != "aiforge_chunks" || o.Qdrant.APIKey != "secret-from-env" {
		t.Fatalf("flags: %+v", o)
	}

	t.Setenv("AIFORGE_VECTOR_INDEX", "qdrant")
	t.Setenv("AIFORGE_QDRANT_URL", "qdrant:6334")
	t.Setenv("AIFORGE_QDRANT_COLLECTION", "team_a")
	t.Setenv("AIFORGE_QDRANT_DIM", "768")
	o, err = parseVectorIndex(t)
	if err != nil || o.Index != app.IndexQdrant || o.QdrantURL != "qdrant:6334" || o.Qdrant.Collection != "team_a" || o.Qdrant.Dim != 768 {
		t.Fatalf("environment: %+v %v", o, err)
	}

	if _, err := parseVectorIndex(t, "--vector-index", "faiss"); err == nil || !strings.Contains(err.Error(), "embedded or qdrant") {
		t.Fatalf("unknown index: %v", err)
	}
	t.Setenv("AIFORGE_QDRANT_DIM", "big")
	if _, err := parseVectorIndex(t); err == nil || !strings.Contains(err.Error(), "AIFORGE_QDRANT_DIM") {
		t.Fatalf("bad AIFORGE_QDRANT_DIM: %v", err)
	}
}

// TestNoQdrantAPIKeyFlag: the key must never be a flag value (flags show in process listings).
func TestNoQdrantAPIKeyFlag(t *testing.T) {
	for _, c := range []*cobra.Command{upCmd(), runCmd()} {
		if c.Flags().Lookup("vector-index") == nil || c.Flags().Lookup("qdrant-url") == nil {
			t.Errorf("%s lacks --vector-index or --qdrant-url", c.Name())
		}
		for _, name := range []string{"qdrant-api-key", "qdrant-key", "api-key"} {
			if c.Flags().Lookup(name) != nil {
				t.Errorf("%s has a --%s flag", c.Name(), name)
			}
		}
	}
}
