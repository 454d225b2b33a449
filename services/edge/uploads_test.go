package edge_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
	"github.com/aiforge/aiforge/services/edge"
)

const testPart = 1024

// modelEdge is an edge with an object store and a small upload part size.
type modelEdge struct {
	*harness
	objs objstore.Store
	cat  *catalog.Store
}

func startModelEdge(t *testing.T) *modelEdge {
	t.Helper()
	ns, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = objs.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	svc, err := edge.New(edge.Config{AdminKey: adminKey, UploadPartBytes: testPart, ShutdownGrace: 2 * time.Second}, edge.Deps{
		NC: nc, JS: js, Registerer: reg, Gatherer: reg, Listener: ln, Objects: objs,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("edge Run = %v", err)
		}
	})
	h := &harness{t: t, ns: ns, nc: nc, js: js, svc: svc, url: "http://" + ln.Addr().String(), logs: logs}
	eventually(t, 10*time.Second, svc.Ready, "edge ready")
	cat, err := catalog.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return &modelEdge{harness: h, objs: objs, cat: cat}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// blob is n deterministic bytes.
func blob(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

type upload struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Name     string `json:"name"`
	Version  int    `json:"version"`
	PartSize int64  `json:"part_size"`
	Files    []struct {
		Path     string `json:"path"`
		Size     int64  `json:"size"`
		Parts    int    `json:"parts"`
		Received []struct {
			Part   int    `json:"part"`
			Size   int64  `json:"size"`
			SHA256 string `json:"sha256"`
		} `json:"received"`
	} `json:"files"`
}

func (m *modelEdge) open(name string, files map[string][]byte, manifest map[string]string) upload {
	m.t.Helper()
	var list []map[string]any
	for p, b := range files {
		list = append(list, map[string]any{"path": p, "size": len(b)})
	}
	body := map[string]any{"name": name, "files": list}
	if manifest != nil {
		body["manifest"] = manifest
	}
	r := m.admin("POST", "/admin/v1/uploads", body)
	if r.status != http.StatusCreated {
		m.t.Fatalf("open upload: %d %s", r.status, r.body)
	}
	var u upload
	if err := json.Unmarshal(r.body, &u); err != nil {
		m.t.Fatal(err)
	}
	return u
}

func (m *modelEdge) putPart(id, p string, n int, data []byte, hash string) response {
	m.t.Helper()
	hdr := map[string]string{}
	if hash != "" {
		hdr[edge.HeaderPartSHA256] = hash
	}
	return m.do("PUT", fmt.Sprintf("/admin/v1/uploads/%s/parts/%d/%s", id, n, p), adminKey, data, hdr)
}

// part returns part n (1-based) of data.
func part(data []byte, n int) []byte {
	lo := (n - 1) * testPart
	return data[lo:min(lo+testPart, len(data))]
}

// sendAll sends every part of every file.
func (m *modelEdge) sendAll(u upload, files map[string][]byte) {
	m.t.Helper()
	for _, f := range u.Files {
		for n := 1; n <= f.Parts; n++ {
			b := part(files[f.Path], n)
			if r := m.putPart(u.ID, f.Path, n, b, sum(b)); r.status != http.StatusOK {
				m.t.Fatalf("put %s part %d: %d %s", f.Path, n, r.status, r.body)
			}
		}
	}
}

func (m *modelEdge) uploadedCount(name string) uint64 {
	m.t.Helper()
	subj := events.Subject(events.TypeModelUploadedV1, name)
	st, err := m.js.Stream(context.Background(), events.StreamModels)
	if err != nil {
		m.t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		m.t.Fatal(err)
	}
	return info.State.Subjects[subj]
}

func (m *modelEdge) keys(prefix string) []string {
	m.t.Helper()
	var out []string
	for info, err := range m.objs.List(context.Background(), prefix) {
		if err != nil {
			m.t.Fatal(err)
		}
		out = append(out, info.Key)
	}
	return out
}

func TestModelUploadMultipartResume(t *testing.T) {
	m := startModelEdge(t)
	name := "acme/tiny"
	files := map[string][]byte{
		"model.safetensors": blob(2*testPart+300, 1),
		"cfg/config.json":   []byte(`{"a":1}`),
		"empty.txt":         {},
	}
	manifest := map[string]string{"model.safetensors": strings.ToUpper(sum(files["model.safetensors"]))}
	u := m.open(name, files, manifest)
	if u.Version != 1 || u.PartSize != testPart || !strings.HasPrefix(u.ID, "upl_") || len(u.Files) != 3 {
		t.Fatalf("session %+v", u)
	}
	parts := map[string]int{}
	for _, f := range u.Files {
		parts[f.Path] = f.Parts
	}
	if parts["model.safetensors"] != 3 || parts["cfg/config.json"] != 1 || parts["empty.txt"] != 0 {
		t.Fatalf("parts %v", parts)
	}
	e, err := m.cat.Get(context.Background(), name)
	if err != nil || e.Versions[0].Status != catalog.StatusUploading || e.Versions[0].Source.Type != events.ModelSourceUpload {
		t.Fatalf("catalog after open: %+v, %v", e, err)
	}

	// Part 2 first, then a resuming client asks what is there.
	big := files["model.safetensors"]
	if r := m.putPart(u.ID, "model.safetensors", 2, part(big, 2), ""); r.status != http.StatusOK {
		t.Fatalf("put part 2: %d %s", r.status, r.body)
	}
	r := m.admin("GET", "/admin/v1/uploads/"+u.ID, nil)
	var got upload
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusOK {
		t.Fatalf("get upload: %d %s", r.status, r.body)
	}
	for _, f := range got.Files {
		want := 0
		if f.Path == "model.safetensors" {
			want = 1
		}
		if len(f.Received) != want {
			t.Fatalf("file %s received %+v", f.Path, f.Received)
		}
		if want == 1 && (f.Received[0].Part != 2 || f.Received[0].Size != testPart || f.Received[0].SHA256 != sum(part(big, 2))) {
			t.Fatalf("received %+v", f.Received[0])
		}
	}

	// Sending every part (part 2 again) replaces, never duplicates.
	m.sendAll(u, files)
	sub, err := m.nc.SubscribeSync(events.Subject(events.TypeModelUploadedV1, name))
	if err != nil {
		t.Fatal(err)
	}
	r = m.admin("POST", "/admin/v1/uploads/"+u.ID+"/complete", nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("complete: %d %s", r.status, r.body)
	}
	var v catalog.Version
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	if v.Status != catalog.StatusScanning || len(v.Files) != 3 {
		t.Fatalf("version after complete %+v", v)
	}
	// Completing again answers the same and publishes nothing new.
	if r := m.admin("POST", "/admin/v1/uploads/"+u.ID+"/complete", nil); r.status != http.StatusAccepted {
		t.Fatalf("second complete: %d %s", r.status, r.body)
	}
	if n := m.uploadedCount(name); n != 1 {
		t.Fatalf("%d uploaded events, want 1", n)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.ModelUploadedV1
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Name != name || ev.Version != 1 || ev.Kind != events.ModelKindModel || ev.Prefix != catalog.Prefix(name, 1) ||
		ev.Manifest["model.safetensors"] != sum(big) || msg.Header.Get(events.HeaderType) != events.TypeModelUploadedV1 {
		t.Fatalf("event %+v headers %v", ev, msg.Header)
	}
	if len(ev.Files) != 3 {
		t.Fatalf("event files %+v", ev.Files)
	}
	for _, f := range ev.Files {
		want := files[f.Path]
		if f.Size != int64(len(want)) || f.SHA256 != sum(want) {
			t.Fatalf("event file %+v, want size %d sha %s", f, len(want), sum(want))
		}
		rc, info, err := m.objs.Get(context.Background(), ev.Prefix+f.Path)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(rc)
		rc.Close()
		if !bytes.Equal(buf.Bytes(), want) || info.SHA256 != f.SHA256 {
			t.Fatalf("stored %s differs", f.Path)
		}
	}
	if left := m.keys("uploads/"); len(left) != 0 {
		t.Fatalf("parts left behind: %v", left)
	}
	e, _ = m.cat.Get(context.Background(), name)
	if e.Versions[0].Status != catalog.StatusScanning || len(e.Versions[0].Files) != 3 {
		t.Fatalf("catalog after complete %+v", e.Versions[0])
	}
	// The session is closed for parts.
	apiError(t, m.putPart(u.ID, "empty.txt", 1, nil, ""), http.StatusConflict, "conflict")
}

func TestModelUploadRejectsBadInput(t *testing.T) {
	m := startModelEdge(t)
	for _, tc := range []struct {
		files any
		code  string
	}{
		{[]map[string]any{{"path": "../x", "size": 1}}, "invalid_path"},
		{[]map[string]any{{"path": "/abs", "size": 1}}, "invalid_path"},
		{[]map[string]any{{"path": "a/../b", "size": 1}}, "invalid_path"},
		{[]map[string]any{{"path": "a//b", "size": 1}}, "invalid_path"},
		{[]map[string]any{{"path": "a/", "size": 1}}, "invalid_path"},
		{[]map[string]any{{"path": "", "size": 1}}, "invalid_path"},
		{[]map[string]any{{"path": "a", "size": 1}, {"path": "a", "size": 2}}, "invalid_path"},
		{[]map[string]any{{"path": "a", "size": 1}, {"path": "a/b", "size": 2}}, "invalid_path"},
		{[]map[string]any{{"path": "a", "size": -1}}, "invalid_request"},
		{[]map[string]any{}, "missing_required_parameter"},
	} {
		r := m.admin("POST", "/admin/v1/uploads", map[string]any{"name": "bad", "files": tc.files})
		apiError(t, r, http.StatusBadRequest, tc.code)
	}
	ok := []map[string]any{{"path": "a", "size": 1}}
	apiError(t, m.admin("POST", "/admin/v1/uploads", map[string]any{"name": "bad", "files": ok, "manifest": map[string]string{"zzz": sum(nil)}}),
		http.StatusBadRequest, "invalid_path")
	apiError(t, m.admin("POST", "/admin/v1/uploads", map[string]any{"name": "bad", "files": ok, "manifest": map[string]string{"a": "xyz"}}),
		http.StatusBadRequest, "invalid_request")
	apiError(t, m.admin("POST", "/admin/v1/uploads", map[string]any{"name": "../bad", "files": ok}), http.StatusBadRequest, "invalid_request")
	apiError(t, m.admin("POST", "/admin/v1/uploads", map[string]any{"name": "bad", "kind": "adapter", "files": ok}), http.StatusBadRequest, "invalid_request")
	// Nothing reached the catalog.
	apiError(t, m.admin("GET", "/admin/v1/catalog/bad", nil), http.StatusNotFound, "not_found")
	apiError(t, m.admin("GET", "/admin/v1/uploads/upl_nope", nil), http.StatusNotFound, "not_found")
	apiError(t, m.do("POST", "/admin/v1/uploads", "wrong-key-0123456789", map[string]any{"name": "x", "files": ok}, nil), http.StatusUnauthorized, "invalid_api_key")
}

func TestModelUploadPartChecks(t *testing.T) {
	m := startModelEdge(t)
	data := blob(testPart+10, 3)
	u := m.open("m", map[string][]byte{"w.bin": data}, nil)
	p1 := part(data, 1)
	apiError(t, m.putPart(u.ID, "w.bin", 1, p1, sum([]byte("something else"))), http.StatusBadRequest, "part_hash_mismatch")
	apiError(t, m.putPart(u.ID, "w.bin", 1, p1[:10], ""), http.StatusBadRequest, "part_size_mismatch")
	apiError(t, m.putPart(u.ID, "w.bin", 3, p1[:10], ""), http.StatusBadRequest, "invalid_request")
	apiError(t, m.putPart(u.ID, "other.bin", 1, p1, ""), http.StatusBadRequest, "invalid_path")
	if left := m.keys("uploads/"); len(left) != 0 {
		t.Fatalf("a refused part was kept: %v", left)
	}

	// Complete with part 2 missing names it and publishes nothing.
	if r := m.putPart(u.ID, "w.bin", 1, p1, sum(p1)); r.status != http.StatusOK {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	e := apiError(t, m.admin("POST", "/admin/v1/uploads/"+u.ID+"/complete", nil), http.StatusBadRequest, "upload_incomplete")
	if msg := e["message"].(string); !strings.Contains(msg, "Part 2") || !strings.Contains(msg, "w.bin") {
		t.Fatalf("message %q does not name the missing part", msg)
	}
	if n := m.uploadedCount("m"); n != 0 {
		t.Fatalf("%d uploaded events after a failed complete", n)
	}

	// Abort: parts gone, version rejected, session gone.
	if r := m.admin("DELETE", "/admin/v1/uploads/"+u.ID, nil); r.status != http.StatusOK {
		t.Fatalf("abort: %d %s", r.status, r.body)
	}
	if left := m.keys("uploads/"); len(left) != 0 {
		t.Fatalf("parts left after abort: %v", left)
	}
	ent, err := m.cat.Get(context.Background(), "m")
	if err != nil || ent.Versions[0].Status != catalog.StatusRejected || ent.Versions[0].Reasons[0].Code != "upload_aborted" {
		t.Fatalf("after abort %+v %v", ent, err)
	}
	apiError(t, m.admin("GET", "/admin/v1/uploads/"+u.ID, nil), http.StatusNotFound, "not_found")
}
