package scan

import (
	"bytes"
	"testing"

	"github.com/aiforge/aiforge/pkg/ggufgen"
)

// TestGeneratedTinyLlama: the tiny llama GGUF the real-engine tests load
// into Ollama is a valid GGUF to the guardian, alone and as an upload.
func TestGeneratedTinyLlama(t *testing.T) {
	cfg := ggufgen.Config{Seed: 7, License: "apache-2.0"}
	var buf bytes.Buffer
	if err := ggufgen.Write(&buf, cfg); err != nil {
		t.Fatal(err)
	}
	b := bytes.Clone(buf.Bytes())
	rep, rs := ScanGGUF(bytes.NewReader(b), int64(len(b)))
	if len(rs) != 0 {
		t.Fatalf("reasons %v", rs)
	}
	if rep.Tensors != len(cfg.Tensors()) || rep.Params != cfg.Params() || rep.DTypes["F32"] != cfg.Params() || rep.License != "apache-2.0" {
		t.Fatalf("report %+v, want %d tensors, %d F32 params", rep, len(cfg.Tensors()), cfg.Params())
	}
	v := scanFiles(map[string][]byte{"tiny.gguf": b}, map[string]string{"tiny.gguf": sha(b)})
	if !v.Accepted || v.Format != "gguf" || v.Params != cfg.Params() || v.License != "apache-2.0" {
		t.Fatalf("verdict %+v", v)
	}
	// a 64-byte alignment and grouped-query attention validate too
	buf.Reset()
	if err := ggufgen.Write(&buf, ggufgen.Config{Alignment: 64, HeadsKV: 2}); err != nil {
		t.Fatal(err)
	}
	if _, rs := ScanGGUF(bytes.NewReader(buf.Bytes()), int64(buf.Len())); len(rs) != 0 {
		t.Fatalf("align 64: %v", rs)
	}
	// cut short, it is not
	if _, rs := ScanGGUF(bytes.NewReader(b[:len(b)-64]), int64(len(b)-64)); len(rs) == 0 {
		t.Fatal("truncated file accepted")
	}
}
