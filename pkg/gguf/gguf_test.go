package gguf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/aiforge/aiforge/pkg/gguf"
	"github.com/aiforge/aiforge/pkg/ggufgen"
)

func write(t *testing.T, c ggufgen.Config) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := ggufgen.Write(&b, c); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func read(b []byte) (*gguf.File, error) {
	return gguf.Read(bytes.NewReader(b), int64(len(b)), gguf.Limits{})
}

func TestReadDense(t *testing.T) {
	c := ggufgen.Config{Layers: 3}
	b := write(t, c)
	f, err := read(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || f.Architecture() != "llama" || f.Alignment != 32 || f.DataOffset%32 != 0 {
		t.Fatalf("version %d arch %q alignment %d data at %d", f.Version, f.Architecture(), f.Alignment, f.DataOffset)
	}
	if n, ok := f.Uint("llama.block_count"); !ok || n != 3 {
		t.Fatalf("block_count %d %v", n, ok)
	}
	if name, _ := f.String("general.name"); name != "aiforge-tiny" {
		t.Fatalf("general.name %q", name)
	}
	if v := f.Metadata["tokenizer.ggml.tokens"]; v.Type != gguf.TypeArray || v.ElemType != gguf.TypeString || v.Len != uint64(ggufgen.FirstWordID+len(ggufgen.DefaultWords)) {
		t.Fatalf("tokens array %+v", v)
	}
	want := c.Tensors()
	if len(f.Tensors) != len(want) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(want))
	}
	var total uint64
	for i, tt := range f.Tensors {
		n := uint64(4)
		for _, d := range want[i].Shape {
			n *= d
		}
		if tt.Name != want[i].Name || tt.Type != 0 || tt.Bytes != n {
			t.Fatalf("tensor %d: %+v, want %s of %d bytes", i, tt, want[i].Name, n)
		}
		total += tt.Bytes
	}
	if total != uint64(c.Params())*4 {
		t.Fatalf("tensor bytes %d, want %d", total, c.Params()*4)
	}
	if _, ok := f.MoE(); ok {
		t.Fatal("a dense model read as MoE")
	}
}

func TestReadMoE(t *testing.T) {
	c := ggufgen.Config{Layers: 3, Embd: 32, FF: 48, Experts: 4, ExpertsUsed: 2}
	f, err := read(write(t, c))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := f.MoE()
	if !ok {
		t.Fatal("not read as MoE")
	}
	perLayer := uint64(3 * 32 * 48 * 4 * 4) // gate, up, down x experts x f32
	if m.Architecture != "llama" || m.ExpertCount != 4 || m.ExpertUsedCount != 2 || m.BlockCount != 3 || m.MoELayers() != 3 {
		t.Fatalf("layout %+v", m)
	}
	for i, b := range m.LayerExpertBytes {
		if b != perLayer {
			t.Fatalf("layer %d expert bytes %d, want %d", i, b, perLayer)
		}
	}
	if m.ExpertBytes != 3*perLayer || m.ExpertBytes+m.OtherBytes != uint64(c.Params())*4 {
		t.Fatalf("expert bytes %d other %d, params %d", m.ExpertBytes, m.OtherBytes, c.Params())
	}
	// 2 (K, V) x 3 layers x 4 kv heads x 8 (head size) x 2 bytes
	if m.KVBytesPerToken != 2*3*4*8*2 {
		t.Fatalf("KV bytes per token %d", m.KVBytesPerToken)
	}
}

// Every truncation of the header is an error, never a panic.
func TestTruncated(t *testing.T) {
	b := write(t, ggufgen.Config{Layers: 1, Experts: 2})
	f, err := read(b)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < int(f.DataOffset); n++ {
		if _, err := read(b[:n]); err == nil {
			t.Fatalf("a file cut at %d of %d bytes was read", n, f.DataOffset)
		}
	}
	// Cut inside the data: the tensors no longer fit.
	if _, err := read(b[:len(b)-8]); !errors.Is(err, gguf.ErrFormat) {
		t.Fatalf("a file missing tensor data: %v", err)
	}
}

// header builds a GGUF header by hand.
type header struct{ bytes.Buffer }

func (h *header) u32(v uint32) *header { _ = binary.Write(h, binary.LittleEndian, v); return h }
func (h *header) u64(v uint64) *header { _ = binary.Write(h, binary.LittleEndian, v); return h }
func (h *header) str(s string) *header { h.u64(uint64(len(s))); h.WriteString(s); return h }
func start(tensors, kvs uint64) *header {
	h := &header{}
	h.WriteString("GGUF")
	return h.u32(3).u64(tensors).u64(kvs)
}

// Hostile counts and lengths fail with ErrFormat before anything of their
// size is allocated.
func TestHostileHeaders(t *testing.T) {
	pad := make([]byte, 4096)
	cases := map[string]*header{
		"tensor count":     start(1<<40, 0),
		"kv count":         start(0, 1<<40),
		"key length":       start(0, 1).u64(1 << 60),
		"string value":     start(0, 1).str("k").u32(uint32(gguf.TypeString)).u64(1 << 60),
		"array length":     start(0, 1).str("k").u32(uint32(gguf.TypeArray)).u32(uint32(gguf.TypeUint8)).u64(1 << 62),
		"array overflow":   start(0, 1).str("k").u32(uint32(gguf.TypeArray)).u32(uint32(gguf.TypeUint64)).u64(1 << 23).u64(0),
		"string array":     start(0, 1).str("k").u32(uint32(gguf.TypeArray)).u32(uint32(gguf.TypeString)).u64(1 << 20),
		"nested array":     start(0, 1).str("k").u32(uint32(gguf.TypeArray)).u32(uint32(gguf.TypeArray)).u64(1),
		"value type":       start(0, 1).str("k").u32(99),
		"alignment":        start(0, 1).str("general.alignment").u32(uint32(gguf.TypeUint32)).u32(3),
		"dimensions":       start(1, 0).str("t").u32(5),
		"no dimensions":    start(1, 0).str("t").u32(0),
		"offset past end":  start(1, 0).str("t").u32(1).u64(8).u32(0).u64(1 << 40),
		"size past end":    start(1, 0).str("t").u32(1).u64(1 << 40).u32(0).u64(0),
		"elements":         start(1, 0).str("t").u32(2).u64(1 << 40).u64(1 << 40).u32(0).u64(0),
		"partial block":    start(1, 0).str("t").u32(1).u64(33).u32(2).u64(0),
		"version":          func() *header { h := &header{}; h.WriteString("GGUF"); return h.u32(1).u64(0).u64(0) }(),
		"magic":            func() *header { h := &header{}; h.WriteString("GGML"); return h.u32(3).u64(0).u64(0) }(),
		"unknown type end": start(1, 0).str("t").u32(1).u64(8).u32(200).u64(1 << 30),
	}
	for name, h := range cases {
		b := append(h.Bytes(), pad...)
		if _, err := read(b); !errors.Is(err, gguf.ErrFormat) {
			t.Errorf("%s: err %v, want ErrFormat", name, err)
		}
	}
	// Limits apply: a header bigger than MaxHeader.
	b := write(t, ggufgen.Config{})
	if _, err := gguf.Read(bytes.NewReader(b), int64(len(b)), gguf.Limits{MaxHeader: 1024}); err == nil || !strings.Contains(err.Error(), "header larger") {
		t.Fatalf("MaxHeader: %v", err)
	}
	// A tensor of unknown type takes the bytes up to the end.
	h := start(1, 0).str("t").u32(1).u64(8).u32(200).u64(0)
	for h.Len()%32 != 0 {
		h.WriteByte(0)
	}
	h.Write(make([]byte, 100))
	f, err := read(h.Bytes())
	if err != nil || f.Tensors[0].Bytes != 100 {
		t.Fatalf("unknown type: %+v %v", f, err)
	}
}
