package guardian

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
)

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

type env struct {
	js      jetstream.JetStream
	objects objstore.Store
	cat     *catalog.Store
	logs    *logBuf
	svc     *Service
}

// start runs a guardian on an embedded JetStream and a local object store.
func start(t *testing.T, cfg Config, hc *http.Client) *env {
	t.Helper()
	_, nc := natstest.JetStream(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := events.Ensure(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.NewLocal(objstore.LocalConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = objects.Close() })
	cat, err := catalog.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	cfg.ScratchDir = t.TempDir()
	svc, err := New(cfg, Deps{JS: js, Objects: objects, HTTPClient: hc,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &env{js: js, objects: objects, cat: cat, logs: logs, svc: svc}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// safetensors builds a valid safetensors file of F32 tensors (name ->
// shape).
func safetensors(tensors map[string][]int64) []byte {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	off := int64(0)
	for _, n := range names {
		count := int64(1)
		var dims []string
		for _, d := range tensors[n] {
			count *= d
			dims = append(dims, fmt.Sprint(d))
		}
		parts = append(parts, fmt.Sprintf(`%q:{"dtype":"F32","shape":[%s],"data_offsets":[%d,%d]}`, n, strings.Join(dims, ","), off, off+count*4))
		off += count * 4
	}
	h := "{" + strings.Join(parts, ",") + "}"
	for len(h)%8 != 0 {
		h += " "
	}
	var b bytes.Buffer
	var l [8]byte
	binary.LittleEndian.PutUint64(l[:], uint64(len(h)))
	b.Write(l[:])
	b.WriteString(h)
	b.Write(make([]byte, off))
	return b.Bytes()
}

// shardedModel is a good sharded safetensors model: 2*3 + 4*5 = 26
// parameters under apache-2.0.
func shardedModel() map[string][]byte {
	return map[string][]byte{
		"model-00001-of-00002.safetensors": safetensors(map[string][]int64{"a.weight": {2, 3}}),
		"model-00002-of-00002.safetensors": safetensors(map[string][]int64{"b.weight": {4, 5}}),
		"model.safetensors.index.json": []byte(`{"metadata":{"total_size":104},"weight_map":{` +
			`"a.weight":"model-00001-of-00002.safetensors","b.weight":"model-00002-of-00002.safetensors"}}`),
		"config.json":    []byte(`{"model_type":"llama","hidden_size":4}`),
		"README.md":      []byte("---\nlicense: apache-2.0\n---\n# Tiny\n\nA test model.\n"),
		"tokenizer.json": []byte(`{"version":"1.0","model":{"type":"BPE","vocab":{"a":0}}}`),
	}
}

// upload stores files as a new catalog version and publishes its upload
// event, as the edge does.
func (e *env) upload(t *testing.T, name string, files map[string][]byte, manifest map[string]string) (catalog.Version, events.ModelUploadedV1) {
	t.Helper()
	ctx := context.Background()
	v, err := e.cat.AddVersion(ctx, name, events.ModelKindModel, "", catalog.Version{Source: catalog.Source{Type: events.ModelSourceUpload}})
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	ev := events.ModelUploadedV1{Name: name, Version: v.Version, Kind: events.ModelKindModel,
		Source: events.ModelSource{Type: events.ModelSourceUpload}, Prefix: v.Prefix, Manifest: manifest, UploadedAt: time.Now().UTC()}
	for _, p := range paths {
		info, err := e.objects.Put(ctx, v.Prefix+p, bytes.NewReader(files[p]), int64(len(files[p])), "")
		if err != nil {
			t.Fatal(err)
		}
		ev.Files = append(ev.Files, events.ModelFile{Path: p, Size: info.Size, SHA256: info.SHA256})
	}
	return v, ev
}

func (e *env) publish(t *testing.T, ev events.ModelUploadedV1) {
	t.Helper()
	if _, err := events.Publish(context.Background(), e.js, ev,
		events.Envelope{ID: fmt.Sprintf("test-upload-%s-%d", ev.Name, ev.Version), Source: "test"}); err != nil {
		t.Fatal(err)
	}
}

// settled waits until version n of name has a verdict and returns it.
func (e *env) settled(t *testing.T, name string, n int) catalog.Version {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		entry, err := e.cat.Get(context.Background(), name)
		if err == nil {
			if v, ok := entry.Find(n); ok && (v.Status == catalog.StatusPublished || v.Status == catalog.StatusRejected) {
				return *v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s v%d has no verdict (entry %+v, err %v)\nlogs:\n%s", name, n, entry, err, e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verdictEvent reads the verdict published for name.
func (e *env) verdictEvent(t *testing.T, name string) (events.Envelope, *events.ModelVerdictV2) {
	t.Helper()
	ctx := context.Background()
	stream, err := e.js.Stream(ctx, events.StreamModels)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, events.Subject(events.TypeModelVerdictV2, name))
	if err != nil {
		t.Fatalf("no verdict event for %s: %v", name, err)
	}
	reg := events.NewRegistry(func() events.Event { return &events.ModelVerdictV2{} })
	env, ev, err := reg.Decode(msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	return env, ev.(*events.ModelVerdictV2)
}

func hasReason(v catalog.Version, code, file string) bool {
	for _, r := range v.Reasons {
		if r.Code == code && (file == "" || r.File == file) {
			return true
		}
	}
	return false
}

func TestScanPublishesGoodShardedModel(t *testing.T) {
	e := start(t, Config{}, nil)
	files := shardedModel()
	const template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
	files["tokenizer_config.json"] = []byte(`{"chat_template": "` + template + `"}`)
	manifest := map[string]string{"model-00001-of-00002.safetensors": sha(files["model-00001-of-00002.safetensors"])}
	_, ev := e.upload(t, "acme/tiny", files, manifest)
	e.publish(t, ev)
	v := e.settled(t, "acme/tiny", 1)
	if v.Status != catalog.StatusPublished {
		t.Fatalf("status %s, reasons %+v", v.Status, v.Reasons)
	}
	if v.Parameters != 26 || v.License != "apache-2.0" || v.Format != "safetensors" || v.DTypes["F32"] != 26 || v.ChatTemplate != template {
		t.Fatalf("version = %+v", v)
	}
	if len(v.Files) != len(files) {
		t.Fatalf("files = %+v", v.Files)
	}
	for _, f := range v.Files {
		if f.SHA256 != sha(files[f.Path]) || f.Size != int64(len(files[f.Path])) {
			t.Errorf("file %s: %+v", f.Path, f)
		}
	}
	env, verdict := e.verdictEvent(t, "acme/tiny")
	if env.ID != VerdictID("acme/tiny", 1) || verdict.Status != events.VerdictPublished || verdict.Parameters != 26 || verdict.License != "apache-2.0" ||
		verdict.ChatTemplate != template {
		t.Fatalf("verdict event %+v %+v", env, verdict)
	}
}

func TestScanRejectsPickle(t *testing.T) {
	e := start(t, Config{}, nil)
	files := map[string][]byte{
		"config.json":       []byte(`{"model_type":"llama"}`),
		"pytorch_model.bin": append([]byte{0x80, 0x04, 0x95}, []byte("cos\nsystem\n(S'echo owned'\ntR.")...),
	}
	_, ev := e.upload(t, "acme/pickled", files, nil)
	e.publish(t, ev)
	v := e.settled(t, "acme/pickled", 1)
	if v.Status != catalog.StatusRejected || !hasReason(v, "code_bearing_pickle", "pytorch_model.bin") {
		t.Fatalf("version = %+v", v)
	}
	if _, verdict := e.verdictEvent(t, "acme/pickled"); verdict.Status != events.VerdictRejected {
		t.Fatalf("verdict event %+v", verdict)
	}
}

func TestScanRejectsObjectChangedAfterUpload(t *testing.T) {
	e := start(t, Config{}, nil)
	files := shardedModel()
	v, ev := e.upload(t, "acme/tampered", files, nil)
	// Same size, different bytes: only the digest tells.
	bad := bytes.Clone(files["config.json"])
	bad[len(bad)-2] = ' '
	if _, err := e.objects.Put(context.Background(), v.Prefix+"config.json", bytes.NewReader(bad), int64(len(bad)), ""); err != nil {
		t.Fatal(err)
	}
	e.publish(t, ev)
	got := e.settled(t, "acme/tampered", 1)
	if got.Status != catalog.StatusRejected || !hasReason(got, "hash_mismatch", "config.json") {
		t.Fatalf("version = %+v", got)
	}
}

func TestScanRejectsMissingAndExtraObjects(t *testing.T) {
	e := start(t, Config{}, nil)
	files := shardedModel()
	v, ev := e.upload(t, "acme/missing", files, nil)
	ctx := context.Background()
	if err := e.objects.Delete(ctx, v.Prefix+"tokenizer.json"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.objects.Put(ctx, v.Prefix+"extra.py", strings.NewReader("import os\n"), 10, ""); err != nil {
		t.Fatal(err)
	}
	e.publish(t, ev)
	got := e.settled(t, "acme/missing", 1)
	if got.Status != catalog.StatusRejected || !hasReason(got, CodeFileMissing, "tokenizer.json") || !hasReason(got, CodeUnexpectedFile, "extra.py") {
		t.Fatalf("version = %+v", got)
	}
}

func TestScanRejectsManifestMismatch(t *testing.T) {
	e := start(t, Config{}, nil)
	files := shardedModel()
	_, ev := e.upload(t, "acme/manifest", files, map[string]string{"config.json": sha([]byte("something else"))})
	e.publish(t, ev)
	got := e.settled(t, "acme/manifest", 1)
	if got.Status != catalog.StatusRejected || !hasReason(got, "hash_mismatch", "config.json") {
		t.Fatalf("version = %+v", got)
	}
}
