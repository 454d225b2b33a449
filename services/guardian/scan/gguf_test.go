package scan

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func scanG(b []byte) (FileReport, []Reason) {
	return ScanGGUF(bytes.NewReader(b), int64(len(b)))
}

func u32b(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func strArray(ss ...string) []byte {
	b := u32b(ggufString)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(ss)))
	for _, s := range ss {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func validGGUF() []byte {
	kvs := []ggufKV{
		{"general.architecture", ggufString, "llama"},
		{"general.license", ggufString, "apache-2.0"},
		{"tokenizer.ggml.tokens", ggufArray, strArray("a", "b", "c")},
		{"general.alignment", ggufU32, uint32(32)},
	}
	ts := []ggufT{
		{"tok_embd.weight", []uint64{32, 2}, 0, 0},    // F32, 256 bytes
		{"blk.0.attn_q.weight", []uint64{64}, 8, 256}, // Q8_0: 2 blocks × 34 = 68
		{"out.weight", []uint64{256}, 12, 352},        // Q4_K: 144
	}
	return writeGGUF(3, 32, kvs, ts, 352+144)
}

func TestGGUFValid(t *testing.T) {
	rep, rs := scanG(validGGUF())
	if len(rs) != 0 {
		t.Fatalf("reasons %v", rs)
	}
	if rep.Tensors != 3 || rep.Params != 64+64+256 || rep.License != "apache-2.0" {
		t.Fatalf("report %+v", rep)
	}
	if rep.DTypes["F32"] != 64 || rep.DTypes["Q8_0"] != 64 || rep.DTypes["Q4_K"] != 256 {
		t.Fatalf("dtypes %v", rep.DTypes)
	}
	// version 2 and default alignment
	b := writeGGUF(2, 32, nil, []ggufT{{"x", []uint64{8}, 1, 0}}, 16)
	if _, rs := scanG(b); len(rs) != 0 {
		t.Fatalf("v2: %v", rs)
	}
}

func TestGGUFViolations(t *testing.T) {
	good := validGGUF()
	badMagic := append([]byte("GGUX"), good[4:]...)
	badVersion := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(badVersion[4:], 4)
	manyTensors := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(manyTensors[8:], 1<<40)
	manyKV := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(manyKV[16:], 1<<40)
	hugeString := writeGGUF(3, 32, []ggufKV{{"k", ggufString, "v"}}, nil, 0)
	binary.LittleEndian.PutUint64(hugeString[24+8+1+4:], 1<<50) // value length
	hugeArray := writeGGUF(3, 32, []ggufKV{{"k", ggufArray, append(u32b(ggufU64), binary.LittleEndian.AppendUint64(nil, 1<<40)...)}}, nil, 0)
	hugeStrArray := writeGGUF(3, 32, []ggufKV{{"k", ggufArray, append(u32b(ggufString), binary.LittleEndian.AppendUint64(nil, 1<<40)...)}}, nil, 0)
	cases := []struct {
		name string
		file []byte
	}{
		{"short", []byte("GGUF")},
		{"bad magic", badMagic},
		{"bad version", badVersion},
		{"tensor count", manyTensors},
		{"kv count", manyKV},
		{"string length", hugeString},
		{"array length", hugeArray},
		{"string array length", hugeStrArray},
		{"unknown value type", writeGGUF(3, 32, []ggufKV{{"k", 99, uint32(0)}}, nil, 0)},
		{"alignment not pow2", writeGGUF(3, 32, []ggufKV{{"general.alignment", ggufU32, uint32(24)}}, nil, 0)},
		{"alignment zero", writeGGUF(3, 32, []ggufKV{{"general.alignment", ggufU32, uint32(0)}}, nil, 0)},
		{"unaligned offset", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{8}, 0, 4}}, 64)},
		{"data past EOF", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{64}, 0, 0}}, 100)},
		{"offset past EOF", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{8}, 0, 1 << 62}}, 32)},
		{"unknown ggml type", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{8}, 77, 0}}, 32)},
		{"block mismatch", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{33}, 2, 0}}, 64)},
		{"too many dims", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{1, 1, 1, 1, 1}, 0, 0}}, 32)},
		{"dim overflow", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{1 << 40, 1 << 40}, 0, 0}}, 32)},
		{"overlap", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{16}, 0, 0}, {"y", []uint64{16}, 0, 32}}, 128)},
		{"duplicate tensor", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{8}, 0, 0}, {"x", []uint64{8}, 0, 32}}, 64)},
		{"duplicate key", writeGGUF(3, 32, []ggufKV{{"k", ggufU32, uint32(1)}, {"k", ggufU32, uint32(1)}}, nil, 0)},
		{"truncated", good[:len(good)-600]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, rs := scanG(c.file)
			if !hasCode(rs, CodeGGUF) {
				t.Fatalf("want gguf_invalid, got %v", rs)
			}
		})
	}
}

func FuzzScanGGUF(f *testing.F) {
	f.Add(validGGUF())
	f.Add(writeGGUF(2, 32, nil, []ggufT{{"x", []uint64{8}, 1, 0}}, 16))
	f.Add(writeGGUF(3, 32, []ggufKV{{"k", ggufArray, strArray("x", "yy")}}, nil, 0))
	f.Add([]byte("GGUF"))
	f.Add(ggufHugeString())
	f.Add(ggufSetU64(8, 1<<40))
	f.Add(writeGGUF(3, 32, []ggufKV{{"k", ggufArray, append(u32b(ggufString), le64(1<<40)...)}}, nil, 0))
	f.Add(writeGGUF(3, 64, []ggufKV{{"general.alignment", ggufU32, uint32(64)}}, []ggufT{{"x", []uint64{8}, 0, 8}}, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, rs := ScanGGUF(bytes.NewReader(b), int64(len(b)))
		if len(rs) == 0 && (rep.Params < 0 || string(b[:4]) != "GGUF") {
			t.Fatalf("accepted %+v", rep)
		}
	})
}
