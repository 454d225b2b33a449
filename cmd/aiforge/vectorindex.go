package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/app"
)

// vectorIndexFlags choose the retriever's vector index (`aiforge up`, `aiforge run retriever`).
type vectorIndexFlags struct {
	index      string
	qdrantURL  string
	collection string
	dim        int
}

func (f *vectorIndexFlags) add(c *cobra.Command) {
	dim, _ := strconv.Atoi(env("AIFORGE_QDRANT_DIM", "0"))
	c.Flags().StringVar(&f.index, "vector-index", env("AIFORGE_VECTOR_INDEX", app.IndexEmbedded),
		"retriever: embedded (in the data dir, one retriever replica) or qdrant (a Qdrant collection, any number of replicas)")
	c.Flags().StringVar(&f.qdrantURL, "qdrant-url", env("AIFORGE_QDRANT_URL", ""),
		"retriever: Qdrant's gRPC API, e.g. http://qdrant:6334 (https:// for TLS; API key from AIFORGE_QDRANT_API_KEY)")
	c.Flags().StringVar(&f.collection, "qdrant-collection", env("AIFORGE_QDRANT_COLLECTION", "aiforge_chunks"),
		"retriever: the Qdrant collection (created when missing)")
	c.Flags().IntVar(&f.dim, "qdrant-dim", dim,
		"retriever: the embedding models' dimension, needed to create the Qdrant collection (0: take an existing collection's)")
}

func (f *vectorIndexFlags) options() (app.RetrieverOptions, error) {
	if _, err := strconv.Atoi(env("AIFORGE_QDRANT_DIM", "0")); err != nil {
		return app.RetrieverOptions{}, fmt.Errorf("AIFORGE_QDRANT_DIM: %w", err)
	}
	o := app.RetrieverOptions{Index: f.index, QdrantURL: f.qdrantURL}
	// A Qdrant without URL is refused where the retriever starts (internal/app), so that a shared environment
	// does not fail the other targets.
	if f.index != app.IndexEmbedded && f.index != app.IndexQdrant {
		return o, fmt.Errorf("--vector-index %q: want %s or %s", f.index, app.IndexEmbedded, app.IndexQdrant)
	}
	o.Qdrant.Collection = f.collection
	o.Qdrant.Dim = f.dim
	// The API key comes from the environment only, never a flag (flags show in process listings).
	o.Qdrant.APIKey = os.Getenv("AIFORGE_QDRANT_API_KEY")
	return o, nil
}
