package vectorstores

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/vectorstore"
)

func testService(t *testing.T) (*Service, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	files, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.BucketVectorStoreFiles})
	if err != nil {
		t.Fatal(err)
	}
	stores, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.BucketVectorStores})
	if err != nil {
		t.Fatal(err)
	}
	return New(Deps{StoresKV: stores, FilesKV: files, JS: js, Logger: slog.New(slog.DiscardHandler)}), ctx
}

func TestSetFileStatus(t *testing.T) {
	s, ctx := testService(t)
	ref := events.DocRef{Tenant: "acme", StoreID: "vs_1", FileID: "file-1"}
	key := vectorstore.FileKey(ref.Tenant, ref.StoreID, ref.FileID)
	put := func(status string) {
		t.Helper()
		rec := vectorstore.FileRecord{File: vectorstore.File{ID: ref.FileID, Status: status, Attributes: map[string]any{"a": "b"}}}
		if _, err := kv.Put(ctx, s.d.FilesKV, key, rec); err != nil {
			t.Fatal(err)
		}
	}
	get := func() vectorstore.FileRecord {
		t.Helper()
		rec, _, err := kv.Get[vectorstore.FileRecord](ctx, s.d.FilesKV, key)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}

	// A file removed before its outcome arrived stays removed.
	if err := s.setFileStatus(ctx, ref, vectorstore.StatusCompleted, nil); err != nil {
		t.Fatalf("missing record: %v", err)
	}
	if _, _, err := kv.Get[vectorstore.FileRecord](ctx, s.d.FilesKV, key); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("missing record was written: %v", err)
	}

	put(vectorstore.StatusInProgress)
	lastErr := &vectorstore.LastError{Code: "invalid_file", Message: "no text"}
	if err := s.setFileStatus(ctx, ref, vectorstore.StatusFailed, lastErr); err != nil {
		t.Fatal(err)
	}
	if rec := get(); rec.Status != vectorstore.StatusFailed || rec.LastError == nil || rec.LastError.Code != "invalid_file" || rec.Attributes["a"] != "b" {
		t.Fatalf("after failure: %+v", rec)
	}

	// A cancelled file keeps its status.
	put(vectorstore.StatusCancelled)
	if err := s.setFileStatus(ctx, ref, vectorstore.StatusCompleted, nil); err != nil {
		t.Fatal(err)
	}
	if rec := get(); rec.Status != vectorstore.StatusCancelled {
		t.Fatalf("cancelled file became %q", rec.Status)
	}

	// A record that does not decode is an error, and is left as it is.
	if _, err := s.d.FilesKV.Put(ctx, key, []byte(`{"status":`)); err != nil {
		t.Fatal(err)
	}
	var de *kv.DecodeError
	if err := s.setFileStatus(ctx, ref, vectorstore.StatusCompleted, nil); !errors.As(err, &de) || de.Key != key {
		t.Fatalf("corrupt record: %v", err)
	}
	if e, err := s.d.FilesKV.Get(ctx, key); err != nil || string(e.Value()) != `{"status":` {
		t.Fatalf("corrupt record was overwritten: %v", err)
	}

	// An ended context stops it.
	put(vectorstore.StatusInProgress)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.setFileStatus(done, ref, vectorstore.StatusCompleted, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context: %v", err)
	}
}

func TestStoreFilesReportsCorruptRecords(t *testing.T) {
	s, ctx := testService(t)
	good := vectorstore.FileRecord{File: vectorstore.File{ID: "file-1", Status: vectorstore.StatusCompleted, UsageBytes: 7}}
	if _, err := kv.Put(ctx, s.d.FilesKV, vectorstore.FileKey("acme", "vs_1", "file-1"), good); err != nil {
		t.Fatal(err)
	}
	vs, err := s.storeWithCounts(ctx, "acme", VectorStore{ID: "vs_1"})
	if err != nil || vs.FileCounts.Completed != 1 || vs.UsageBytes != 7 || vs.Status != vectorstore.StatusCompleted {
		t.Fatalf("storeWithCounts = %+v, %v", vs, err)
	}
	bad := vectorstore.FileKey("acme", "vs_1", "file-2")
	if _, err := s.d.FilesKV.Put(ctx, bad, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	var de *kv.DecodeError
	if _, err := s.storeWithCounts(ctx, "acme", VectorStore{ID: "vs_1"}); !errors.As(err, &de) || de.Key != bad {
		t.Fatalf("a corrupt record was not reported: %v", err)
	}
	// Another store's files are not read.
	if vs, err := s.storeWithCounts(ctx, "acme", VectorStore{ID: "vs_2"}); err != nil || vs.FileCounts.Total != 0 {
		t.Fatalf("empty store = %+v, %v", vs, err)
	}
}
