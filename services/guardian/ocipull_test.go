package guardian

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/ocitest"
	"github.com/aiforge/aiforge/services/guardian/oci"
)

const (
	ociUser     = "robot$puller"
	ociPassword = "oci-Secret-Pass-7d9f2b"
)

func startOCI(t *testing.T, reg *ocitest.Registry, user, password string) *env {
	return start(t, Config{OCI: OCIConfig{InsecureRegistries: []string{reg.Host}, Username: user, Password: password}}, nil)
}

// ociPull publishes a pull request the way the edge does for
// `aiforge models pull oci://...`: Kind empty unless asked.
func (e *env) ociPull(t *testing.T, id, name, ref, kind, base string) {
	t.Helper()
	repo, rev := ref, ""
	if at := strings.LastIndex(ref, "@"); at >= 0 {
		repo, rev = ref[:at], ref[at+1:]
	} else if colon := strings.LastIndex(ref, ":"); colon > len("oci://") {
		repo, rev = ref[:colon], ref[colon+1:]
	}
	ev := events.ModelPullRequestedV1{PullID: id, Name: name, Kind: kind, BaseModel: base, Repo: repo, Revision: rev, RequestedAt: time.Now().UTC()}
	if _, err := events.Publish(context.Background(), e.js, ev, events.Envelope{ID: "pull-" + id, Source: "test"}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) pullRecord(t *testing.T, id string) catalog.Pull {
	t.Helper()
	e.handled(t)
	p, err := e.cat.GetPull(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func modelFiles() map[string][]byte {
	f := shardedModel()
	f["docs/NOTES.md"] = []byte("nested path\n")
	return f
}

// A tag is pinned to its manifest digest; each file layer lands under its
// title with the layer's digest; a second pull of the same tag downloads
// no blob; a pull by that digest under another name makes a version too.
func TestOCIPullPinsTagToDigest(t *testing.T) {
	reg := ocitest.New(t)
	files := modelFiles()
	pushed := reg.PushFiles(t, "acme/tiny", "v1", oci.ArtifactTypeModel, files, nil)
	e := startOCI(t, reg, "", "")

	e.ociPull(t, "p1", "tiny", reg.Ref("acme/tiny", "v1"), "", "")
	v := e.settled(t, "tiny", 1)
	if v.Status != catalog.StatusPublished {
		t.Fatalf("status %s, reasons %+v\nlogs:\n%s", v.Status, v.Reasons, e.logs.String())
	}
	want := catalog.Source{Type: events.ModelSourceOCI, Repo: reg.Host + "/acme/tiny", Revision: "v1", Commit: pushed.Digest}
	if v.Source != want || v.Parameters != 26 || len(v.Files) != len(files) {
		t.Fatalf("version %+v, want source %+v", v, want)
	}
	for _, f := range v.Files {
		if f.SHA256 != ocitest.SHA256(files[f.Path]) {
			t.Errorf("%s: sha256 %s", f.Path, f.SHA256)
		}
	}
	if p := e.pullRecord(t, "p1"); p.Commit != pushed.Digest || p.Status != catalog.PullDone || p.Skipped {
		t.Fatalf("pull record %+v", p)
	}
	gets := reg.BlobGETs()
	if gets != len(files) {
		t.Fatalf("%d blob GETs for %d files", gets, len(files))
	}

	e.ociPull(t, "p2", "tiny", reg.Ref("acme/tiny", "v1"), "", "")
	if p := e.pullRecord(t, "p2"); !p.Skipped || p.Version != 1 {
		t.Fatalf("second pull %+v", p)
	}
	if reg.BlobGETs() != gets {
		t.Fatalf("the second pull fetched %d blobs", reg.BlobGETs()-gets)
	}

	e.ociPull(t, "p3", "tiny-pinned", "oci://"+reg.Host+"/acme/tiny@"+pushed.Digest, "", "")
	v = e.settled(t, "tiny-pinned", 1)
	if v.Status != catalog.StatusPublished || v.Source.Commit != pushed.Digest || v.Source.Revision != pushed.Digest {
		t.Fatalf("by digest: %+v", v)
	}
}

func TestOCIPullRejectsTamperedLayer(t *testing.T) {
	reg := ocitest.New(t)
	files := modelFiles()
	pushed := reg.PushFiles(t, "acme/tampered", "v1", oci.ArtifactTypeModel, files, nil)
	var victim string
	for _, l := range pushed.Layers {
		if l.Annotations["org.opencontainers.image.title"] == "model-00002-of-00002.safetensors" {
			reg.Tamper(l.Digest.String())
			victim = l.Digest.String()
		}
	}
	if victim == "" {
		t.Fatal("no layer to tamper with")
	}
	e := startOCI(t, reg, "", "")
	e.ociPull(t, "p1", "tampered", reg.Ref("acme/tampered", "v1"), "", "")
	v := e.settled(t, "tampered", 1)
	if v.Status != catalog.StatusRejected || !hasReason(v, "hash_mismatch", "model-00002-of-00002.safetensors") {
		t.Fatalf("version %+v", v)
	}
	if _, err := e.objects.Stat(context.Background(), v.Prefix+"model-00002-of-00002.safetensors"); err == nil {
		t.Fatal("the tampered layer was stored")
	}
	if p := e.pullRecord(t, "p1"); p.Status != catalog.PullFailed || p.Reason == nil || p.Reason.Code != "hash_mismatch" {
		t.Fatalf("pull record %+v", p)
	}
}

// A registry that needs basic auth and redirects blob GETs to storage on
// another host: the credentials open the registry, never reach the
// storage, and never appear in the logs or the catalog.
func TestOCIPullAuthAndRedirectToBlobStorage(t *testing.T) {
	reg := ocitest.New(t)
	reg.RequireAuth(ociUser, ociPassword)
	files := modelFiles()
	reg.PushFiles(t, "acme/private", "v1", oci.ArtifactTypeModel, files, nil)
	reg.RedirectBlobs(true)

	anon := startOCI(t, reg, "", "")
	anon.ociPull(t, "p1", "private", reg.Ref("acme/private", "v1"), "", "")
	v := anon.settled(t, "private", 1)
	if v.Status != catalog.StatusRejected || !hasReason(v, CodeOCIError, "") {
		t.Fatalf("without credentials: %+v", v)
	}

	e := startOCI(t, reg, ociUser, ociPassword)
	e.ociPull(t, "p2", "private", reg.Ref("acme/private", "v1"), "", "")
	v = e.settled(t, "private", 1)
	if v.Status != catalog.StatusPublished || len(v.Files) != len(files) {
		t.Fatalf("with credentials: %+v\nlogs:\n%s", v, e.logs.String())
	}
	seen := reg.StorageAuth()
	if len(seen) != len(files) {
		t.Fatalf("blob storage saw %d requests for %d files", len(seen), len(files))
	}
	for _, a := range seen {
		if a != "" {
			t.Fatalf("blob storage got Authorization %q", a)
		}
	}
	entry, _ := e.cat.Get(context.Background(), "private")
	for _, text := range []string{e.logs.String(), anon.logs.String(), fmtAny(entry)} {
		if strings.Contains(text, ociPassword) {
			t.Fatal("the registry password leaked")
		}
	}
}

func fmtAny(v any) string { return strings.ReplaceAll(strings.TrimSpace(toJSON(v)), "\n", " ") }

// A KitOps ModelKit whose Kitfile declares a LoRA part becomes an adapter
// of the base the pull names; its modelpart layer is extracted.
func TestOCIPullModelKitLoRAAdapter(t *testing.T) {
	reg := ocitest.New(t)
	adapter := map[string][]byte{
		"adapter/adapter_config.json":       []byte(`{"peft_type":"LORA","r":8,"base_model_name_or_path":"qwen"}`),
		"adapter/adapter_model.safetensors": safetensors(map[string][]int64{"lora_A": {8, 4}}),
	}
	kitfile := map[string]any{
		"manifestVersion": "1.0.0",
		"package":         map[string]any{"name": "sql-lora", "license": "apache-2.0"},
		"model": map[string]any{"name": "sql-lora", "path": "adapter",
			"parts": []map[string]any{{"name": "lora", "path": "adapter", "type": "lora"}}},
	}
	reg.PushModelKit(t, "acme/sql-lora", "v1", kitfile, []ocitest.KitLayer{
		{Role: "modelpart", Files: adapter},
		{Role: "docs", Files: map[string][]byte{"README.md": []byte("---\nlicense: apache-2.0\n---\n# lora\n")}},
	})
	e := startOCI(t, reg, "", "")
	e.ociPull(t, "p1", "sql-lora", reg.Ref("acme/sql-lora", "v1"), "", "base-chat")
	v := e.settled(t, "sql-lora", 1)
	if v.Status != catalog.StatusPublished || len(v.Files) != 3 {
		t.Fatalf("version %+v\nlogs:\n%s", v, e.logs.String())
	}
	entry, err := e.cat.Get(context.Background(), "sql-lora")
	if err != nil || entry.Kind != events.ModelKindAdapter || entry.BaseModel != "base-chat" {
		t.Fatalf("entry %+v %v", entry, err)
	}

	// Without a base model, neither asked for nor declared: refused.
	e.ociPull(t, "p2", "other-lora", reg.Ref("acme/sql-lora", "v1"), "", "")
	if p := e.pullRecord(t, "p2"); p.Status != catalog.PullFailed || p.Reason == nil || p.Reason.Code != CodeOCIAdapterBase {
		t.Fatalf("pull without base %+v", p)
	}
}

func TestOCIPullRefusesUnsafeArtifacts(t *testing.T) {
	reg := ocitest.New(t)
	reg.PushFiles(t, "acme/escape", "v1", oci.ArtifactTypeModel, map[string][]byte{"../etc/passwd": []byte("x")}, nil)
	kit := map[string]any{"manifestVersion": "1.0.0", "model": map[string]any{"path": "m"}}
	reg.PushModelKit(t, "acme/link", "v1", kit, []ocitest.KitLayer{{Role: "model", Files: map[string][]byte{"m/x->/etc/passwd": nil}}})
	reg.PushModelKit(t, "acme/dotdot", "v1", kit, []ocitest.KitLayer{{Role: "model", Files: map[string][]byte{"../m": []byte("x")}}})
	e := startOCI(t, reg, "", "")
	for i, name := range []string{"escape", "link", "dotdot"} {
		e.ociPull(t, "p"+name, name, reg.Ref("acme/"+name, "v1"), "", "")
		v := e.settled(t, name, 1)
		if v.Status != catalog.StatusRejected || !hasReason(v, CodeOCIUnsafePath, "") {
			t.Fatalf("%d %s: %+v", i, name, v)
		}
	}
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// Credentials from a Docker config file (what --oci-auth-file reads); a
// config file that does not exist is no credentials, not an error.
func TestOCIPullDockerConfigAuth(t *testing.T) {
	reg := ocitest.New(t)
	reg.RequireAuth(ociUser, ociPassword)
	reg.PushFiles(t, "acme/private", "v1", oci.ArtifactTypeModel, modelFiles(), nil)
	cfg := filepath.Join(t.TempDir(), "config.json")
	auth := base64.StdEncoding.EncodeToString([]byte(ociUser + ":" + ociPassword))
	if err := os.WriteFile(cfg, []byte(`{"auths":{"`+reg.Host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := start(t, Config{OCI: OCIConfig{InsecureRegistries: []string{reg.Host}, AuthFile: cfg}}, nil)
	e.ociPull(t, "p1", "private", reg.Ref("acme/private", "v1"), "", "")
	if v := e.settled(t, "private", 1); v.Status != catalog.StatusPublished {
		t.Fatalf("with the Docker config: %+v\nlogs:\n%s", v, e.logs.String())
	}
	if strings.Contains(e.logs.String(), ociPassword) || strings.Contains(e.logs.String(), auth) {
		t.Fatal("the registry credentials leaked into the logs")
	}
	none := start(t, Config{OCI: OCIConfig{InsecureRegistries: []string{reg.Host}, AuthFile: filepath.Join(t.TempDir(), "missing.json")}}, nil)
	none.ociPull(t, "p2", "private", reg.Ref("acme/private", "v1"), "", "")
	if v := none.settled(t, "private", 1); v.Status != catalog.StatusRejected || !hasReason(v, CodeOCIError, "") {
		t.Fatalf("without credentials: %+v", v)
	}
}

// A ModelKit archive layer tampered with is rejected before anything is
// extracted from it; an aiforge artifact whose sha256 annotation disagrees
// with its layer is rejected too.
func TestOCIPullRejectsTamperedArchiveAndAnnotation(t *testing.T) {
	reg := ocitest.New(t)
	kit := map[string]any{"manifestVersion": "1.0.0", "model": map[string]any{"path": "model.safetensors"}}
	pushed := reg.PushModelKit(t, "acme/kit", "v1", kit, []ocitest.KitLayer{
		{Role: "model", Files: map[string][]byte{"model.safetensors": safetensors(map[string][]int64{"w": {2, 2}})}},
	})
	reg.Tamper(pushed.Layers[0].Digest.String())
	files := map[string][]byte{"README.md": []byte("# x\n")}
	reg.PushFiles(t, "acme/annotated", "v1", oci.ArtifactTypeModel, files,
		map[string]string{"ai.aiforge.model.sha256s": `{"README.md":"` + ocitest.SHA256([]byte("other")) + `"}`})
	e := startOCI(t, reg, "", "")

	e.ociPull(t, "p1", "kit", reg.Ref("acme/kit", "v1"), "", "")
	v := e.settled(t, "kit", 1)
	if v.Status != catalog.StatusRejected || !hasReason(v, "hash_mismatch", "") || len(v.Files) != 0 {
		t.Fatalf("tampered archive: %+v", v)
	}
	for info, err := range e.objects.List(context.Background(), v.Prefix) {
		t.Fatalf("extracted from a tampered layer: %+v %v", info, err)
	}

	e.ociPull(t, "p2", "annotated", reg.Ref("acme/annotated", "v1"), "", "")
	if v := e.settled(t, "annotated", 1); v.Status != catalog.StatusRejected || !hasReason(v, "hash_mismatch", "README.md") {
		t.Fatalf("annotation mismatch: %+v", v)
	}
}
