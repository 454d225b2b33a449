// Package ggufgen writes tiny llama-architecture GGUF v3 files with random
// F32 weights: real enough for llama.cpp, Ollama and the guardian's GGUF
// validator to load, small enough (about 0.5 MB) to write in a test.
//
// The file carries every tensor llama.cpp's llama loader needs
// (token_embd, output_norm, output and per block attn_norm, attn_q/k/v,
// attn_output, ffn_norm, ffn_gate/up/down), the llama.* hyperparameters and
// a SentencePiece ("llama") vocabulary: <unk>, <s>, </s>, the 256 byte
// tokens <0x00>..<0xFF> (token type 6) and a few scored word pieces.
//
// Greedy decoding (temperature 0) only ever picks word pieces: the output
// rows of the control and byte tokens are zero, so their logits are 0 while
// the maximum over the word pieces' random logits is all but surely above
// it. A generation therefore ends only at max_tokens, and its text is plain
// ASCII, which tests that need a long stream or exact token counts rely on.
package ggufgen

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
)

// Config shapes the model. The zero value of a field takes its default.
type Config struct {
	Name      string // general.name; default "aiforge-tiny"
	License   string // general.license; omitted when empty
	Layers    int    // block_count; default 2
	Embd      int    // embedding_length; default 64
	Heads     int    // attention.head_count; default 4
	HeadsKV   int    // attention.head_count_kv; default Heads
	FF        int    // feed_forward_length; default 128
	Context   int    // context_length; default 256
	Seed      uint64 // weights' seed; the same seed gives the same file
	Alignment int    // general.alignment; default 32 (written only if not 32)
	// Words are the word pieces after the byte tokens; default DefaultWords.
	Words []string
	// Experts, when above 0, makes every block a mixture of experts as
	// llama.cpp loads Mixtral under the llama architecture: a router
	// (ffn_gate_inp) and the experts' stacked ffn_gate/up/down_exps
	// tensors instead of the dense FFN, with llama.expert_count and
	// llama.expert_used_count (ExpertsUsed; default 2, at most Experts).
	Experts     int
	ExpertsUsed int
}

// DefaultWords is the default word-piece vocabulary: SentencePiece pieces,
// "▁" marking a word start.
var DefaultWords = []string{
	"▁", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
	"n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z",
	"▁the", "▁a", "▁is", "▁of", "▁and", "▁to", "▁in", "▁hello", "▁world",
	"▁ping", "▁pong", "▁model", "▁token", "▁forge", "▁ai", "▁tiny", "▁test",
	"er", "in", "on", "at", "en", "es", "or", "an", "th", "he", "ll", "lo",
	".", ",", "!", "?",
}

// Token ids of the special tokens.
const (
	UnkID = 0
	BosID = 1
	EosID = 2
	// FirstByteID is the id of <0x00>; <0xNN> is FirstByteID+0xNN.
	FirstByteID = 3
	// FirstWordID is the id of the first word piece.
	FirstWordID = FirstByteID + 256
)

// SentencePiece token types, as llama.cpp reads tokenizer.ggml.token_type.
const (
	typeNormal  = 1
	typeUnknown = 2
	typeControl = 3
	typeByte    = 6
)

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Name == "" {
		c.Name = "aiforge-tiny"
	}
	def(&c.Layers, 2)
	def(&c.Embd, 64)
	def(&c.Heads, 4)
	def(&c.HeadsKV, c.Heads)
	def(&c.FF, 128)
	def(&c.Context, 256)
	def(&c.Alignment, 32)
	if c.Words == nil {
		c.Words = DefaultWords
	}
	if c.Experts > 0 {
		def(&c.ExpertsUsed, min(2, c.Experts))
		c.ExpertsUsed = min(c.ExpertsUsed, c.Experts)
	}
	return c
}

// Vocab returns the tokens, their scores and their types, in id order.
func (c Config) Vocab() (tokens []string, scores []float32, types []int32) {
	c = c.withDefaults()
	tokens = []string{"<unk>", "<s>", "</s>"}
	scores = []float32{0, 0, 0}
	types = []int32{typeUnknown, typeControl, typeControl}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		scores = append(scores, 0)
		types = append(types, typeByte)
	}
	for i, w := range c.Words {
		tokens = append(tokens, w)
		// longer pieces win merges, as in a trained SentencePiece model
		scores = append(scores, float32(len(w))-float32(i)/1000)
		types = append(types, typeNormal)
	}
	return tokens, scores, types
}

// Tensor is one tensor's name and ggml shape (ne0 first, the innermost).
type Tensor struct {
	Name  string
	Shape []uint64
}

// Params is the number of weights in the file.
func (c Config) Params() int64 {
	var n int64
	for _, t := range c.Tensors() {
		n += int64(elems(t.Shape))
	}
	return n
}

// Tensors lists the tensors in file order.
func (c Config) Tensors() []Tensor {
	c = c.withDefaults()
	nv := uint64(FirstWordID + len(c.Words))
	e, ff := uint64(c.Embd), uint64(c.FF)
	kv := e / uint64(c.Heads) * uint64(c.HeadsKV)
	ts := []Tensor{
		{"token_embd.weight", []uint64{e, nv}},
		{"output_norm.weight", []uint64{e}},
		{"output.weight", []uint64{e, nv}},
	}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			Tensor{p + "attn_norm.weight", []uint64{e}},
			Tensor{p + "attn_q.weight", []uint64{e, e}},
			Tensor{p + "attn_k.weight", []uint64{e, kv}},
			Tensor{p + "attn_v.weight", []uint64{e, kv}},
			Tensor{p + "attn_output.weight", []uint64{e, e}},
			Tensor{p + "ffn_norm.weight", []uint64{e}},
		)
		if c.Experts > 0 {
			x := uint64(c.Experts)
			ts = append(ts,
				Tensor{p + "ffn_gate_inp.weight", []uint64{e, x}},
				Tensor{p + "ffn_gate_exps.weight", []uint64{e, ff, x}},
				Tensor{p + "ffn_up_exps.weight", []uint64{e, ff, x}},
				Tensor{p + "ffn_down_exps.weight", []uint64{ff, e, x}},
			)
			continue
		}
		ts = append(ts,
			Tensor{p + "ffn_gate.weight", []uint64{e, ff}},
			Tensor{p + "ffn_up.weight", []uint64{e, ff}},
			Tensor{p + "ffn_down.weight", []uint64{ff, e}},
		)
	}
	return ts
}

// GGUF metadata value types.
const (
	tU32    = 4
	tI32    = 5
	tF32    = 6
	tBool   = 7
	tString = 8
	tArray  = 9
)

type writer struct {
	w   *bufio.Writer
	n   int64
	kvs int
	err error
}

func (w *writer) raw(b []byte) {
	if w.err != nil {
		return
	}
	var k int
	k, w.err = w.w.Write(b)
	w.n += int64(k)
}

func (w *writer) u32(v uint32) { w.raw(binary.LittleEndian.AppendUint32(nil, v)) }
func (w *writer) u64(v uint64) { w.raw(binary.LittleEndian.AppendUint64(nil, v)) }
func (w *writer) f32(v float32) {
	w.u32(math.Float32bits(v))
}
func (w *writer) str(s string) { w.u64(uint64(len(s))); w.raw([]byte(s)) }

// key starts a metadata entry of type typ and counts it.
func (w *writer) key(k string, typ uint32) { w.kvs++; w.str(k); w.u32(typ) }

func (w *writer) kvU32(k string, v uint32) { w.key(k, tU32); w.u32(v) }
func (w *writer) kvF32(k string, v float32) {
	w.key(k, tF32)
	w.f32(v)
}
func (w *writer) kvStr(k, v string) { w.key(k, tString); w.str(v) }
func (w *writer) kvBool(k string, v bool) {
	w.key(k, tBool)
	if v {
		w.raw([]byte{1})
	} else {
		w.raw([]byte{0})
	}
}

func (w *writer) pad(align int64) {
	if r := w.n % align; r != 0 {
		w.raw(make([]byte, align-r))
	}
}

// Write writes the GGUF file for c to out.
func Write(out io.Writer, c Config) error {
	c = c.withDefaults()
	if c.Embd%c.Heads != 0 || c.Heads%c.HeadsKV != 0 || (c.Embd/c.Heads)%2 != 0 {
		return fmt.Errorf("ggufgen: embd %d, heads %d, heads_kv %d do not divide into even head sizes", c.Embd, c.Heads, c.HeadsKV)
	}
	if c.Alignment&(c.Alignment-1) != 0 {
		return fmt.Errorf("ggufgen: alignment %d is not a power of two", c.Alignment)
	}
	tokens, scores, types := c.Vocab()
	tensors := c.Tensors()
	// metadata first, into memory, to count it
	var meta bytes.Buffer
	m := &writer{w: bufio.NewWriter(&meta)}
	m.kvStr("general.architecture", "llama")
	m.kvStr("general.name", c.Name)
	m.kvU32("general.file_type", 0) // ALL_F32
	if c.License != "" {
		m.kvStr("general.license", c.License)
	}
	if c.Alignment != 32 {
		m.kvU32("general.alignment", uint32(c.Alignment))
	}
	m.kvU32("llama.context_length", uint32(c.Context))
	m.kvU32("llama.embedding_length", uint32(c.Embd))
	m.kvU32("llama.block_count", uint32(c.Layers))
	m.kvU32("llama.feed_forward_length", uint32(c.FF))
	m.kvU32("llama.rope.dimension_count", uint32(c.Embd/c.Heads))
	m.kvF32("llama.rope.freq_base", 10000)
	m.kvU32("llama.attention.head_count", uint32(c.Heads))
	m.kvU32("llama.attention.head_count_kv", uint32(c.HeadsKV))
	m.kvF32("llama.attention.layer_norm_rms_epsilon", 1e-5)
	m.kvU32("llama.vocab_size", uint32(len(tokens)))
	if c.Experts > 0 {
		m.kvU32("llama.expert_count", uint32(c.Experts))
		m.kvU32("llama.expert_used_count", uint32(c.ExpertsUsed))
	}

	m.kvStr("tokenizer.ggml.model", "llama")
	m.key("tokenizer.ggml.tokens", tArray)
	m.u32(tString)
	m.u64(uint64(len(tokens)))
	for _, t := range tokens {
		m.str(t)
	}
	m.key("tokenizer.ggml.scores", tArray)
	m.u32(tF32)
	m.u64(uint64(len(scores)))
	for _, s := range scores {
		m.f32(s)
	}
	m.key("tokenizer.ggml.token_type", tArray)
	m.u32(tI32)
	m.u64(uint64(len(types)))
	for _, t := range types {
		m.u32(uint32(t))
	}
	m.kvU32("tokenizer.ggml.bos_token_id", BosID)
	m.kvU32("tokenizer.ggml.eos_token_id", EosID)
	m.kvU32("tokenizer.ggml.unknown_token_id", UnkID)
	m.kvBool("tokenizer.ggml.add_bos_token", true)
	m.kvBool("tokenizer.ggml.add_eos_token", false)
	if err := m.w.Flush(); err != nil {
		return err
	}
	if m.err != nil {
		return m.err
	}

	w := &writer{w: bufio.NewWriterSize(out, 1<<16)}
	w.raw([]byte("GGUF"))
	w.u32(3)
	w.u64(uint64(len(tensors)))
	w.u64(uint64(m.kvs))
	w.raw(meta.Bytes())

	// tensor infos: offsets relative to the aligned data section
	align := uint64(c.Alignment)
	var off uint64
	offsets := make([]uint64, len(tensors))
	for i, t := range tensors {
		w.str(t.Name)
		w.u32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			w.u64(d)
		}
		w.u32(0) // GGML_TYPE_F32
		w.u64(off)
		offsets[i] = off
		off += elems(t.Shape) * 4
		off = (off + align - 1) / align * align
	}
	w.pad(int64(align))

	rng := rand.New(rand.NewPCG(c.Seed, 0x6767756667656e)) // "ggufgen"
	start := w.n
	for i, t := range tensors {
		for uint64(w.n-start) < offsets[i] {
			w.raw([]byte{0})
		}
		n := elems(t.Shape)
		buf := make([]byte, 0, n*4)
		switch {
		case len(t.Shape) == 1: // norms
			for j := uint64(0); j < n; j++ {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(1))
			}
		case t.Name == "output.weight":
			e := t.Shape[0]
			for j := uint64(0); j < n; j++ {
				v := float32(0)
				if j/e >= FirstWordID { // zero rows: control and byte tokens
					v = float32(rng.NormFloat64())
				}
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			}
		default:
			scale := 1 / math.Sqrt(float64(t.Shape[0]))
			if t.Name == "token_embd.weight" {
				scale = 1
			}
			for j := uint64(0); j < n; j++ {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(rng.NormFloat64()*scale)))
			}
		}
		w.raw(buf)
	}
	w.pad(int64(align))
	if w.err != nil {
		return w.err
	}
	return w.w.Flush()
}

func elems(shape []uint64) uint64 {
	n := uint64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// WriteFile writes the GGUF file for c to path.
func WriteFile(path string, c Config) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, c); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
