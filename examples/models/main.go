// Command models writes the three small model folders the README's tour
// uploads, so no weights live in the repository:
//
//	tiny-chat     a 45K-parameter safetensors "model" (apache-2.0) that the guardian publishes
//	bad-model     a config and a code-bearing pickle (pytorch_model.bin) that it rejects
//	support-lora  a LoRA adapter (adapter_config.json + safetensors) for a served model
//
// The weights are deterministic numbers, not a trained model: they exist to
// exercise uploads, the guardian's checks, the catalog and deployments.
//
//	go run ./examples/models [-revision N] [DIR]
//
// DIR defaults to the current directory; -revision changes tiny-chat's
// weights (and its README), so uploading it again makes a new catalog
// version with different digests.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// tensor is one safetensors entry: F32 values in row-major order.
type tensor struct {
	name  string
	shape []int
}

func (t tensor) elems() int {
	n := 1
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// safetensors encodes tensors (in the given order, contiguous) with values
// from a deterministic generator seeded by seed.
func safetensors(seed uint64, tensors []tensor) []byte {
	type entry struct {
		DType       string   `json:"dtype"`
		Shape       []int    `json:"shape"`
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, t := range tensors {
		n := int64(t.elems()) * 4
		header[t.name] = entry{DType: "F32", Shape: t.shape, DataOffsets: [2]int64{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		panic(err)
	}
	// Pad the header with spaces so the data starts 8-byte aligned.
	if pad := (8 - len(h)%8) % 8; pad > 0 {
		h = append(h, strings.Repeat(" ", pad)...)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(out, h...)
	x := seed*0x9E3779B97F4A7C15 + 1
	for _, t := range tensors {
		for range t.elems() {
			// xorshift64*: a small value in [-0.05, 0.05).
			x ^= x >> 12
			x ^= x << 25
			x ^= x >> 27
			v := float32(float64((x*0x2545F4914F6CDD1D)>>40)/float64(1<<24)*0.1 - 0.05)
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
	}
	return out
}

func jsonFile(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

func folders(revision int) map[string]map[string][]byte {
	const hidden, vocab, inter = 64, 256, 96
	tiny := []tensor{
		{"model.embed_tokens.weight", []int{vocab, hidden}},
		{"model.layers.0.self_attn.q_proj.weight", []int{hidden, hidden}},
		{"model.layers.0.self_attn.k_proj.weight", []int{hidden, hidden}},
		{"model.layers.0.self_attn.v_proj.weight", []int{hidden, hidden}},
		{"model.layers.0.self_attn.o_proj.weight", []int{hidden, hidden}},
		{"model.layers.0.mlp.up_proj.weight", []int{inter, hidden}},
		{"model.layers.0.mlp.down_proj.weight", []int{hidden, inter}},
	}
	readme := "---\nlicense: apache-2.0\n---\n\n# tiny-chat\n\nA 45K-parameter example model written by `go run ./examples/models`: deterministic\nnumbers in a Llama-shaped layout, not a trained model.\n"
	if revision > 1 {
		readme += fmt.Sprintf("\nRevision %d.\n", revision)
	}
	// A code-bearing pickle (protocol 2): GLOBAL builtins.print, called by
	// REDUCE with ("hello",). Harmless if it ever ran; the guardian refuses it
	// for what it is, never loading it.
	pickle := []byte("\x80\x02cbuiltins\nprint\nq\x00X\x05\x00\x00\x00helloq\x01\x85q\x02Rq\x03.")
	const rank = 4
	lora := []tensor{
		{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", []int{rank, hidden}},
		{"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", []int{hidden, rank}},
		{"base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", []int{rank, hidden}},
		{"base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight", []int{hidden, rank}},
	}
	return map[string]map[string][]byte{
		"tiny-chat": {
			"README.md": []byte(readme),
			"config.json": jsonFile(map[string]any{
				"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
				"hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": 1,
				"num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": vocab,
				"max_position_embeddings": 512, "torch_dtype": "float32",
			}),
			"generation_config.json": jsonFile(map[string]any{"bos_token_id": 1, "eos_token_id": 2, "max_new_tokens": 64}),
			"tokenizer_config.json":  jsonFile(map[string]any{"bos_token": "<s>", "eos_token": "</s>", "model_max_length": 512}),
			"model.safetensors":      safetensors(uint64(revision), tiny),
		},
		"bad-model": {
			"config.json":       []byte(`{"model_type":"llama"}` + "\n"),
			"pytorch_model.bin": pickle,
		},
		"support-lora": {
			"adapter_config.json": jsonFile(map[string]any{
				"peft_type": "LORA", "r": rank, "lora_alpha": 8, "lora_dropout": 0.0,
				"target_modules": []string{"q_proj", "v_proj"}, "task_type": "CAUSAL_LM",
			}),
			"adapter_model.safetensors": safetensors(100, lora),
		},
	}
}

func main() {
	revision := flag.Int("revision", 1, "tiny-chat's revision: another number gives other weights")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./examples/models [-revision N] [DIR]\n\nWrites DIR/tiny-chat, DIR/bad-model and DIR/support-lora (DIR defaults to .).\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 1 || *revision < 1 {
		flag.Usage()
		os.Exit(2)
	}
	dir := "."
	if flag.NArg() == 1 {
		dir = flag.Arg(0)
	}
	if err := write(os.Stdout, dir, *revision); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// write makes the three folders under dir and says what it wrote on out.
func write(out io.Writer, dir string, revision int) error {
	all := folders(revision)
	for _, name := range []string{"tiny-chat", "bad-model", "support-lora"} {
		folder := filepath.Join(dir, name)
		if err := os.MkdirAll(folder, 0o755); err != nil {
			return err
		}
		var size int
		for file, data := range all[name] {
			if err := os.WriteFile(filepath.Join(folder, file), data, 0o644); err != nil {
				return err
			}
			size += len(data)
		}
		fmt.Fprintf(out, "wrote %s: %d files, %d bytes\n", folder, len(all[name]), size)
	}
	return nil
}
