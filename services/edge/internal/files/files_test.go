package files

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/registry"
)

const secret = "sk-af-0123456789abcdef-secret"

type oneKey struct{ k registry.Key }

func (o oneKey) Key(id string) *registry.Key {
	if id == o.k.ID {
		return &o.k
	}
	return nil
}

func multipartBody(t *testing.T, fields [][2]string) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range fields {
		if f[0] == "file" {
			w, err := mw.CreateFormFile("file", "in.jsonl")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = w.Write([]byte(f[1]))
			continue
		}
		_ = mw.WriteField(f[0], f[1])
	}
	_ = mw.Close()
	return &buf, mw.FormDataContentType()
}

// A batch input file is bounded by the batch limit whether its purpose
// comes before the file (refused as it streams) or after it (refused once
// stored); nothing of a refused file is kept.
func TestBatchFileBound(t *testing.T) {
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
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
		MaxFileBytes: 1 << 20, MaxBatchFileBytes: 100})
	mux := http.NewServeMux()
	s.Routes(mux)
	upload := func(fields ...[2]string) *httptest.ResponseRecorder {
		body, ct := multipartBody(t, fields)
		req := httptest.NewRequest("POST", "/v1/files", body)
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	big := strings.Repeat("{}\n", 40) // 120 bytes
	for _, order := range [][][2]string{{{"purpose", "batch"}, {"file", big}}, {{"file", big}, {"purpose", "batch"}}} {
		rec := upload(order...)
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "batch input file") {
			t.Fatalf("%v: %d %s", order[0][0], rec.Code, rec.Body)
		}
	}
	// The same bytes are a fine file of another purpose.
	if rec := upload([2]string{"purpose", "user_data"}, [2]string{"file", big}); rec.Code != http.StatusOK {
		t.Fatalf("user_data: %d %s", rec.Code, rec.Body)
	}
	rec := upload([2]string{"file", strings.Repeat("{}\n", 30)}, [2]string{"purpose", "batch"})
	if rec.Code != http.StatusOK {
		t.Fatalf("within the bound: %d %s", rec.Code, rec.Body)
	}
	var f File
	_ = json.Unmarshal(rec.Body.Bytes(), &f)
	r, _, err := kv.Get[Record](ctx, b, fileKVKey("acme", f.ID))
	if err != nil || r.Lines != 30 {
		t.Fatalf("record %+v %v", r, err)
	}
	es, err := kv.List[Record](ctx, b)
	if err != nil || len(es) != 2 {
		t.Fatalf("%d records (%v), want the two accepted files", len(es), err)
	}
	var keys []string
	for info, err := range objs.List(ctx, objstore.TenantPrefix("acme")) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, info.Key)
	}
	if len(keys) != 2 {
		t.Fatalf("objects %v, want the two accepted files", keys)
	}
}
