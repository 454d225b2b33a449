package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/edge"
)

const adminKey = "cli-test-admin-key-0123"

const partSize = 512

func startEdge(t *testing.T) (*cli.Client, *catalog.Store) {
	t.Helper()
	cl, cat, _ := startEdgeObjects(t)
	return cl, cat
}

// startEdgeObjects starts an edge and also returns its object store.
func startEdgeObjects(t *testing.T) (*cli.Client, *catalog.Store, objstore.Store) {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc, err := edge.New(edge.Config{AdminKey: adminKey, UploadPartBytes: partSize, ShutdownGrace: time.Second},
		edge.Deps{NC: nc, JS: js, Registerer: reg, Gatherer: reg, Listener: ln, Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = objs.Close() })
	for !svc.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	cat, err := catalog.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return &cli.Client{BaseURL: "http://" + ln.Addr().String(), Token: adminKey}, cat, objs
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for p, b := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUploadModelResumes(t *testing.T) {
	cl, cat := startEdge(t)
	ctx := context.Background()
	dir, state := t.TempDir(), t.TempDir()
	big := bytes.Repeat([]byte("weights!"), 3*partSize/8+5) // 4 parts
	files := map[string][]byte{"model.safetensors": big, "sub/config.json": []byte(`{"x":1}`)}
	writeFiles(t, dir, files)
	writeFiles(t, dir, map[string][]byte{".git/HEAD": []byte("ref"), ".aiforge/x": []byte("y")})

	// An earlier run opened the session and sent part 1 (good) and part 2
	// (damaged on disk since: the client must send it again).
	listed, err := cli.ScanModelDir(dir)
	if err != nil || len(listed) != 2 {
		t.Fatalf("scan: %v %v", listed, err)
	}
	var sess struct {
		ID string `json:"id"`
	}
	if err := cl.Do(ctx, "POST", "/admin/v1/uploads", map[string]any{"name": "acme/m", "files": listed}, &sess); err != nil {
		t.Fatal(err)
	}
	put := func(n int, b []byte) {
		req, _ := http.NewRequest("PUT", cl.BaseURL+"/admin/v1/uploads/"+sess.ID+"/parts/"+string(rune('0'+n))+"/model.safetensors", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("put part %d: %v %v", n, resp, err)
		}
		resp.Body.Close()
	}
	put(1, big[:partSize])
	put(2, bytes.Repeat([]byte{'x'}, partSize))
	abs, _ := filepath.Abs(dir)
	h := sha256.Sum256([]byte(abs + "\x00" + "acme/m" + "\x00" + cl.BaseURL))
	stateFile := filepath.Join(state, hex.EncodeToString(h[:])+".json")
	b, _ := json.Marshal(map[string]string{"upload_id": sess.ID})
	if err := os.WriteFile(stateFile, b, 0o600); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	res, err := cl.UploadModel(ctx, cli.UploadOptions{Dir: dir, Name: "acme/m", StateDir: state, Parallel: 2,
		Progress: func(total int64) *cli.Progress { return cli.NewProgress(&out, false, "upload", total) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.UploadID != sess.ID || res.Skipped != 1 || res.Sent != 4 {
		t.Fatalf("result %+v: want the old session, 1 part skipped, 4 sent", res)
	}
	if res.Version.Status != catalog.StatusScanning || len(res.Version.Files) != 2 {
		t.Fatalf("version %+v", res.Version)
	}
	for _, f := range res.Version.Files {
		if f.SHA256 != hexSum(files[f.Path]) || f.Size != int64(len(files[f.Path])) {
			t.Fatalf("file %+v", f)
		}
	}
	if _, err := os.Stat(stateFile); !os.IsNotExist(err) {
		t.Fatalf("state file kept after completion: %v", err)
	}
	if !strings.Contains(out.String(), "100%") {
		t.Fatalf("progress output %q", out.String())
	}
	e, err := cat.Get(ctx, "acme/m")
	if err != nil || len(e.Versions) != 1 || e.Versions[0].Status != catalog.StatusScanning {
		t.Fatalf("catalog %+v %v", e, err)
	}

	// A second upload of the same directory is a new version.
	res2, err := cl.UploadModel(ctx, cli.UploadOptions{Dir: dir, Name: "acme/m", StateDir: state})
	if err != nil || res2.Version.Version != 2 || res2.Skipped != 0 {
		t.Fatalf("second upload %+v %v", res2, err)
	}
}

func TestParseManifest(t *testing.T) {
	a, b := hexSum([]byte("a")), hexSum([]byte("b"))
	m, err := cli.ParseManifest([]byte(a + "  model.safetensors\n" + strings.ToUpper(b) + " *./sub/c.json\n\n"))
	if err != nil || m["model.safetensors"] != a || m["sub/c.json"] != b || len(m) != 2 {
		t.Fatalf("sha256sum format: %v %v", m, err)
	}
	m, err = cli.ParseManifest([]byte(`{"x.bin":"` + a + `"}`))
	if err != nil || m["x.bin"] != a {
		t.Fatalf("json format: %v %v", m, err)
	}
	if _, err := cli.ParseManifest([]byte("nothex  x\n")); err == nil {
		t.Fatal("a bad line was accepted")
	}
}
