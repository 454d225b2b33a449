package objstore_test

import (
	"log/slog"
	"testing"

	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/objstore/objstoretest"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func newLocal(t *testing.T) *objstore.Local {
	t.Helper()
	l, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestLocalContract(t *testing.T) {
	t.Parallel()
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newLocal(t) })
}

// newS3 opens a store on a fresh bucket. The smallest part size makes the
// contract's multi-MiB objects take the multipart and staging paths.
func newS3(t *testing.T, srv *objstoretest.S3Server) *objstore.S3 {
	t.Helper()
	cfg := srv.Config(srv.NewBucketName())
	cfg.PartSize = objstore.MinPartSize
	cfg.Logger = testLogger(t)
	s, err := objstore.NewS3(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Contract(t *testing.T) {
	t.Parallel()
	srv := objstoretest.StartVersityGW(t)
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newS3(t, srv) })
}
