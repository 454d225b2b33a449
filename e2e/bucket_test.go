package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/pkg/busauth"
	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/natsutil"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/pkg/objstore/objstoretest"
)

// TestTenantBucketDrop runs the all-in-one stack with a tenant whose model
// bucket is on a real S3 server (versitygw): a folder dropped there with
// its aiforge-model.json becomes a published catalog version of the
// tenant's model, deployable like any other; a folder whose manifest
// disagrees with a file becomes a rejected version with the reason.
func TestTenantBucketDrop(t *testing.T) {
	srv := objstoretest.StartVersityGW(t)
	s := startStack(t, stackOpts{mutate: fastBucketPoll})
	tenantBucketDrop(t, s, srv)

	// Served: the deployment of the tenant's model answers the tenant's
	// keys only, even a key of another tenant that allows every model.
	_, base := sim(t, enginesim.Config{Models: []string{"tiny"}})
	s.register("acme-tiny", base, "tiny")
	acme, _ := s.tenantKey("acme")
	globex, _ := s.tenantKey("globex")
	s.waitServed(acme, "acme-tiny")
	if st, body := s.post(globex, "/v1/chat/completions", chatBody("acme-tiny", 2, false)); st != http.StatusForbidden || errorCode(string(body)) != "model_not_allowed" {
		t.Fatalf("another tenant's key: %d %s", st, body)
	}
	req, _ := http.NewRequest("GET", s.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+globex)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := readAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "acme-tiny") {
		t.Fatalf("another tenant's /v1/models lists the model: %s", b)
	}
}

// TestTenantBucketDropUnderBusAuth: the same with the edge and the
// guardian in processes of their own, each on its own NATS identity: the
// guardian's grants cover the tenant bucket configurations (read, watch)
// and its folder records.
func TestTenantBucketDropUnderBusAuth(t *testing.T) {
	srv := objstoretest.StartVersityGW(t)
	var url, creds string
	startStack(t, stackOpts{targets: []string{"nats"}, mutate: func(o *app.Options) {
		o.NATSListen = "127.0.0.1:-1"
		o.OnNATSListen = func(u, dir string) { url, creds = u, dir }
	}})
	shared := t.TempDir() // the object store and the secrets key pair
	as := func(identity string) func(*app.Options) {
		return func(o *app.Options) {
			o.NATS = natsutil.ConnectOptions{NKeyFile: busauth.SeedFile(creds, identity)}
			fastBucketPoll(o)
		}
	}
	// The guardian first: it makes the secrets key pair the edge seals to.
	startStack(t, stackOpts{natsURL: url, targets: []string{"guardian"}, dataDir: shared, mutate: as(busauth.Guardian)})
	edge := startStack(t, stackOpts{natsURL: url, targets: []string{"edge"}, dataDir: shared, mutate: as(busauth.Edge)})
	tenantBucketDrop(t, edge, srv)
}

func fastBucketPoll(o *app.Options) { o.Guardian.Buckets.PollInterval = 200 * time.Millisecond }

func tenantBucketDrop(t *testing.T, s *stack, srv *objstoretest.S3Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	drops, err := objstore.NewS3(ctx, srv.Config("drops"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.admin.Do(ctx, "POST", "/admin/v1/tenants", map[string]any{"id": "acme"}, nil); err != nil {
		t.Fatal(err)
	}
	var view map[string]any
	if err := s.admin.Do(ctx, "PUT", "/admin/v1/tenants/acme/model-bucket", map[string]any{
		"endpoint": "http://" + srv.Endpoint, "bucket": "drops", "prefix": "acme/", "region": srv.Region, "path_style": true,
		"access_key_id": srv.AccessKeyID, "secret_access_key": srv.SecretAccessKey,
	}, &view); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(mustJSON(t, view), srv.SecretAccessKey) {
		t.Fatalf("the answer shows the secret: %v", view)
	}

	drop := func(folder string, files map[string][]byte, override map[string]string) {
		t.Helper()
		type file struct {
			Path   string `json:"path"`
			Size   int    `json:"size"`
			SHA256 string `json:"sha256"`
		}
		m := struct {
			Kind  string `json:"kind"`
			Files []file `json:"files"`
		}{Kind: "model"}
		for p, b := range files {
			h := sha256Hex(b)
			if o, ok := override[p]; ok {
				h = o
			}
			m.Files = append(m.Files, file{p, len(b), h})
			if _, err := drops.Put(ctx, folder+p, bytes.NewReader(b), int64(len(b)), ""); err != nil {
				t.Fatal(err)
			}
		}
		sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
		raw := []byte(mustJSON(t, m))
		if _, err := drops.Put(ctx, folder+"aiforge-model.json", bytes.NewReader(raw), int64(len(raw)), "application/json"); err != nil {
			t.Fatal(err)
		}
	}
	version := func(name string) catalog.Version {
		t.Helper()
		var e catalog.Entry
		eventually(t, time.Minute, func() bool {
			e = catalog.Entry{}
			if err := s.admin.Do(ctx, "GET", "/admin/v1/catalog/"+name, nil, &e); err != nil || len(e.Versions) == 0 {
				return false
			}
			st := e.Versions[0].Status
			return st == catalog.StatusPublished || st == catalog.StatusRejected
		}, name+" settled")
		if e.Tenant != "acme" || len(e.Versions) != 1 {
			t.Fatalf("%s: %+v", name, e)
		}
		return e.Versions[0]
	}

	files := map[string][]byte{
		"model.safetensors": safetensorsFile(t, map[string][]int64{"w": {8, 8}}),
		"config.json":       []byte(`{"model_type":"llama"}`),
		"README.md":         []byte("---\nlicense: mit\n---\n# tiny\n"),
	}
	drop("acme/tiny/", files, nil)
	v := version("acme/tiny")
	if v.Status != catalog.StatusPublished || v.Parameters != 64 || v.License != "mit" || v.Source.Type != "bucket" || v.Source.Repo != "s3://drops/acme/tiny/" {
		t.Fatalf("good drop: %+v", v)
	}
	if err := s.admin.Do(ctx, "POST", "/admin/v1/deployments", map[string]any{"model": "acme-tiny", "catalog": "acme/tiny"}, nil); err != nil {
		t.Fatalf("deploy the tenant's published model: %v", err)
	}

	drop("acme/tampered/", files, map[string]string{"model.safetensors": strings.Repeat("0", 64)})
	if v := version("acme/tampered"); v.Status != catalog.StatusRejected || len(v.Reasons) != 1 || v.Reasons[0].Code != "hash_mismatch" || v.Reasons[0].File != "model.safetensors" {
		t.Fatalf("tampered drop: %+v", v)
	}

	// GET shows the configuration without the credentials.
	req, _ := http.NewRequest("GET", s.url+"/admin/v1/tenants/acme/model-bucket", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(mustJSON(t, got), srv.SecretAccessKey) || got["bucket"] != "drops" {
		t.Fatalf("GET model-bucket: %d %v", resp.StatusCode, got)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
