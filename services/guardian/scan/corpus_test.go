package scan

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"slices"
	"sort"
	"testing"
)

// maxScanAlloc bounds what scanning one crafted input may allocate: headers
// and counts claiming gigabytes must be refused before anything is sized
// from them. A memory bound, not a timing one.
const maxScanAlloc = 16 << 20

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// stWithLen is a safetensors file whose 8-byte length says n whatever follows.
func stWithLen(n uint64, rest string) []byte { return append(le64(n), rest...) }

const (
	tU8a = `"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}`
	tU8b = `"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}`
)

func corpusShards(index string, extra map[string][]byte) map[string][]byte {
	files := map[string][]byte{
		"model-00001-of-00002.safetensors": writeST(nil, stT{"a", "F32", []int64{2}}, stT{"b", "F32", []int64{2}}),
		"model-00002-of-00002.safetensors": writeST(nil, stT{"c", "F32", []int64{3}}),
		"model.safetensors.index.json":     []byte(index),
	}
	for k, v := range extra {
		files[k] = v
	}
	return files
}

func ggufHugeString() []byte {
	b := writeGGUF(3, 32, []ggufKV{{"k", ggufString, "v"}}, nil, 0)
	binary.LittleEndian.PutUint64(b[24+8+1+4:], 1<<50)
	return b
}

func ggufSetU64(off int, v uint64) []byte {
	b := validGGUF()
	binary.LittleEndian.PutUint64(b[off:], v)
	return b
}

// TestBadInputCorpus feeds crafted hostile uploads through ScanDir and
// asserts the exact set of reason codes of each, and that none makes the
// scanner allocate what the input claims.
func TestBadInputCorpus(t *testing.T) {
	st := func(header string, dataLen int) map[string][]byte {
		return map[string][]byte{"model.safetensors": rawST(header, dataLen)}
	}
	one := func(name string, b []byte) map[string][]byte { return map[string][]byte{name: b} }
	valid := writeST(nil, stT{"w", "F32", []int64{4}})
	zipInData := zipWith(t, "archive/data.pkl")
	stZip := writeST(nil, stT{"blob", "U8", []int64{int64(len(zipInData))}})
	copy(stZip[len(stZip)-len(zipInData):], zipInData)
	pngZip := append(bytes.Clone(pngFile), zipWith(t, "x.pkl")...)

	cases := []struct {
		name     string
		files    map[string][]byte
		manifest map[string]string
		want     []string
	}{
		// safetensors header length tricks
		{"st header length 0", one("model.safetensors", stWithLen(0, "{}")), nil, []string{CodeSTHeaderInvalid}},
		{"st header length > 100 MB", one("model.safetensors", stWithLen(maxSafetensorsHeader+1, "{}")), nil, []string{CodeSTHeaderTooLarge}},
		{"st header length max uint64", one("model.safetensors", stWithLen(^uint64(0), "{}")), nil, []string{CodeSTHeaderTooLarge}},
		{"st header length larger than file", one("model.safetensors", stWithLen(50<<20, `{"a":1}`)), nil, []string{CodeSTHeaderTooLarge}},
		{"st 8 bytes only", one("model.safetensors", le64(2)), nil, []string{CodeSTHeaderTooLarge}},
		{"st shorter than 8 bytes", one("model.safetensors", []byte{2, 0, 0}), nil, []string{CodeSTHeaderTooLarge}},
		{"st empty file", one("model.safetensors", nil), nil, []string{CodeSTHeaderTooLarge}},
		{"st truncated header", one("model.safetensors", rawST(`{`+tU8a+`}`, 1)[:20]), nil, []string{CodeSTHeaderTooLarge}},
		{"st truncated data", one("model.safetensors", valid[:len(valid)-2]), nil, []string{CodeSTOffsets}},
		// header content
		{"st header not starting with {", st(` {}`, 0), nil, []string{CodeSTHeaderInvalid}},
		{"st header is an array", st(`[{}]`, 0), nil, []string{CodeSTHeaderInvalid}},
		{"st header invalid utf-8", st("{\"a\xc3\x28\":{}}", 0), nil, []string{CodeSTHeaderInvalid}},
		{"st trailing garbage after JSON", st(`{} x`, 0), nil, []string{CodeSTHeaderInvalid}},
		{"st duplicate top-level key", st(`{`+tU8a+`,`+tU8a+`}`, 1), nil, []string{CodeSTDuplicateKey}},
		{"st duplicate key in tensor", st(`{"a":{"dtype":"U8","shape":[1],"shape":[1],"data_offsets":[0,1]}}`, 1), nil, []string{CodeSTDuplicateKey}},
		{"st duplicate key in metadata", st(`{"__metadata__":{"k":"v","k":"w"}}`, 0), nil, []string{CodeSTDuplicateKey}},
		{"st dtype not allowed", st(`{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`, 8), nil, []string{CodeSTBadDType}},
		{"st dtype lowercase", st(`{"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, 4), nil, []string{CodeSTBadDType}},
		{"st negative shape", st(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, 1), nil, []string{CodeSTShape}},
		{"st float shape", st(`{"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}}`, 1), nil, []string{CodeSTShape}},
		{"st shape product overflows int64", st(`{"a":{"dtype":"U8","shape":[4294967296,4294967296,4],"data_offsets":[0,1]}}`, 1), nil, []string{CodeSTOverflow}},
		{"st shape dim beyond uint64", st(`{"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}}`, 1), nil, []string{CodeSTOverflow}},
		{"st offsets unsorted", st(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}}`, 1), nil, []string{CodeSTOffsets}},
		{"st offsets hole", st(`{`+tU8a+`,"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, 3), nil, []string{CodeSTOffsets}},
		{"st offsets overlap", st(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},`+tU8b+`}`, 2), nil, []string{CodeSTOffsets}},
		{"st offsets not from 0", st(`{`+tU8b+`}`, 2), nil, []string{CodeSTOffsets}},
		{"st span != elements x size", st(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,2]}}`, 2), nil, []string{CodeSTOffsets}},
		{"st last end < data length", st(`{`+tU8a+`}`, 9), nil, []string{CodeSTOffsets}},
		{"st last end > data length", st(`{`+tU8a+`,`+tU8b+`}`, 1), nil, []string{CodeSTOffsets}},
		{"st offsets negative", st(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, 1), nil, []string{CodeSTOffsets}},
		{"st metadata non-string value", st(`{"__metadata__":{"k":{"x":"y"}}}`, 0), nil, []string{CodeSTMetadata}},
		{"st metadata number", st(`{"__metadata__":{"k":1}}`, 0), nil, []string{CodeSTMetadata}},
		{"st empty tensor name", st(`{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), nil, []string{CodeSTName}},
		{"st NUL in tensor name", st(`{"a\u0000":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), nil, []string{CodeSTName}},
		// polyglots
		{"safetensors whose data is a zip", one("model.safetensors", stZip), nil, []string{CodeZip}},
		{"zip named safetensors", one("model.safetensors", zipWith(t, "data.pkl")), nil, []string{CodeZip}},
		{"pickle named safetensors", one("model.safetensors", picklePayload), nil, []string{CodePickle}},
		{"zip named json", one("config.json", zipWith(t, "config.json")), nil, []string{CodeZip}},
		{"png with a zip appended", one("logo.png", pngZip), nil, []string{CodeZip}},
		{"gif named pytorch_model.bin", one("pytorch_model.bin", gifFile), nil, []string{CodePickle}},
		{"png named safetensors", one("model.safetensors", pngFile), nil, []string{CodeSTHeaderTooLarge}},
		// pickles
		{"pickle protocol 2 GLOBAL os system REDUCE", one("pytorch_model.bin", []byte("\x80\x02cos\nsystem\nq\x00X\x0a\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03.")), nil, []string{CodePickle}},
		{"pickle protocol 4 STACK_GLOBAL", one("model.ckpt", picklePayload), nil, []string{CodePickle}},
		{"pickle protocol 0 text", one("model.pkl", []byte("cos\nsystem\n(S'echo pwned'\ntR.")), nil, []string{CodePickle}},
		{"pickle protocol 0 named txt", one("notes.txt", []byte("cos\nsystem\n(S'echo pwned'\ntR.")), nil, []string{CodePickle}},
		{"pickle protocol 0 in a long text", one("notes.md", append(bytes.Repeat([]byte("lorem ipsum\n"), 1000), "cos\nsystem\n(S'echo pwned'\ntR."...)), nil, []string{CodePickle}},
		{"pickle protocol 1 BINPUT BINGET", one("blob", []byte("cos\nsystem\nq\x01h\x01(X\x02\x00\x00\x00lsq\x02tR.")), nil, []string{CodePickle}},
		{"pickle LONG_BINPUT MEMOIZE", one("weights.pt", []byte("\x80\x04\x8c\x02os\x94r\x01\x00\x00\x00\x8c\x06system\x94\x93j\x01\x00\x00\x00\x8c\x02ls\x85R.")), nil, []string{CodePickle}},
		{"pickle protocol 2 named txt", one("readme.txt", []byte("\x80\x02cos\nsystem\nq\x00.")), nil, []string{CodePickle}},
		{"pickle named tokenizer.model", one("tokenizer.model", picklePayload), nil, []string{CodePickle}},
		// archives
		{"zip slip dot-dot", one("model.pt", zipWith(t, "../../etc/passwd")), nil, []string{CodeZip, CodeZipTraversal}},
		{"zip slip absolute", one("model.pt", zipWith(t, "/x")), nil, []string{CodeZip, CodeZipTraversal}},
		{"zip slip backslash", one("model.pt", zipWith(t, "..\\x")), nil, []string{CodeZip, CodeZipTraversal}},
		{"zip slip drive letter", one("model.pt", zipWith(t, "C:\\x")), nil, []string{CodeZip, CodeZipTraversal}},
		{"torch zip with data.pkl", one("model.pt", zipWith(t, "archive/data.pkl", "archive/data/0", "archive/version")), nil, []string{CodeZip}},
		{"keras v3 zip", one("model.keras", zipWith(t, "config.json", "model.weights.h5")), nil, []string{CodeZip}},
		{"keras hdf5 magic", one("model.h5", hdf5File), nil, []string{CodeKeras}},
		{"hdf5 named safetensors", one("model.safetensors", hdf5File), nil, []string{CodeKeras}},
		// code
		{"python file", one("handler.py", []byte("print(1)\n")), nil, []string{CodePython}},
		{"modeling_x.py", one("modeling_x.py", []byte("import os\nos.system('echo pwned')\n")), nil, []string{CodePython}},
		{"empty python file", one("__init__.py", nil), nil, []string{CodePython}},
		// shard indexes
		{"shard index points outside", corpusShards(`{"weight_map":{"a":"../x.safetensors"}}`, nil), nil, []string{CodeShardIndex}},
		{"shard index absolute path", corpusShards(`{"weight_map":{"a":"/etc/passwd"}}`, nil), nil, []string{CodeShardIndex}},
		{"shard index missing shard", corpusShards(`{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00003-of-00003.safetensors"}}`, nil), nil, []string{CodeShardIndex}},
		{"tensor in two shards", corpusShards(`{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors","x":"model-00003.safetensors"}}`,
			map[string][]byte{"model-00003.safetensors": writeST(nil, stT{"a", "F32", []int64{2}}, stT{"x", "U8", []int64{1}})}), nil, []string{CodeShardDuplicate, CodeShardIndex}},
		{"tensor in shard not in index", corpusShards(`{"weight_map":{"a":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}`, nil), nil, []string{CodeShardIndex}},
		{"tensor in index not in shard", corpusShards(`{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors","d":"model-00002-of-00002.safetensors"}}`, nil), nil, []string{CodeShardIndex}},
		{"shard index duplicate key", corpusShards(`{"weight_map":{"a":"model-00001-of-00002.safetensors","a":"model-00002-of-00002.safetensors"}}`, nil), nil, []string{CodeShardDuplicate}},
		// manifest
		{"manifest wrong hash", one("model.safetensors", valid), map[string]string{"model.safetensors": sha([]byte("x"))}, []string{CodeHashMismatch}},
		{"manifest missing file", one("model.safetensors", valid), map[string]string{"model.safetensors": sha(valid), "model-2.safetensors": sha(valid)}, []string{CodeHashMismatch}},
		// GGUF
		{"gguf bad version", one("m.gguf", func() []byte { b := validGGUF(); binary.LittleEndian.PutUint32(b[4:], 1); return b }()), nil, []string{CodeGGUF}},
		{"gguf tensor count bigger than file", one("m.gguf", ggufSetU64(8, 1<<40)), nil, []string{CodeGGUF}},
		{"gguf kv count bigger than file", one("m.gguf", ggufSetU64(16, ^uint64(0))), nil, []string{CodeGGUF}},
		{"gguf string length huge", one("m.gguf", ggufHugeString()), nil, []string{CodeGGUF}},
		{"gguf array length huge", one("m.gguf", writeGGUF(3, 32, []ggufKV{{"k", ggufArray, append(u32b(ggufU32), le64(1<<60)...)}}, nil, 0)), nil, []string{CodeGGUF}},
		{"gguf string array length huge", one("m.gguf", writeGGUF(3, 32, []ggufKV{{"k", ggufArray, append(u32b(ggufString), le64(1<<40)...)}}, nil, 0)), nil, []string{CodeGGUF}},
		{"gguf misaligned tensor offset", one("m.gguf", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{8}, 0, 8}}, 64)), nil, []string{CodeGGUF}},
		{"gguf tensor offset out of bounds", one("m.gguf", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{8}, 0, 1 << 40}}, 64)), nil, []string{CodeGGUF}},
		{"gguf tensor size out of bounds", one("m.gguf", writeGGUF(3, 32, nil, []ggufT{{"x", []uint64{1 << 30}, 0, 0}}, 64)), nil, []string{CodeGGUF}},
		{"gguf alignment not a power of two", one("m.gguf", writeGGUF(3, 32, []ggufKV{{"general.alignment", ggufU32, uint32(48)}}, nil, 0)), nil, []string{CodeGGUF}},
		{"gguf named but not gguf", one("m.gguf", []byte("hello")), nil, []string{CodeGGUF}},
		// SentencePiece
		{"sentencepiece length past end", one("tokenizer.model", []byte{0x0a, 0x7f, 0x0a, 0x01, 'a'}), nil, []string{CodeSentencePiece}},
		{"sentencepiece group wire type", one("spiece.model", append((&pb{}).bytes(spFieldPieces, spPiece("a", 0, 1)).b, 0x33)), nil, []string{CodeSentencePiece}},
		{"sentencepiece no pieces", one("tokenizer.model", (&pb{}).bytes(spFieldTrainerSpec, nil).b), nil, []string{CodeSentencePiece}},
		// not a recognised format at all
		{"unknown binary", one("blob.dat", []byte{0x00, 0x01, 0x02, 0x03}), nil, []string{CodeUnknownFormat}},
	}
	if len(cases) < 35 {
		t.Fatalf("corpus has %d inputs, want at least 35", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys := mapFS(c.files)
			var v Verdict
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			v = ScanDir(context.Background(), fsys, c.manifest)
			runtime.ReadMemStats(&after)
			if v.Accepted {
				t.Fatalf("accepted: %+v", v)
			}
			var got []string
			for _, r := range v.Reasons {
				if !slices.Contains(got, r.Code) {
					got = append(got, r.Code)
				}
			}
			sort.Strings(got)
			want := slices.Clone(c.want)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Fatalf("codes %v, want %v: %v", got, want, v.Reasons)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > maxScanAlloc {
				t.Fatalf("scan allocated %d bytes, bound %d", alloc, maxScanAlloc)
			}
		})
	}
}
