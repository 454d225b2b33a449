package embedded_test

import (
	"path/filepath"
	"testing"

	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded"
	"github.com/aiforge/aiforge/services/retriever/index/indextest"
)

func openEmbedded(t *testing.T, dir string) (index.Index, error) {
	t.Helper()
	return embedded.Open(embedded.Config{Dir: dir, Logger: testLogger(t)})
}

func TestEmbeddedContract(t *testing.T) {
	indextest.Run(t, func(t *testing.T) index.Index {
		ix, err := openEmbedded(t, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := ix.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return ix
	})
}

func TestEmbeddedPersistenceContract(t *testing.T) {
	indextest.RunPersistence(t, func(t *testing.T) func() (index.Index, error) {
		dir := filepath.Join(t.TempDir(), "idx")
		return func() (index.Index, error) { return openEmbedded(t, dir) }
	})
}
