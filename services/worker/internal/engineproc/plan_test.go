package engineproc

import (
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/gguf"
	"github.com/aiforge/aiforge/pkg/ggufgen"
	"github.com/aiforge/aiforge/pkg/registry"
)

// moeModel writes a tiny Mixtral-style GGUF (4 layers, 4 experts, 2 used)
// and returns its path and expert layout.
func moeModel(t *testing.T) (string, gguf.MoE) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "moe.gguf")
	if err := ggufgen.WriteFile(path, ggufgen.Config{Layers: 4, Embd: 32, FF: 64, Experts: 4, ExpertsUsed: 2}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := f.MoE()
	if !ok {
		t.Fatal("not MoE")
	}
	return path, m
}

func spec(p registry.EngineProcess, mem uint64) Spec {
	return Spec{
		Served: "served", Upstream: "up", Process: p, Port: 8123, Dir: "/data/eng",
		MemAvailable: func() (uint64, error) { return mem, nil }, Margin: 1000,
	}
}

func hasFlag(args []string, flag string) (string, bool) {
	i := slices.Index(args, flag)
	if i < 0 {
		return "", false
	}
	if i+1 < len(args) {
		return args[i+1], true
	}
	return "", true
}

// No command line ever turns mmap off or changes the experts used.
func assertSemantics(t *testing.T, c Command) {
	t.Helper()
	for _, a := range append(append([]string(nil), c.Args...), c.Env...) {
		if strings.Contains(a, "no-mmap") || strings.Contains(a, "expert_used_count") || strings.Contains(a, "override-kv") {
			t.Fatalf("command changes semantics: %q in %v", a, c.Args)
		}
	}
}

func TestLlamaServerCommandAutoPlacement(t *testing.T) {
	path, m := moeModel(t)
	layer := m.LayerExpertBytes[0]
	kv := m.KVBytesPerToken * 512
	base := registry.EngineProcess{Kind: registry.ProcessLlamaServer, ModelPath: path, ContextSize: 512, Slots: 3}
	for _, tc := range []struct {
		name string
		// free memory, in layers of experts above the rest of the model
		mem  uint64
		want int // --n-cpu-moe; 0: none
	}{
		{"everything fits", m.OtherBytes + m.ExpertBytes + kv + 1000, 0},
		{"one layer short", m.OtherBytes + m.ExpertBytes - 1 + kv + 1000, 1},
		{"two layers fit", m.OtherBytes + 2*layer + kv + 1000, 2},
		{"only the dense part fits", m.OtherBytes + kv + 1000, 4},
		{"nothing fits", 10, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := spec(base, tc.mem).Plan()
			if err != nil {
				t.Fatal(err)
			}
			assertSemantics(t, c)
			want := []string{"-m", path, "--host", "127.0.0.1", "--port", "8123", "--alias", "up", "--metrics", "-c", "512", "-np", "3"}
			if tc.want > 0 {
				want = append(want, "--n-cpu-moe", strconv.Itoa(tc.want))
			}
			if !slices.Equal(c.Args, want) {
				t.Fatalf("args\n %v\nwant\n %v", c.Args, want)
			}
			pl := c.Placement
			if pl.Mode != PlacementAuto || pl.CPULayers != tc.want || pl.Layers != 4 || pl.MoELayers != 4 ||
				pl.ExpertCount != 4 || pl.ExpertUsedCount != 2 {
				t.Fatalf("placement %+v", pl)
			}
			if pl.StreamedBytes != uint64(tc.want)*layer || pl.ResidentBytes+pl.StreamedBytes != m.OtherBytes+m.ExpertBytes {
				t.Fatalf("placement bytes %+v", pl)
			}
			if c.Health != "http://127.0.0.1:8123/health" || c.Metrics != "http://127.0.0.1:8123/metrics" || c.Path != "llama-server" {
				t.Fatalf("command %+v", c)
			}
		})
	}
}

func TestLlamaServerExplicitPlacement(t *testing.T) {
	path, m := moeModel(t)
	p := registry.EngineProcess{Kind: registry.ProcessLlamaServer, ModelPath: path, MoEPlacement: "cpu", Binary: "/opt/llama/llama-server",
		Args: []string{"-ngl", "99"}, Env: map[string]string{"GGML_CUDA_NO_PINNED": "1"}}
	s := spec(p, 1)
	s.APIKey = "sk-engine-secret"
	c, err := s.Plan()
	if err != nil {
		t.Fatal(err)
	}
	assertSemantics(t, c)
	if _, ok := hasFlag(c.Args, "--cpu-moe"); !ok || c.Placement.Mode != PlacementCPU || c.Placement.CPULayers != 4 || c.Placement.StreamedBytes != m.ExpertBytes {
		t.Fatalf("cpu placement: %v %+v", c.Args, c.Placement)
	}
	if c.Path != "/opt/llama/llama-server" || c.Args[len(c.Args)-2] != "-ngl" {
		t.Fatalf("binary or extra args: %s %v", c.Path, c.Args)
	}
	if _, ok := hasFlag(c.Args, "-c"); ok {
		t.Fatal("a context size was passed though none was set")
	}
	// The key goes in the environment, never on the command line.
	if strings.Contains(strings.Join(c.Args, " "), "sk-engine-secret") || !slices.Contains(c.Env, "LLAMA_API_KEY=sk-engine-secret") {
		t.Fatalf("api key: args %v", c.Args)
	}
	if !slices.Contains(c.Env, "GGML_CUDA_NO_PINNED=1") || !slices.Contains(c.Env, "HOME=/data/eng/home") {
		t.Fatalf("env %v", c.Env)
	}

	p.MoEPlacement = "3"
	c, err = spec(p, 1).Plan()
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := hasFlag(c.Args, "--n-cpu-moe"); v != "3" || c.Placement.Mode != PlacementLayers || c.Placement.CPULayers != 3 {
		t.Fatalf("layer placement: %v %+v", c.Args, c.Placement)
	}
}

// A dense model gets no MoE flags (auto), and an explicit placement for it
// is refused.
func TestLlamaServerDense(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dense.gguf")
	if err := ggufgen.WriteFile(path, ggufgen.Config{}); err != nil {
		t.Fatal(err)
	}
	p := registry.EngineProcess{Kind: registry.ProcessLlamaServer, ModelPath: path}
	c, err := spec(p, 1).Plan()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.Contains(a, "moe") }) || c.Placement.Mode != PlacementNone {
		t.Fatalf("dense: %v %+v", c.Args, c.Placement)
	}
	p.MoEPlacement = "cpu"
	if _, err := spec(p, 1).Plan(); err == nil {
		t.Fatal("cpu placement of a dense model accepted")
	}
	p.ModelPath = filepath.Join(t.TempDir(), "missing.gguf")
	p.MoEPlacement = ""
	if _, err := spec(p, 1).Plan(); err == nil {
		t.Fatal("a missing model planned")
	}
}

func TestOllamaAndColiCommands(t *testing.T) {
	o, err := spec(registry.EngineProcess{Kind: registry.ProcessOllama, ModelPath: "/m/tiny.gguf", Slots: 2}, 1).Plan()
	if err != nil {
		t.Fatal(err)
	}
	if o.Path != "ollama" || !slices.Equal(o.Args, []string{"serve"}) || o.Health != "http://127.0.0.1:8123/api/version" || o.Metrics != "" {
		t.Fatalf("ollama %+v", o)
	}
	for _, kv := range []string{"OLLAMA_HOST=127.0.0.1:8123", "OLLAMA_MODELS=/data/eng/models", "OLLAMA_NUM_PARALLEL=2", "HOME=/data/eng/home"} {
		if !slices.Contains(o.Env, kv) {
			t.Fatalf("ollama env lacks %s: %v", kv, o.Env)
		}
	}
	if UpstreamName(registry.ProcessOllama, "tiny") != "tiny:latest" || UpstreamName(registry.ProcessOllama, "tiny:q4") != "tiny:q4" ||
		UpstreamName(registry.ProcessOllama, "host:5000/ns/tiny") != "host:5000/ns/tiny:latest" || UpstreamName(registry.ProcessLlamaServer, "tiny") != "tiny" {
		t.Fatal("upstream names")
	}

	s := spec(registry.EngineProcess{Kind: registry.ProcessColi, ModelPath: "/nvme/glm", Slots: 40}, 1)
	s.APIKey = "k"
	c, err := s.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"serve", "--model", "/nvme/glm", "--host", "127.0.0.1", "--port", "8123", "--model-id", "up", "--kv-slots", "16"}
	if c.Path != "coli" || !slices.Equal(c.Args, want) || !c.HealthJSON || c.Health != "http://127.0.0.1:8123/health" || !slices.Contains(c.Env, "COLI_API_KEY=k") {
		t.Fatalf("coli %+v", c)
	}
}

// The worker's own environment does not reach the engine, but for what
// finding binaries, libraries and accelerators needs.
func TestEngineEnvironment(t *testing.T) {
	t.Setenv("AIFORGE_ADMIN_KEY", "ak-secret")
	t.Setenv("CUDA_VISIBLE_DEVICES", "0")
	c, err := spec(registry.EngineProcess{Kind: registry.ProcessOllama, ModelPath: "/m"}, 1).Plan()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(c.Env, func(kv string) bool { return strings.Contains(kv, "ak-secret") }) || !slices.Contains(c.Env, "CUDA_VISIBLE_DEVICES=0") {
		t.Fatalf("env %v", c.Env)
	}
}

func TestValidate(t *testing.T) {
	ok := registry.EngineProcess{Kind: registry.ProcessLlamaServer, ModelPath: "/m.gguf"}
	if err := Validate(ok); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(p *registry.EngineProcess){
		"kind":          func(p *registry.EngineProcess) { p.Kind = "vllm" },
		"model path":    func(p *registry.EngineProcess) { p.ModelPath = "" },
		"port":          func(p *registry.EngineProcess) { p.Port = 70000 },
		"slots":         func(p *registry.EngineProcess) { p.Slots = -1 },
		"placement":     func(p *registry.EngineProcess) { p.MoEPlacement = "gpu" },
		"neg placement": func(p *registry.EngineProcess) { p.MoEPlacement = "-1" },
		"ollama moe":    func(p *registry.EngineProcess) { p.Kind, p.MoEPlacement = registry.ProcessOllama, "cpu" },
		"no-mmap":       func(p *registry.EngineProcess) { p.Args = []string{"--no-mmap"} },
		"experts used": func(p *registry.EngineProcess) {
			p.Args = []string{"--override-kv", "qwen3moe.expert_used_count=int:4"}
		},
		"cpu-moe arg": func(p *registry.EngineProcess) { p.Args = []string{"--n-cpu-moe=3"} },
		"port arg":    func(p *registry.EngineProcess) { p.Args = []string{"--port", "1"} },
		"env mmap":    func(p *registry.EngineProcess) { p.Env = map[string]string{"LLAMA_ARG_NO_MMAP": "1"} },
		"env name":    func(p *registry.EngineProcess) { p.Env = map[string]string{"A=B": "1"} },
		"env experts": func(p *registry.EngineProcess) {
			p.Env = map[string]string{"X": "--override-kv a.expert_used_count=int:1"}
		},
		"api key arg":     func(p *registry.EngineProcess) { p.Args = []string{"--api-key", "x"} },
		"alias arg":       func(p *registry.EngineProcess) { p.Args = []string{"-a", "x"} },
		"model id (coli)": func(p *registry.EngineProcess) { p.Kind, p.Args = registry.ProcessColi, []string{"--model-id", "x"} },
	} {
		p := ok
		mut(&p)
		if err := Validate(p); err == nil {
			t.Errorf("%s: accepted %+v", name, p)
		}
	}
}

func TestAutoCPULayers(t *testing.T) {
	m := gguf.MoE{OtherBytes: 100, LayerExpertBytes: []uint64{10, 20, 30}, ExpertBytes: 60}
	for budget, want := range map[uint64]int{1000: 0, 160: 0, 159: 1, 150: 1, 149: 2, 130: 2, 129: 3, 0: 3} {
		if got := AutoCPULayers(m, budget); got != want {
			t.Errorf("budget %d: %d layers, want %d", budget, got, want)
		}
	}
}

func TestParseMemAvailable(t *testing.T) {
	n, err := parseMemAvailable(strings.NewReader("MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n"))
	if err != nil || n != 8000000<<10 {
		t.Fatalf("%d %v", n, err)
	}
	if _, err := parseMemAvailable(strings.NewReader("MemTotal: 1 kB\n")); err == nil {
		t.Fatal("no MemAvailable accepted")
	}
	if runtime.GOOS == "linux" {
		if n, err := MemAvailable(); err != nil || n == 0 {
			t.Fatalf("this system's MemAvailable: %d %v", n, err)
		}
	}
}
