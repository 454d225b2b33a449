package guardian

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/aiforge/aiforge/pkg/objstore"
)

// streamingStore hands out plain streams, as the S3 backend does.
type streamingStore struct{ objstore.Store }

func (s streamingStore) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	rc, info, err := s.Store.Get(ctx, key)
	if err != nil {
		return nil, info, err
	}
	return struct{ io.ReadCloser }{rc}, info, nil
}

func TestObjFSSpoolsStreamsForTheScanner(t *testing.T) {
	local, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	ctx := context.Background()
	files := shardedModel()
	sizes := map[string]int64{}
	for p, b := range files {
		if _, err := local.Put(ctx, "m/v1/"+p, bytes.NewReader(b), int64(len(b)), ""); err != nil {
			t.Fatal(err)
		}
		sizes[p] = int64(len(b))
	}
	scratch := t.TempDir()
	fsys := newObjFS(ctx, streamingStore{local}, "m/v1/", scratch, sizes)
	v := scanDir(ctx, fsys, nil, "model", scratch)
	if !v.Accepted || v.Params != 26 || len(v.Files) != len(files) {
		t.Fatalf("verdict %+v", v)
	}
	for _, f := range v.Files {
		if f.SHA256 != sha(files[f.Path]) {
			t.Errorf("%s: sha %s", f.Path, f.SHA256)
		}
	}
	left, err := os.ReadDir(scratch)
	if err != nil || len(left) != 0 {
		t.Fatalf("spooled copies left behind: %v %v", left, err)
	}
	if _, err := fsys.Open("absent.json"); err == nil {
		t.Fatal("a file not in the upload opened")
	}
}
