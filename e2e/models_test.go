package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/catalog"
)

// safetensorsFile builds a safetensors file of F32 tensors with the given
// shapes: an 8-byte little-endian header length, the JSON header, the data.
func safetensorsFile(t *testing.T, shapes map[string][]int64) []byte {
	t.Helper()
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{}
	var off int64
	for _, n := range names {
		elems := int64(1)
		for _, d := range shapes[n] {
			elems *= d
		}
		header[n] = map[string]any{"dtype": "F32", "shape": shapes[n], "data_offsets": []int64{off, off + 4*elems}}
		off += 4 * elems
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(out, h...)
	for i := int64(0); i < off; i++ {
		out = append(out, byte(i*31))
	}
	return out
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func writeModelDir(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for p, b := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestModelUploadThroughGuardian uploads models the way `aiforge models
// upload` does, in parts, to the all-in-one stack: a sharded safetensors
// model is published with its parameter count, licence and hashes; a
// pickle is rejected.
func TestModelUploadThroughGuardian(t *testing.T) {
	s := startStack(t, stackOpts{mutate: func(o *app.Options) { o.Edge.UploadPartBytes = 1024 }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	shard1 := safetensorsFile(t, map[string][]int64{"a.weight": {16, 32}})                 // 512
	shard2 := safetensorsFile(t, map[string][]int64{"b.weight": {32, 32}, "b.bias": {32}}) // 1056
	files := map[string][]byte{
		"model-00001-of-00002.safetensors": shard1,
		"model-00002-of-00002.safetensors": shard2,
		"model.safetensors.index.json": []byte(fmt.Sprintf(`{"metadata":{"total_size":%d},"weight_map":{`+
			`"a.weight":"model-00001-of-00002.safetensors","b.weight":"model-00002-of-00002.safetensors",`+
			`"b.bias":"model-00002-of-00002.safetensors"}}`, 4*(512+1056))),
		"config.json":    []byte(`{"model_type":"llama","hidden_size":32}`),
		"README.md":      []byte("---\nlicense: apache-2.0\n---\n# Tiny\n\nA test model.\n"),
		"tokenizer.json": []byte(`{"version":"1.0","model":{"type":"BPE","vocab":{"a":0}}}`),
	}
	dir := writeModelDir(t, files)
	var lines []string
	for p, b := range files {
		lines = append(lines, sha256Hex(b)+"  "+p)
	}
	manifest, err := cli.ParseManifest([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.admin.UploadModel(ctx, cli.UploadOptions{Dir: dir, Name: "acme/tiny", Manifest: manifest, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent < len(files)+2 { // the shards take several parts each
		t.Fatalf("sent %d parts, want multipart shards", res.Sent)
	}
	v, err := s.admin.WaitVersion(ctx, "acme/tiny", res.Version.Version, 50*time.Millisecond, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != catalog.StatusPublished || v.Parameters != 512+1056 || v.License != "apache-2.0" || len(v.Reasons) != 0 {
		t.Fatalf("version %+v", v)
	}
	if len(v.Files) != len(files) {
		t.Fatalf("files %+v", v.Files)
	}
	for _, f := range v.Files {
		if f.SHA256 != sha256Hex(files[f.Path]) || f.Size != int64(len(files[f.Path])) {
			t.Fatalf("file %+v", f)
		}
	}
	var summary strings.Builder
	cli.PrintVerdict(&summary, "acme/tiny", v)
	if !strings.Contains(summary.String(), "published") || !strings.Contains(summary.String(), "apache-2.0") {
		t.Fatalf("summary %q", summary.String())
	}

	// A pickle is code: rejected, with the file named.
	bad := writeModelDir(t, map[string][]byte{
		"config.json":       []byte(`{"model_type":"llama"}`),
		"pytorch_model.bin": append([]byte{0x80, 0x04, 0x95}, []byte("cos\nsystem\n(S'echo owned'\ntR.")...),
	})
	res, err = s.admin.UploadModel(ctx, cli.UploadOptions{Dir: bad, Name: "acme/pickled", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	v, err = s.admin.WaitVersion(ctx, "acme/pickled", res.Version.Version, 50*time.Millisecond, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range v.Reasons {
		found = found || (r.Code == "code_bearing_pickle" && r.File == "pytorch_model.bin")
	}
	if v.Status != catalog.StatusRejected || !found {
		t.Fatalf("pickle version %+v", v)
	}

	// Only the published version deploys; rollback needs a history.
	var d catalog.Deployment
	if err := s.admin.Do(ctx, "POST", "/admin/v1/deployments", map[string]any{"model": "tiny", "catalog": "acme/tiny"}, &d); err != nil || d.Version != 1 {
		t.Fatalf("deploy: %+v %v", d, err)
	}
	if err := s.admin.Do(ctx, "POST", "/admin/v1/deployments", map[string]any{"model": "pickled", "catalog": "acme/pickled", "version": 1}, nil); err == nil {
		t.Fatal("a rejected version was deployed")
	}
}
