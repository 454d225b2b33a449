package scan

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

func scanST(b []byte) (FileReport, []Reason) {
	return ScanSafetensors(bytes.NewReader(b), int64(len(b)))
}

func TestSafetensorsValid(t *testing.T) {
	b := writeST(map[string]string{"format": "pt"},
		stT{"a.weight", "F32", []int64{4, 3}},
		stT{"b.bias", "BF16", []int64{5}},
		stT{"c", "I8", []int64{2, 2, 2}},
		stT{"empty", "F16", []int64{0, 7}},
		stT{"scalar", "F64", []int64{}},
	)
	rep, rs := scanST(b)
	if len(rs) != 0 {
		t.Fatalf("unexpected reasons %v", rs)
	}
	if rep.Params != 12+5+8+0+1 || rep.Tensors != 5 {
		t.Fatalf("params %d tensors %d", rep.Params, rep.Tensors)
	}
	want := map[string]int64{"F32": 12, "BF16": 5, "I8": 8, "F16": 0, "F64": 1}
	for k, v := range want {
		if rep.DTypes[k] != v {
			t.Fatalf("dtype %s = %d want %d (%v)", k, rep.DTypes[k], v, rep.DTypes)
		}
	}
}

func TestSafetensorsViolations(t *testing.T) {
	huge := make([]byte, 8)
	huge[3] = 0x10 // 256 MiB header length
	cases := []struct {
		name string
		file []byte
		code string
	}{
		{"too short", []byte{1, 2, 3}, CodeSTHeaderTooLarge},
		{"header too large", append(huge, []byte("{}")...), CodeSTHeaderTooLarge},
		{"header past EOF", rawST(`{}`, 0)[:9], CodeSTHeaderTooLarge},
		{"not brace", rawST(` {}`, 0), CodeSTHeaderInvalid},
		{"not json", rawST(`{"a":`, 0), CodeSTHeaderInvalid},
		{"not utf8", rawST("{\"\xff\":1}", 0), CodeSTHeaderInvalid},
		{"trailing json", rawST(`{}{}`, 0), CodeSTHeaderInvalid},
		{"duplicate key", rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), CodeSTDuplicateKey},
		{"duplicate nested key", rawST(`{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), CodeSTDuplicateKey},
		{"bad dtype", rawST(`{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`, 8), CodeSTBadDType},
		{"missing dtype", rawST(`{"a":{"shape":[1],"data_offsets":[0,8]}}`, 8), CodeSTBadDType},
		{"negative shape", rawST(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, 1), CodeSTShape},
		{"fractional shape", rawST(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, 1), CodeSTShape},
		{"overflowing shape", rawST(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, 1), CodeSTOverflow},
		{"overflowing dim", rawST(`{"a":{"dtype":"F32","shape":[99999999999999999999999],"data_offsets":[0,1]}}`, 1), CodeSTOverflow},
		{"overflowing bytes", rawST(`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,1]}}`, 1), CodeSTOverflow},
		{"hole", rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, 3), CodeSTOffsets},
		{"hole at start", rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), CodeSTOffsets},
		{"overlap", rawST(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3), CodeSTOffsets},
		{"unsorted", rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}}`, 1), CodeSTOffsets},
		{"span mismatch", rawST(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), CodeSTOffsets},
		{"trailing bytes", rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 5), CodeSTOffsets},
		{"past end", rawST(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, 4), CodeSTOffsets},
		{"bad offsets type", rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}}`, 1), CodeSTOffsets},
		{"metadata not object", rawST(`{"__metadata__":[1]}`, 0), CodeSTMetadata},
		{"metadata non-string", rawST(`{"__metadata__":{"a":1}}`, 0), CodeSTMetadata},
		{"metadata null", rawST(`{"__metadata__":{"a":null}}`, 0), CodeSTMetadata},
		{"empty name", rawST(`{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), CodeSTName},
		{"nul name", rawST(`{"a\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), CodeSTName},
		{"unknown field", rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, 1), CodeSTHeaderInvalid},
		{"tensor not object", rawST(`{"a":1}`, 0), CodeSTHeaderInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, rs := scanST(c.file)
			if !hasCode(rs, c.code) {
				t.Fatalf("want %s, got %v", c.code, rs)
			}
		})
	}
}

func FuzzScanSafetensors(f *testing.F) {
	f.Add(writeST(nil, stT{"a", "F32", []int64{2, 2}}))
	f.Add(writeST(map[string]string{"k": "v"}, stT{"a", "U8", []int64{3}}, stT{"b", "BF16", []int64{1, 2}}))
	f.Add(rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}}`, 1))
	f.Add(rawST(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, 1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{'})
	f.Add([]byte{})
	f.Add(writeST(nil, stT{"e", "F16", []int64{0, 3}}, stT{"s", "F64", nil}, stT{"x", "F8_E4M3", []int64{5}}))
	f.Add(rawST(`{"a":{"dtype":"U8","shape":[1],"shape":[1],"data_offsets":[0,1]}}`, 1))
	f.Add(rawST(`{"__metadata__":{"k":1}}`, 0))
	f.Add(rawST(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, 1))
	f.Add(rawST(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, 3))
	f.Add(append([]byte{2, 0, 0, 0, 0, 0, 0, 0}, "{}"...))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, rs := ScanSafetensors(bytes.NewReader(b), int64(len(b)))
		if len(rs) != 0 {
			return
		}
		if rep.Params < 0 {
			t.Fatalf("negative params")
		}
		var sum int64
		for _, n := range rep.DTypes {
			sum += n
		}
		if sum != rep.Params {
			t.Fatalf("dtypes sum %d, params %d", sum, rep.Params)
		}
		// an accepted file's tensor data fits exactly behind its header
		if n := binary.LittleEndian.Uint64(b[:8]); n > uint64(len(b)-8) || b[8] != '{' {
			t.Fatalf("accepted a header of %d bytes in a %d-byte file", n, len(b))
		}
	})
}

// eofReaderAt returns io.EOF together with a full read at the end of input,
// as io.ReaderAt allows.
type eofReaderAt struct{ b []byte }

func (e eofReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(e.b)) {
		return 0, io.EOF
	}
	n := copy(p, e.b[off:])
	if off+int64(n) == int64(len(e.b)) {
		return n, io.EOF
	}
	return n, nil
}

func TestSafetensorsEOFReaderAt(t *testing.T) {
	b := rawST(`{"__metadata__":{"a":"b"}}`, 0)
	if _, rs := ScanSafetensors(eofReaderAt{b}, int64(len(b))); len(rs) != 0 {
		t.Fatalf("%v", rs)
	}
	short := writeST(nil, stT{"a", "U8", []int64{4}})
	// size claims more than the reader holds: must fail, not panic
	if _, rs := ScanSafetensors(eofReaderAt{short[:12]}, int64(len(short))); len(rs) == 0 {
		t.Fatal("short reader accepted")
	}
}
