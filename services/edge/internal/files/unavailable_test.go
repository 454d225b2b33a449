package files

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/contracts"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
)

// TestBusUnavailableIs503: while the bus cannot answer (its server is
// gone; the connection reconnects), an upload and a read of a file answer
// 503 service_unavailable with a Retry-After, which clients retry; a
// record the bus answers but that is corrupt is still a 500.
func TestBusUnavailableIs503(t *testing.T) {
	srv, nc := natstest.JetStream(t)
	// The JetStream default timeout is the bound of each bus call here,
	// as the edge's is; the requests themselves have no deadline.
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.BucketFiles})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	id, _ := registry.KeyIDOf(secret)
	s := New(Deps{Objects: objs, KV: b, Keys: oneKey{registry.Key{ID: id, Tenant: "acme", Hash: registry.HashSecret(secret), Models: []string{"*"}}},
		MaxFileBytes: 1 << 20, MaxBatchFileBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	s.Routes(mux)
	do := func(req *http.Request) *httptest.ResponseRecorder {
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	upload := func() *httptest.ResponseRecorder {
		body, ct := multipartBody(t, [][2]string{{"purpose", "user_data"}, {"file", "hello"}})
		req := httptest.NewRequest("POST", "/v1/files", body)
		req.Header.Set("Content-Type", ct)
		return do(req)
	}
	get := func(id string) *httptest.ResponseRecorder {
		return do(httptest.NewRequest("GET", "/v1/files/"+id, nil))
	}
	code := func(rec *httptest.ResponseRecorder) string {
		var body struct{ Error struct{ Code string } }
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		return body.Error.Code
	}

	rec := upload()
	if rec.Code != http.StatusOK {
		t.Fatalf("upload: %d %s", rec.Code, rec.Body)
	}
	var f File
	if err := json.Unmarshal(rec.Body.Bytes(), &f); err != nil || f.ID == "" {
		t.Fatalf("upload: %s %v", rec.Body, err)
	}
	if rec := get(f.ID); rec.Code != http.StatusOK {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}

	// A corrupt record is a fault, not unavailability.
	if _, err := b.Put(ctx, fileKVKey("acme", "file-corrupt"), []byte(`{"id":`)); err != nil {
		t.Fatal(err)
	}
	if rec := get("file-corrupt"); rec.Code != http.StatusInternalServerError || code(rec) != contracts.CodeInternal || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("corrupt record: %d %s Retry-After %q, want 500 internal_error", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	deadline := time.Now().Add(10 * time.Second)
	for nc.Status() == nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatal("the connection did not notice its server stopped")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	for name, rec := range map[string]*httptest.ResponseRecorder{"upload": upload(), "get": get(f.ID)} {
		if rec.Code != http.StatusServiceUnavailable || code(rec) != contracts.CodeServiceUnavailable || rec.Header().Get("Retry-After") != "2" {
			t.Errorf("%s with the bus gone: %d %s Retry-After %q, want 503 service_unavailable with Retry-After 2",
				name, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
		}
	}
}
