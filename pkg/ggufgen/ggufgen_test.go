package ggufgen

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// reader is a minimal GGUF reader, independent of the writer's code paths.
type reader struct {
	t *testing.T
	b []byte
	p int
}

func (r *reader) u32() uint32 { v := binary.LittleEndian.Uint32(r.b[r.p:]); r.p += 4; return v }
func (r *reader) u64() uint64 { v := binary.LittleEndian.Uint64(r.b[r.p:]); r.p += 8; return v }
func (r *reader) str() string { n := int(r.u64()); s := string(r.b[r.p : r.p+n]); r.p += n; return s }

func (r *reader) value(typ uint32) any {
	switch typ {
	case tU32:
		return r.u32()
	case tI32:
		return int32(r.u32())
	case tF32:
		return math.Float32frombits(r.u32())
	case tBool:
		r.p++
		return r.b[r.p-1] == 1
	case tString:
		return r.str()
	case tArray:
		et := r.u32()
		n := r.u64()
		out := make([]any, n)
		for i := range out {
			out[i] = r.value(et)
		}
		return out
	}
	r.t.Fatalf("unexpected type %d at %d", typ, r.p)
	return nil
}

type tinfo struct {
	shape []uint64
	typ   uint32
	off   uint64
}

func parse(t *testing.T, b []byte) (map[string]any, map[string]tinfo, int) {
	r := &reader{t: t, b: b}
	if string(b[:4]) != "GGUF" {
		t.Fatalf("magic %q", b[:4])
	}
	r.p = 4
	if v := r.u32(); v != 3 {
		t.Fatalf("version %d", v)
	}
	nt, nkv := r.u64(), r.u64()
	kv := map[string]any{}
	for i := uint64(0); i < nkv; i++ {
		k := r.str()
		kv[k] = r.value(r.u32())
	}
	ts := map[string]tinfo{}
	for i := uint64(0); i < nt; i++ {
		name := r.str()
		nd := r.u32()
		var ti tinfo
		for d := uint32(0); d < nd; d++ {
			ti.shape = append(ti.shape, r.u64())
		}
		ti.typ = r.u32()
		ti.off = r.u64()
		ts[name] = ti
	}
	data := (r.p + 31) / 32 * 32
	return kv, ts, data
}

func TestTinyLlama(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, Config{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if len(b)%32 != 0 {
		t.Fatalf("file length %d not padded to 32", len(b))
	}
	kv, ts, data := parse(t, b)
	want := map[string]any{
		"general.architecture":                   "llama",
		"llama.block_count":                      uint32(2),
		"llama.embedding_length":                 uint32(64),
		"llama.attention.head_count":             uint32(4),
		"llama.attention.head_count_kv":          uint32(4),
		"llama.feed_forward_length":              uint32(128),
		"llama.context_length":                   uint32(256),
		"llama.rope.dimension_count":             uint32(16),
		"tokenizer.ggml.model":                   "llama",
		"tokenizer.ggml.bos_token_id":            uint32(1),
		"tokenizer.ggml.eos_token_id":            uint32(2),
		"tokenizer.ggml.unknown_token_id":        uint32(0),
		"tokenizer.ggml.add_bos_token":           true,
		"general.file_type":                      uint32(0),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
	}
	for k, v := range want {
		if kv[k] != v {
			t.Errorf("%s = %v (%T), want %v", k, kv[k], kv[k], v)
		}
	}
	toks := kv["tokenizer.ggml.tokens"].([]any)
	types := kv["tokenizer.ggml.token_type"].([]any)
	scores := kv["tokenizer.ggml.scores"].([]any)
	nv := FirstWordID + len(DefaultWords)
	if len(toks) != nv || len(types) != nv || len(scores) != nv || kv["llama.vocab_size"] != uint32(nv) {
		t.Fatalf("vocab sizes %d %d %d, want %d", len(toks), len(types), len(scores), nv)
	}
	if toks[0] != "<unk>" || toks[1] != "<s>" || toks[2] != "</s>" || toks[FirstByteID] != "<0x00>" || toks[FirstByteID+0x0A] != "<0x0A>" || toks[FirstByteID+255] != "<0xFF>" {
		t.Fatalf("special/byte tokens %v %v %v %v", toks[0], toks[1], toks[2], toks[FirstByteID])
	}
	for i := FirstByteID; i < FirstWordID; i++ {
		if types[i] != int32(typeByte) {
			t.Fatalf("token %d type %v, want byte", i, types[i])
		}
	}
	if types[FirstWordID] != int32(typeNormal) || types[0] != int32(typeUnknown) || types[1] != int32(typeControl) {
		t.Fatalf("types %v %v %v", types[0], types[1], types[FirstWordID])
	}

	e, v, ff := uint64(64), uint64(nv), uint64(128)
	shapes := map[string][]uint64{
		"token_embd.weight": {e, v}, "output_norm.weight": {e}, "output.weight": {e, v},
	}
	for _, l := range []string{"blk.0.", "blk.1."} {
		shapes[l+"attn_norm.weight"] = []uint64{e}
		shapes[l+"attn_q.weight"] = []uint64{e, e}
		shapes[l+"attn_k.weight"] = []uint64{e, e}
		shapes[l+"attn_v.weight"] = []uint64{e, e}
		shapes[l+"attn_output.weight"] = []uint64{e, e}
		shapes[l+"ffn_norm.weight"] = []uint64{e}
		shapes[l+"ffn_gate.weight"] = []uint64{e, ff}
		shapes[l+"ffn_up.weight"] = []uint64{e, ff}
		shapes[l+"ffn_down.weight"] = []uint64{ff, e}
	}
	if len(ts) != len(shapes) {
		t.Fatalf("%d tensors, want %d", len(ts), len(shapes))
	}
	var end uint64
	for name, shape := range shapes {
		ti, ok := ts[name]
		if !ok {
			t.Fatalf("tensor %s missing", name)
		}
		if len(ti.shape) != len(shape) || ti.typ != 0 || ti.off%32 != 0 {
			t.Fatalf("tensor %s: %+v", name, ti)
		}
		for i := range shape {
			if ti.shape[i] != shape[i] {
				t.Fatalf("tensor %s shape %v, want %v", name, ti.shape, shape)
			}
		}
		if x := ti.off + elems(shape)*4; x > end {
			end = x
		}
	}
	if uint64(data)+end > uint64(len(b)) {
		t.Fatalf("data ends at %d, file %d", uint64(data)+end, len(b))
	}
	// the output rows of control and byte tokens are zero, the others not
	out := ts["output.weight"]
	row := func(id uint64) []byte {
		o := uint64(data) + out.off + id*e*4
		return b[o : o+e*4]
	}
	if !bytes.Equal(row(EosID), make([]byte, e*4)) || !bytes.Equal(row(FirstByteID+65), make([]byte, e*4)) {
		t.Fatal("control/byte output rows are not zero")
	}
	if bytes.Equal(row(FirstWordID), make([]byte, e*4)) {
		t.Fatal("word output row is zero")
	}

	// deterministic by seed
	var again, other bytes.Buffer
	_ = Write(&again, Config{Seed: 1})
	_ = Write(&other, Config{Seed: 2})
	if !bytes.Equal(b, again.Bytes()) || bytes.Equal(b, other.Bytes()) {
		t.Fatal("the file is not a function of the seed")
	}
}

func TestConfigChecks(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, Config{Embd: 60, Heads: 8}); err == nil {
		t.Fatal("60/8 accepted")
	}
	if err := Write(&buf, Config{Alignment: 48}); err == nil {
		t.Fatal("alignment 48 accepted")
	}
	buf.Reset()
	if err := Write(&buf, Config{Alignment: 64, HeadsKV: 2, Layers: 1}); err != nil {
		t.Fatal(err)
	}
	kv, ts, _ := parse(t, buf.Bytes())
	if kv["general.alignment"] != uint32(64) || kv["llama.attention.head_count_kv"] != uint32(2) || ts["blk.0.attn_k.weight"].shape[1] != 32 {
		t.Fatalf("kv %v, attn_k %v", kv["general.alignment"], ts["blk.0.attn_k.weight"])
	}
	if _, ok := ts["blk.1.attn_q.weight"]; ok {
		t.Fatal("layer 1 written for 1 layer")
	}
}
