package enginesim

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func adapterDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg := `{"peft_type":"LORA","r":8,"base_model_name_or_path":"base"}`
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type listedModel struct {
	ID     string  `json:"id"`
	Parent *string `json:"parent"`
	Root   string  `json:"root"`
}

func listModels(t *testing.T, base string, hdr map[string]string) map[string]listedModel {
	t.Helper()
	code, _, body := call(t, "GET", base+"/models", "", hdr)
	if code != http.StatusOK {
		t.Fatalf("GET /models: %d %s", code, body)
	}
	var l struct {
		Data []listedModel `json:"data"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	out := map[string]listedModel{}
	for _, m := range l.Data {
		out[m.ID] = m
	}
	return out
}

func errCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an OpenAI error: %s (%v)", body, err)
	}
	return e.Error.Message
}

func TestLoRALoadServeUnload(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"base"}, APIKey: "engine-key"})
	auth := map[string]string{"Authorization": "Bearer engine-key"}
	dir := adapterDir(t)

	// Without the engine key nothing loads.
	if code, _, _ := call(t, "POST", base+"/load_lora_adapter", `{"lora_name":"sql","lora_path":"`+dir+`"}`, nil); code != http.StatusUnauthorized {
		t.Fatalf("load without key: %d", code)
	}
	// Before loading, the adapter is an unknown model.
	req := `{"model":"sql","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`
	if code, _, body := call(t, "POST", base+"/chat/completions", req, auth); code != http.StatusNotFound || !strings.Contains(string(body), "model_not_found") {
		t.Fatalf("chat before load: %d %s", code, body)
	}

	code, hdr, body := call(t, "POST", base+"/load_lora_adapter", `{"lora_name":"sql","lora_path":"`+dir+`"}`, auth)
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") || string(body) != "Success: LoRA adapter 'sql' added successfully." {
		t.Fatalf("load: %d %q %s", code, hdr.Get("Content-Type"), body)
	}
	models := listModels(t, base, auth)
	if m, ok := models["sql"]; !ok || m.Parent == nil || *m.Parent != "base" || m.Root != dir {
		t.Fatalf("listed adapter %+v (all %v)", m, models)
	}
	if _, ok := models["base"]; !ok {
		t.Fatalf("base model no longer listed: %v", models)
	}
	if code, _, body := call(t, "GET", base+"/models/sql", "", auth); code != http.StatusOK || !strings.Contains(string(body), `"parent":"base"`) {
		t.Fatalf("GET /models/sql: %d %s", code, body)
	}
	code, _, body = call(t, "POST", base+"/chat/completions", req, auth)
	if code != http.StatusOK || !strings.Contains(string(body), `"model":"sql"`) {
		t.Fatalf("chat with adapter: %d %s", code, body)
	}
	if got := sim.LoRAAdapters(); len(got) != 1 || got[0] != (LoRAAdapter{Name: "sql", Path: dir}) {
		t.Fatalf("LoRAAdapters = %+v", got)
	}

	// Loading the same name again is refused.
	if code, _, body := call(t, "POST", base+"/load_lora_adapter", `{"lora_name":"sql","lora_path":"`+dir+`"}`, auth); code != http.StatusBadRequest || !strings.Contains(errCode(t, body), "already been loaded") {
		t.Fatalf("second load: %d %s", code, body)
	}

	code, _, body = call(t, "POST", base+"/unload_lora_adapter", `{"lora_name":"sql"}`, auth)
	if code != http.StatusOK || string(body) != "Success: LoRA adapter 'sql' removed successfully." {
		t.Fatalf("unload: %d %s", code, body)
	}
	if _, ok := listModels(t, base, auth)["sql"]; ok {
		t.Fatal("unloaded adapter still listed")
	}
	if code, _, body := call(t, "POST", base+"/chat/completions", req, auth); code != http.StatusNotFound || !strings.Contains(string(body), "model_not_found") {
		t.Fatalf("chat after unload: %d %s", code, body)
	}
	if code, _, body := call(t, "POST", base+"/unload_lora_adapter", `{"lora_name":"sql"}`, auth); code != http.StatusBadRequest || !strings.Contains(errCode(t, body), "cannot be found") {
		t.Fatalf("second unload: %d %s", code, body)
	}
	if sim.LoRALoadCalls() != 2 || sim.LoRAUnloadCalls() != 2 {
		t.Fatalf("calls: %d loads, %d unloads", sim.LoRALoadCalls(), sim.LoRAUnloadCalls())
	}
}

func TestLoRALoadRejectsBadPaths(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"base"}})
	empty := t.TempDir()
	file := filepath.Join(adapterDir(t), "adapter_config.json")
	for name, body := range map[string]string{
		"missing path":    `{"lora_name":"a"}`,
		"missing name":    `{"lora_path":"` + adapterDir(t) + `"}`,
		"no such dir":     `{"lora_name":"a","lora_path":"` + filepath.Join(empty, "nope") + `"}`,
		"no config":       `{"lora_name":"a","lora_path":"` + empty + `"}`,
		"path is a file":  `{"lora_name":"a","lora_path":"` + file + `"}`,
		"base model name": `{"lora_name":"base","lora_path":"` + adapterDir(t) + `"}`,
		"not json":        `{`,
	} {
		code, _, b := call(t, "POST", base+"/load_lora_adapter", body, nil)
		if code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, code, b)
			continue
		}
		errCode(t, b)
	}
	if len(sim.LoRAAdapters()) != 0 {
		t.Fatalf("something loaded: %+v", sim.LoRAAdapters())
	}
	if code, _, _ := call(t, "GET", base+"/load_lora_adapter", "", nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET load: %d", code)
	}
}

// An engine restart forgets runtime adapters.
func TestLoRADrop(t *testing.T) {
	sim, base := startSim(t, Config{Models: []string{"base"}})
	for _, n := range []string{"a", "b"} {
		if code, _, body := call(t, "POST", base+"/load_lora_adapter", `{"lora_name":"`+n+`","lora_path":"`+adapterDir(t)+`"}`, nil); code != http.StatusOK {
			t.Fatalf("load %s: %d %s", n, code, body)
		}
	}
	if got := listModels(t, base, nil); len(got) != 3 {
		t.Fatalf("listed %v", got)
	}
	sim.DropLoRAAdapters()
	if got := listModels(t, base, nil); len(got) != 1 {
		t.Fatalf("after drop listed %v", got)
	}
}
