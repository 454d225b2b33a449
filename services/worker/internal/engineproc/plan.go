// Package engineproc runs a worker's engine as a supervised child process
// (registry.EngineProcess): it computes the engine's command line (for
// llama-server with the MoE expert placement from the model's GGUF header
// and the free memory), starts it, waits for its health endpoint, restarts
// it with backoff when it exits, stops it (SIGTERM, then SIGKILL after a
// grace) and scrapes the metrics it offers.
package engineproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aiforge/aiforge/pkg/gguf"
	"github.com/aiforge/aiforge/pkg/registry"
)

// Placement modes (Placement.Mode).
const (
	PlacementNone   = "none"   // a dense model, or an engine that places experts itself
	PlacementAuto   = "auto"   // computed from free memory
	PlacementCPU    = "cpu"    // --cpu-moe: every layer's experts on the CPU
	PlacementLayers = "layers" // --n-cpu-moe N as configured
)

// Placement is the expert placement decided for a MoE model.
type Placement struct {
	Mode string
	// Layers is the model's layer count, MoELayers those with experts.
	Layers    int
	MoELayers int
	// CPULayers is the layers whose experts are kept on the CPU (mmap'd
	// from the file, read from disk as the page cache allows): llama.cpp's
	// --n-cpu-moe. The rest of the model stays resident.
	CPULayers int
	// ExpertCount and ExpertUsedCount are the model's; the engine is never
	// told to use fewer experts.
	ExpertCount     uint64
	ExpertUsedCount uint64
	// ResidentBytes is the weights kept resident (non-expert weights and
	// the experts of the layers above CPULayers), StreamedBytes the
	// experts left to mmap; BudgetBytes what auto placement had to fit
	// them in (0 otherwise).
	ResidentBytes uint64
	StreamedBytes uint64
	BudgetBytes   uint64
}

// Command is how to start the engine once.
type Command struct {
	Kind string
	Path string
	Args []string
	// Env is the engine's whole environment.
	Env []string
	// Health is the URL that answers 200 when the engine serves.
	Health string
	// Metrics is the engine's Prometheus endpoint ("" when it has none).
	Metrics string
	// HealthJSON: the health endpoint's JSON numbers are metrics (coli).
	HealthJSON bool
	Placement  Placement
}

// Spec is what a supervised engine is built from.
type Spec struct {
	// Served is the served model name (for messages).
	Served string
	// Upstream is the name the engine must list the model by
	// (UpstreamName).
	Upstream string
	Process  registry.EngineProcess
	Port     int
	// APIKey, when set, is given to the engine through its environment
	// (never on the command line, which other users can read).
	APIKey string
	// Dir is the engine's own directory (Ollama's models and home, logs).
	Dir string
	// MemAvailable reports the memory free for the model; default
	// MemAvailable (/proc/meminfo).
	MemAvailable func() (uint64, error)
	// Margin is kept free on top of the model and its KV cache by auto
	// placement; default max(1 GiB, 10% of what is available).
	Margin uint64
}

// UpstreamName is the name an engine of kind lists model by: Ollama tags
// a name without one ":latest".
func UpstreamName(kind, model string) string {
	if kind == registry.ProcessOllama && model != "" && !strings.Contains(model[strings.LastIndex(model, "/")+1:], ":") {
		return model + ":latest"
	}
	return model
}

// Validate reports every problem of a process binding at once.
func Validate(p registry.EngineProcess) error {
	var errs []error
	switch p.Kind {
	case registry.ProcessLlamaServer, registry.ProcessOllama, registry.ProcessColi:
	default:
		errs = append(errs, fmt.Errorf("process kind %q is not one of %s, %s, %s", p.Kind,
			registry.ProcessLlamaServer, registry.ProcessOllama, registry.ProcessColi))
	}
	if p.ModelPath == "" {
		errs = append(errs, errors.New("process model_path is required"))
	}
	if p.Port < 0 || p.Port > 65535 {
		errs = append(errs, fmt.Errorf("process port %d is not a port", p.Port))
	}
	if p.ContextSize < 0 || p.Slots < 0 {
		errs = append(errs, errors.New("process context_size and slots must not be negative"))
	}
	if p.IdleStop < 0 {
		errs = append(errs, errors.New("process idle_stop must not be negative (0: never scale to zero)"))
	}
	switch m := p.MoEPlacement; {
	case m == "" || m == PlacementAuto:
	case p.Kind != registry.ProcessLlamaServer:
		errs = append(errs, fmt.Errorf("moe_placement %q applies to llama-server only (%s places experts itself)", m, p.Kind))
	case m == PlacementCPU:
	default:
		if n, err := strconv.Atoi(m); err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("moe_placement %q is not auto, cpu or a layer count", m))
		}
	}
	for i, a := range p.Args {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--no-mmap", "--mmap":
			errs = append(errs, fmt.Errorf("process args[%d] %q: the engine always maps the model (experts not kept resident are read through mmap)", i, a))
		case "--cpu-moe", "-cmoe", "--n-cpu-moe", "-ncmoe":
			errs = append(errs, fmt.Errorf("process args[%d] %q: set moe_placement instead", i, a))
		case "--host", "--port", "-m", "--model", "--alias", "-a", "--model-id", "--api-key":
			errs = append(errs, fmt.Errorf("process args[%d] %q: set by the worker", i, a))
		}
		if strings.Contains(a, "expert_used_count") {
			// Placement changes speed, never the answer.
			errs = append(errs, fmt.Errorf("process args[%d]: the experts used per token are the model's; they are not overridden", i))
		}
	}
	for k, v := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			errs = append(errs, fmt.Errorf("process env %q is not a variable name", k))
		}
		if strings.HasPrefix(k, "LLAMA_ARG_") && (strings.Contains(k, "MMAP") || strings.Contains(k, "MOE")) {
			errs = append(errs, fmt.Errorf("process env %s: set moe_placement; the model is always mapped", k))
		}
		if strings.Contains(v, "expert_used_count") {
			errs = append(errs, fmt.Errorf("process env %s: the experts used per token are the model's; they are not overridden", k))
		}
	}
	return errors.Join(errs...)
}

// envAllowed are the worker's variables an engine inherits: what finding
// binaries, libraries and accelerators needs, never the worker's secrets.
var envAllowed = []string{"PATH", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "OMP_NUM_THREADS"}
var envAllowedPrefixes = []string{"LC_", "CUDA_", "NVIDIA_", "HIP_", "ROCR_", "HSA_", "GGML_", "GPU_"}

func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		ok := false
		for _, a := range envAllowed {
			ok = ok || k == a
		}
		for _, p := range envAllowedPrefixes {
			ok = ok || strings.HasPrefix(k, p)
		}
		if ok {
			out = append(out, kv)
		}
	}
	return out
}

// Plan computes the command that starts the engine now (the placement
// follows the memory free at each start).
func (s Spec) Plan() (Command, error) {
	p := s.Process
	if err := Validate(p); err != nil {
		return Command{}, err
	}
	bin := p.Binary
	if bin == "" {
		bin = p.Kind
	}
	host := "127.0.0.1:" + strconv.Itoa(s.Port)
	root := "http://" + host
	c := Command{Kind: p.Kind, Path: bin, Env: baseEnv(), Placement: Placement{Mode: PlacementNone}}
	c.Env = append(c.Env, "HOME="+filepath.Join(s.Dir, "home"))
	switch p.Kind {
	case registry.ProcessLlamaServer:
		c.Health, c.Metrics = root+"/health", root+"/metrics"
		c.Args = []string{"-m", p.ModelPath, "--host", "127.0.0.1", "--port", strconv.Itoa(s.Port), "--alias", s.Upstream, "--metrics"}
		if p.ContextSize > 0 {
			c.Args = append(c.Args, "-c", strconv.Itoa(p.ContextSize))
		}
		if p.Slots > 0 {
			c.Args = append(c.Args, "-np", strconv.Itoa(p.Slots))
		}
		pl, args, err := s.placement()
		if err != nil {
			return Command{}, err
		}
		c.Placement = pl
		c.Args = append(c.Args, args...)
		if s.APIKey != "" {
			c.Env = append(c.Env, "LLAMA_API_KEY="+s.APIKey)
		}
	case registry.ProcessOllama:
		c.Health = root + "/api/version"
		c.Args = []string{"serve"}
		c.Env = append(c.Env,
			"OLLAMA_HOST="+host,
			"OLLAMA_MODELS="+filepath.Join(s.Dir, "models"),
			"OLLAMA_KEEP_ALIVE=-1", // stay loaded between requests
			"OLLAMA_NOPRUNE=1",
		)
		if p.Slots > 0 {
			c.Env = append(c.Env, "OLLAMA_NUM_PARALLEL="+strconv.Itoa(p.Slots))
		}
	case registry.ProcessColi:
		// Colibrì's documented flags (docs/api.md): --model, --host,
		// --port, --model-id, --kv-slots (at most 16); COLI_API_KEY.
		c.Health, c.HealthJSON = root+"/health", true
		c.Args = []string{"serve", "--model", p.ModelPath, "--host", "127.0.0.1", "--port", strconv.Itoa(s.Port), "--model-id", s.Upstream}
		if p.Slots > 0 {
			c.Args = append(c.Args, "--kv-slots", strconv.Itoa(min(p.Slots, 16)))
		}
		if s.APIKey != "" {
			c.Env = append(c.Env, "COLI_API_KEY="+s.APIKey)
		}
	}
	c.Args = append(c.Args, p.Args...)
	for k, v := range p.Env {
		c.Env = append(c.Env, k+"="+v)
	}
	return c, nil
}

// placement decides llama-server's expert placement flags.
func (s Spec) placement() (Placement, []string, error) {
	p := s.Process
	f, err := gguf.Open(p.ModelPath)
	if err != nil {
		return Placement{}, nil, fmt.Errorf("engine %s: reading the model's GGUF header: %w", s.Served, err)
	}
	moe, ok := f.MoE()
	if !ok {
		if p.MoEPlacement != "" && p.MoEPlacement != PlacementAuto {
			return Placement{}, nil, fmt.Errorf("engine %s: moe_placement %q, but %s has no expert tensors", s.Served, p.MoEPlacement, p.ModelPath)
		}
		return Placement{Mode: PlacementNone}, nil, nil
	}
	pl := Placement{
		Layers: int(moe.BlockCount), MoELayers: moe.MoELayers(),
		ExpertCount: moe.ExpertCount, ExpertUsedCount: moe.ExpertUsedCount,
	}
	switch p.MoEPlacement {
	case PlacementCPU:
		pl.Mode, pl.CPULayers = PlacementCPU, pl.Layers
		pl.fill(moe)
		return pl, []string{"--cpu-moe"}, nil
	case "", PlacementAuto:
		memFn := s.MemAvailable
		if memFn == nil {
			memFn = MemAvailable
		}
		avail, err := memFn()
		if err != nil {
			return Placement{}, nil, fmt.Errorf("engine %s: free memory for the expert placement: %w", s.Served, err)
		}
		margin := s.Margin
		if margin == 0 {
			margin = max(1<<30, avail/10)
		}
		ctx := uint64(p.ContextSize)
		if ctx == 0 {
			ctx = 4096 // llama-server's default context
		}
		need := margin + moe.KVBytesPerToken*ctx
		var budget uint64
		if avail > need {
			budget = avail - need
		}
		pl.Mode, pl.BudgetBytes = PlacementAuto, budget
		pl.CPULayers = AutoCPULayers(moe, budget)
		pl.fill(moe)
		if pl.CPULayers == 0 {
			return pl, nil, nil
		}
		return pl, []string{"--n-cpu-moe", strconv.Itoa(pl.CPULayers)}, nil
	default:
		n, _ := strconv.Atoi(p.MoEPlacement)
		pl.Mode, pl.CPULayers = PlacementLayers, min(n, pl.Layers)
		pl.fill(moe)
		return pl, []string{"--n-cpu-moe", strconv.Itoa(n)}, nil
	}
}

func (pl *Placement) fill(m gguf.MoE) {
	pl.ResidentBytes = m.OtherBytes
	for i, b := range m.LayerExpertBytes {
		if i < pl.CPULayers {
			pl.StreamedBytes += b
		} else {
			pl.ResidentBytes += b
		}
	}
}

// AutoCPULayers is the fewest first layers whose experts must be left to
// mmap for the rest of the model to fit in budget bytes: llama.cpp's
// --n-cpu-moe keeps the experts of layers 0..N-1 on the CPU. When even
// the non-expert weights do not fit, every layer's experts are.
func AutoCPULayers(m gguf.MoE, budget uint64) int {
	resident := m.OtherBytes + m.ExpertBytes
	n := 0
	for resident > budget && n < len(m.LayerExpertBytes) {
		resident -= m.LayerExpertBytes[n]
		n++
	}
	return n
}

// MemAvailable is /proc/meminfo's MemAvailable, in bytes.
func MemAvailable() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseMemAvailable(f)
}

func parseMemAvailable(f io.Reader) (uint64, error) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			break
		}
		kb, err := strconv.ParseUint(fs[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/meminfo MemAvailable %q: %w", fs[0], err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable")
}
