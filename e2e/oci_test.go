package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/internal/app"
	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/ociref"
	"github.com/aiforge/aiforge/pkg/ocitest"
)

// ociStack is an all-in-one stack whose guardian may speak plain HTTP to
// the test registry.
func ociStack(t *testing.T, reg *ocitest.Registry, o stackOpts) *stack {
	prev := o.mutate
	o.mutate = func(opts *app.Options) {
		opts.Guardian.OCI.InsecureRegistries = []string{reg.Host}
		if prev != nil {
			prev(opts)
		}
	}
	return startStack(t, o)
}

// pullOCI runs `aiforge models pull oci://...`'s code path to its verdict.
func pullOCI(t *testing.T, ctx context.Context, s *stack, ref, name, base string) (catalog.Pull, catalog.Version, string, error) {
	t.Helper()
	r, err := ociref.Parse(ref)
	if err != nil {
		t.Fatal(err)
	}
	ans, err := s.admin.RequestPull(ctx, cli.PullOptions{Repo: r.Repo(), Revision: r.Reference(), Name: name, BaseModel: base})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p, v, err := s.admin.FollowPull(ctx, ans, &out, nil)
	return p, v, out.String(), err
}

// TestOCIPushPullRoundTrip: a published model is pushed to a registry as
// an OCI artifact (`aiforge models push`), pulled back by tag pinned to the
// pushed digest with the same file digests, and pulled again without a
// blob download; an artifact with a tampered layer is rejected.
func TestOCIPushPullRoundTrip(t *testing.T) {
	reg := ocitest.New(t)
	s := ociStack(t, reg, stackOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dir := t.TempDir()
	files := map[string][]byte{
		"model.safetensors": safetensorsFile(t, map[string][]int64{"w": {8, 8}}),
		"config.json":       []byte(`{"model_type":"llama"}`),
		"README.md":         []byte("---\nlicense: mit\n---\n# tiny\n"),
	}
	for p, b := range files {
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	up, err := s.admin.UploadModel(ctx, cli.UploadOptions{Dir: dir, Name: "acme/tiny", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	orig, err := s.admin.WaitVersion(ctx, "acme/tiny", up.Version.Version, 100*time.Millisecond, nil, nil)
	if err != nil || orig.Status != catalog.StatusPublished {
		t.Fatalf("upload: %+v %v", orig, err)
	}

	pushed, err := s.admin.PushModel(ctx, cli.PushOptions{Name: "acme/tiny", Ref: reg.Ref("acme/tiny", "v1"), PlainHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pushed.Digest, "sha256:") || pushed.Version.Version != orig.Version {
		t.Fatalf("push %+v", pushed)
	}

	p, v, out, err := pullOCI(t, ctx, s, reg.Ref("acme/tiny", "v1"), "tiny-oci", "")
	if err != nil {
		t.Fatal(err)
	}
	want := catalog.Source{Type: events.ModelSourceOCI, Repo: reg.Host + "/acme/tiny", Revision: "v1", Commit: pushed.Digest}
	if p.Skipped || v.Status != catalog.StatusPublished || v.Source != want || v.Parameters != 64 || v.License != "mit" {
		t.Fatalf("pull %+v, version %+v", p, v)
	}
	if !sameFiles(orig.Files, v.Files) {
		t.Fatalf("round trip changed the files:\n%+v\n%+v", orig.Files, v.Files)
	}
	if !strings.Contains(out, "is digest "+pushed.Digest) {
		t.Fatalf("output %q", out)
	}
	gets := reg.BlobGETs()
	if gets != len(files) {
		t.Fatalf("%d blob GETs for %d files", gets, len(files))
	}

	// The same tag again: the digest is in the catalog, no blob is read.
	p, v2, out, err := pullOCI(t, ctx, s, reg.Ref("acme/tiny", "v1"), "tiny-oci", "")
	if err != nil || !p.Skipped || v2.Version != v.Version || reg.BlobGETs() != gets || !strings.Contains(out, "nothing downloaded") {
		t.Fatalf("second pull %+v, version %d, %d blob GETs, output %q, err %v", p, v2.Version, reg.BlobGETs()-gets, out, err)
	}

	// The pushed digest itself, under another name: the same files.
	_, v3, _, err := pullOCI(t, ctx, s, "oci://"+reg.Host+"/acme/tiny@"+pushed.Digest, "tiny-pinned", "")
	if err != nil || v3.Status != catalog.StatusPublished || !sameFiles(orig.Files, v3.Files) {
		t.Fatalf("pull by digest: %+v %v", v3, err)
	}

	// A layer tampered with at the registry.
	bad := reg.PushFiles(t, "acme/tampered", "v1", ociref.ArtifactTypeModel, files, nil)
	reg.Tamper(bad.Layers[0].Digest.String())
	_, v4, _, err := pullOCI(t, ctx, s, reg.Ref("acme/tampered", "v1"), "tampered", "")
	if err != nil || v4.Status != catalog.StatusRejected || len(v4.Reasons) == 0 || v4.Reasons[0].Code != "hash_mismatch" {
		t.Fatalf("tampered: %+v %v", v4, err)
	}
}

func sameFiles(a, b []catalog.File) bool {
	m := map[string]catalog.File{}
	for _, f := range a {
		m[f.Path] = f
	}
	if len(a) != len(b) {
		return false
	}
	for _, f := range b {
		if m[f.Path] != f {
			return false
		}
	}
	return true
}

// TestOCIModelKitLoRAAdapterServed: a KitOps ModelKit whose Kitfile
// declares a LoRA part is pulled as an adapter of the served base model,
// scanned, published, loaded into the base's engine and answered through
// the edge under its own name.
func TestOCIModelKitLoRAAdapterServed(t *testing.T) {
	reg := ocitest.New(t)
	ns := natstest.Server(t)
	engine, base := sim(t, enginesim.Config{Models: []string{"up-base"}})
	s := ociStack(t, reg, stackOpts{natsURL: ns.ClientURL(), targets: []string{"all"}})
	key, _ := s.tenantKey("acme")
	s.register("base-chat", base, "up-base")
	s.waitServed(key, "base-chat")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	kitfile := map[string]any{
		"manifestVersion": "1.0.0",
		"package":         map[string]any{"name": "sql-lora", "license": "apache-2.0"},
		"model": map[string]any{"name": "sql-lora", "path": "lora",
			"parts": []map[string]any{{"name": "sql", "path": "lora", "type": "lora"}}},
	}
	reg.PushModelKit(t, "acme/sql-lora", "v1", kitfile, []ocitest.KitLayer{
		{Role: "modelpart", Files: map[string][]byte{
			"lora/adapter_config.json":       []byte(`{"peft_type":"LORA","r":8,"base_model_name_or_path":"up-base"}`),
			"lora/adapter_model.safetensors": safetensorsFile(t, map[string][]int64{"lora_A": {8, 4}}),
		}},
		{Role: "docs", Files: map[string][]byte{"README.md": []byte("---\nlicense: apache-2.0\n---\n# sql lora\n")}},
	})
	_, v, _, err := pullOCI(t, ctx, s, reg.Ref("acme/sql-lora", "v1"), "acme/sql-lora", "base-chat")
	if err != nil || v.Status != catalog.StatusPublished {
		t.Fatalf("pull: %+v %v", v, err)
	}
	var e catalog.Entry
	if err := s.admin.Do(ctx, "GET", cli.CatalogPath("acme/sql-lora"), nil, &e); err != nil || e.Kind != events.ModelKindAdapter || e.BaseModel != "base-chat" {
		t.Fatalf("entry %+v %v", e, err)
	}

	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	var resp *openai.ChatCompletion
	eventually(t, 30*time.Second, func() bool {
		resp, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "acme/sql-lora",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("select something")},
			MaxTokens: openai.Int(4),
		})
		return err == nil
	}, "the adapter to answer")
	if resp.Model != "acme/sql-lora" || len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" {
		t.Fatalf("answer %+v", resp)
	}
	loaded := false
	for _, l := range engine.LoRAAdapters() {
		loaded = loaded || l.Name == "acme/sql-lora"
		if l.Name == "acme/sql-lora" {
			if _, err := os.Stat(filepath.Join(l.Path, "adapter_config.json")); err != nil {
				t.Fatalf("the engine loaded %s without its adapter_config.json: %v", l.Path, err)
			}
		}
	}
	if !loaded {
		t.Fatalf("answered but not loaded: %+v", engine.LoRAAdapters())
	}
}
