package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/enginesim"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/natstest"
	"github.com/aiforge/aiforge/pkg/objstore"
)

// publishVersion stores files for a new version of name and records the
// guardian's published verdict on it.
func publishVersion(t *testing.T, cat *catalog.Store, objects objstore.Store, name, kind, base string, files map[string]string) catalog.Version {
	t.Helper()
	ctx := context.Background()
	v, err := cat.AddVersion(ctx, name, kind, base, catalog.Version{Status: catalog.StatusScanning, Source: catalog.Source{Type: events.ModelSourceUpload}})
	if err != nil {
		t.Fatal(err)
	}
	var listed []catalog.File
	for p, body := range files {
		sum := sha256.Sum256([]byte(body))
		listed = append(listed, catalog.File{Path: p, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])})
		if _, err := objects.Put(ctx, v.Prefix+p, strings.NewReader(body), int64(len(body)), ""); err != nil {
			t.Fatal(err)
		}
	}
	v, err = cat.ApplyVerdict(ctx, events.ModelVerdictV1{Name: name, Version: v.Version, Status: events.VerdictPublished,
		Files: listed, License: "apache-2.0", ScannedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func adapterFiles(base string) map[string]string {
	return map[string]string{
		"adapter_config.json":       `{"peft_type":"LORA","r":8,"base_model_name_or_path":"` + base + `"}`,
		"adapter_model.safetensors": "lora weights for " + base,
	}
}

// TestLoRAAdapters: published adapters of a served base model are loaded
// into the base's engine and served as models of their own; /v1/models
// lists them with their parent, and a deployed model with its catalog
// version.
func TestLoRAAdapters(t *testing.T) {
	ns := natstest.Server(t)
	engine, base := sim(t, enginesim.Config{Models: []string{"up-base"}})
	dataDir := t.TempDir()
	s := startStack(t, stackOpts{natsURL: ns.ClientURL(), targets: []string{"all"}, dataDir: dataDir})
	key, _ := s.tenantKey("acme")
	s.register("base-chat", base, "up-base")
	s.waitServed(key, "base-chat")

	nc := natstest.Conn(t, ns, "catalog-writer")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cat, err := catalog.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.NewLocal(objstore.LocalConfig{Dir: filepath.Join(dataDir, "objects")})
	if err != nil {
		t.Fatal(err)
	}
	defer objects.Close()

	adapters := []string{"acme/sql-lora", "support-lora"}
	for _, a := range adapters {
		publishVersion(t, cat, objects, a, events.ModelKindAdapter, "base-chat", adapterFiles("base-chat"))
	}
	// The base's weights are in the catalog too, deployed as base-chat.
	weights := publishVersion(t, cat, objects, "acme/base-weights", events.ModelKindModel, "", map[string]string{"model.safetensors": "base weights"})
	if _, err := cat.Deploy(ctx, "base-chat", "acme/base-weights", weights.Version); err != nil {
		t.Fatal(err)
	}

	client := openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	type listed struct {
		ID      string `json:"id"`
		Parent  string `json:"parent"`
		Catalog string `json:"aiforge_catalog"`
		Version int    `json:"aiforge_version"`
	}
	var models map[string]listed
	eventually(t, 20*time.Second, func() bool {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		models = map[string]listed{}
		for _, m := range page.Data {
			var l listed
			if err := json.Unmarshal([]byte(m.RawJSON()), &l); err != nil {
				t.Fatal(err)
			}
			models[m.ID] = l
		}
		return len(models) == 3 && models["base-chat"].Catalog != ""
	}, "the adapters and the deployment listed")
	if b := models["base-chat"]; b.Parent != "" || b.Catalog != "acme/base-weights" || b.Version != weights.Version {
		t.Fatalf("base model listed as %+v", b)
	}
	for _, a := range adapters {
		if m := models[a]; m.Parent != "base-chat" || m.Catalog != a || m.Version != 1 {
			t.Fatalf("adapter %s listed as %+v", a, m)
		}
	}

	// Each adapter is loaded and served by its own run, concurrently and in
	// the order the catalog delivers them, so /v1/models (which lists what
	// the catalog publishes) says nothing about the engine yet. What the
	// worker promises is that an adapter is answered only once the engine
	// has loaded it: wait for each answer, then insist on the load.
	before := usageEvents(t, nc)
	for _, a := range adapters {
		var resp *openai.ChatCompletion
		eventually(t, 20*time.Second, func() bool {
			resp, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:     a,
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("select something")},
				MaxTokens: openai.Int(4),
			})
			return err == nil
		}, "adapter "+a+" to answer")
		if resp.Model != a || len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" {
			t.Fatalf("answer of %s: %+v", a, resp)
		}
		if !strings.Contains(string(engine.LastBody()), `"model":`+strconv.Quote(a)) {
			t.Fatalf("asked %s, engine got %s", a, engine.LastBody())
		}
		loaded := false
		for _, l := range engine.LoRAAdapters() {
			loaded = loaded || l.Name == a
		}
		if !loaded {
			t.Fatalf("%s answered but the engine has not loaded it: %+v", a, engine.LoRAAdapters())
		}
	}
	var ev events.UsageRecordedV1
	eventually(t, 10*time.Second, func() bool {
		for id, evs := range usageEvents(t, nc) {
			if _, old := before[id]; !old && evs[0].Model == "acme/sql-lora" {
				ev = evs[0]
				return true
			}
		}
		return false
	}, "a usage event naming the adapter")
	if ev.CompletionTokens != 4 || ev.Tenant != "acme" {
		t.Fatalf("usage %+v", ev)
	}

	// GET /v1/models/{adapter} answers too; a key not allowed the adapter
	// does not see it.
	m, err := client.Models.Get(ctx, "support-lora")
	if err != nil || m.ID != "support-lora" {
		t.Fatalf("get adapter: %v %+v", err, m)
	}
	narrow, _ := s.tenantKey("acme", "base-chat")
	req, _ := http.NewRequest("GET", s.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+narrow)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var page struct {
		Data []listed `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&page); err != nil || len(page.Data) != 1 || page.Data[0].ID != "base-chat" {
		t.Fatalf("narrow key sees %+v (%v)", page.Data, err)
	}
	if st, body := s.post(narrow, "/v1/chat/completions", `{"model":"support-lora","messages":[{"role":"user","content":"x"}]}`); st != http.StatusForbidden && st != http.StatusNotFound {
		t.Fatalf("narrow key asking an adapter: %d %s", st, body)
	}
}
