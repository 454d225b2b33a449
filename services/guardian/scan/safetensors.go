package scan

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// safetensorsDTypes is the explicit allowlist of dtypes and their byte sizes.
var safetensorsDTypes = map[string]uint64{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1,
	"U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}

type stTensor struct {
	name       string
	begin, end uint64
	bytes      uint64
}

func stReason(code, msg string) []Reason {
	return []Reason{{Code: code, Message: msg}}
}

func scanSafetensors(r io.ReaderAt, size int64) (FileReport, []string, []Reason) {
	rep := FileReport{Size: size, Format: "safetensors", DTypes: map[string]int64{}}
	if size < 8 {
		return rep, nil, stReason(CodeSTHeaderTooLarge, "file shorter than the 8-byte header length")
	}
	var lenBuf [8]byte
	if err := readAtFull(r, lenBuf[:], 0); err != nil {
		return rep, nil, stReason(CodeReadError, "reading header length: "+err.Error())
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxSafetensorsHeader {
		return rep, nil, stReason(CodeSTHeaderTooLarge, fmt.Sprintf("header length %d exceeds %d", n, maxSafetensorsHeader))
	}
	if n > uint64(size-8) {
		return rep, nil, stReason(CodeSTHeaderTooLarge, fmt.Sprintf("header length %d exceeds file size %d", n, size))
	}
	if n == 0 {
		return rep, nil, stReason(CodeSTHeaderInvalid, "empty header")
	}
	hdr := make([]byte, n)
	if err := readAtFull(r, hdr, 8); err != nil {
		return rep, nil, stReason(CodeReadError, "reading header: "+err.Error())
	}
	if hdr[0] != '{' {
		return rep, nil, stReason(CodeSTHeaderInvalid, "header does not start with '{'")
	}
	if !utf8.Valid(hdr) {
		return rep, nil, stReason(CodeSTHeaderInvalid, "header is not valid UTF-8")
	}
	v, err := decodeStrict(hdr)
	if err != nil {
		var dup *errDuplicateKey
		if errors.As(err, &dup) {
			return rep, nil, stReason(CodeSTDuplicateKey, err.Error())
		}
		return rep, nil, stReason(CodeSTHeaderInvalid, "header is not valid JSON: "+err.Error())
	}
	top, ok := v.(*jsonObject)
	if !ok {
		return rep, nil, stReason(CodeSTHeaderInvalid, "header is not a JSON object")
	}
	dataLen := uint64(size) - 8 - n
	var reasons []Reason
	var tensors []stTensor
	var names []string
	for _, name := range top.Keys {
		val := top.Values[name]
		if name == "__metadata__" {
			if err := checkMetadata(val); err != nil {
				reasons = append(reasons, Reason{Code: CodeSTMetadata, Message: err.Error()})
			}
			continue
		}
		if name == "" || strings.ContainsRune(name, 0) {
			reasons = append(reasons, Reason{Code: CodeSTName, Message: fmt.Sprintf("invalid tensor name %q", name)})
			continue
		}
		t, dtype, elems, rs := checkTensor(name, val)
		if len(rs) > 0 {
			reasons = append(reasons, rs...)
			continue
		}
		tensors = append(tensors, t)
		names = append(names, name)
		rep.Tensors++
		if rep.Params+int64(elems) < rep.Params || elems > 1<<62 {
			reasons = append(reasons, Reason{Code: CodeSTOverflow, Message: "parameter count overflows"})
			continue
		}
		rep.Params += int64(elems)
		rep.DTypes[dtype] += int64(elems)
	}
	if len(reasons) > 0 {
		return rep, names, reasons
	}
	sort.Slice(tensors, func(i, j int) bool {
		if tensors[i].begin != tensors[j].begin {
			return tensors[i].begin < tensors[j].begin
		}
		return tensors[i].end < tensors[j].end
	})
	var expect uint64
	for _, t := range tensors {
		switch {
		case t.begin < expect:
			reasons = append(reasons, Reason{Code: CodeSTOffsets, Message: fmt.Sprintf("tensor %q [%d,%d) overlaps previous data ending at %d", t.name, t.begin, t.end, expect)})
		case t.begin > expect:
			reasons = append(reasons, Reason{Code: CodeSTOffsets, Message: fmt.Sprintf("hole before tensor %q: [%d,%d)", t.name, expect, t.begin)})
		}
		if t.end-t.begin != t.bytes {
			reasons = append(reasons, Reason{Code: CodeSTOffsets, Message: fmt.Sprintf("tensor %q spans %d bytes, shape×dtype needs %d", t.name, t.end-t.begin, t.bytes)})
		}
		if t.end > expect {
			expect = t.end
		}
	}
	if len(reasons) == 0 && expect != dataLen {
		if expect < dataLen {
			reasons = append(reasons, Reason{Code: CodeSTOffsets, Message: fmt.Sprintf("%d trailing bytes after the last tensor", dataLen-expect)})
		} else {
			reasons = append(reasons, Reason{Code: CodeSTOffsets, Message: fmt.Sprintf("tensor data ends at %d, beyond data length %d", expect, dataLen)})
		}
	}
	return rep, names, reasons
}

func checkMetadata(v any) error {
	obj, ok := v.(*jsonObject)
	if !ok {
		return errors.New("__metadata__ is not an object")
	}
	for _, k := range obj.Keys {
		if _, ok := obj.Values[k].(string); !ok {
			return fmt.Errorf("__metadata__[%q] is not a string", k)
		}
	}
	return nil
}

func parseUint(v any) (uint64, bool, bool) { // value, ok, negative
	num, ok := v.(json.Number)
	if !ok {
		return 0, false, false
	}
	s := string(num)
	if strings.HasPrefix(s, "-") {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return 0, false, true
		}
		return 0, false, false
	}
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, false
	}
	return u, true, false
}

func checkTensor(name string, v any) (stTensor, string, uint64, []Reason) {
	t := stTensor{name: name}
	bad := func(code, format string, args ...any) (stTensor, string, uint64, []Reason) {
		return t, "", 0, []Reason{{Code: code, Message: fmt.Sprintf("tensor %q: ", name) + fmt.Sprintf(format, args...)}}
	}
	obj, ok := v.(*jsonObject)
	if !ok {
		return bad(CodeSTHeaderInvalid, "entry is not an object")
	}
	for _, k := range obj.Keys {
		if k != "dtype" && k != "shape" && k != "data_offsets" {
			return bad(CodeSTHeaderInvalid, "unknown field %q", k)
		}
	}
	dtype, ok := obj.Values["dtype"].(string)
	if !ok {
		return bad(CodeSTBadDType, "missing or non-string dtype")
	}
	dsize, ok := safetensorsDTypes[dtype]
	if !ok {
		return bad(CodeSTBadDType, "dtype %q not allowed", dtype)
	}
	shape, ok := obj.Values["shape"].([]any)
	if !ok {
		return bad(CodeSTShape, "missing or non-array shape")
	}
	elems := uint64(1)
	for _, d := range shape {
		u, ok, neg := parseUint(d)
		if neg {
			return bad(CodeSTShape, "negative dimension %v", d)
		}
		if !ok {
			_, isNum := d.(json.Number)
			if isNum && !strings.ContainsAny(string(d.(json.Number)), ".eE") {
				return bad(CodeSTOverflow, "dimension %v overflows", d)
			}
			return bad(CodeSTShape, "dimension %v is not a non-negative integer", d)
		}
		hi, lo := bits.Mul64(elems, u)
		if hi != 0 {
			return bad(CodeSTOverflow, "element count overflows")
		}
		elems = lo
	}
	hi, nbytes := bits.Mul64(elems, dsize)
	if hi != 0 || elems > 1<<62 {
		return bad(CodeSTOverflow, "byte size overflows")
	}
	offs, ok := obj.Values["data_offsets"].([]any)
	if !ok || len(offs) != 2 {
		return bad(CodeSTOffsets, "data_offsets must be an array of two integers")
	}
	b, ok1, _ := parseUint(offs[0])
	e, ok2, _ := parseUint(offs[1])
	if !ok1 || !ok2 {
		return bad(CodeSTOffsets, "data_offsets must be non-negative integers")
	}
	if b > e {
		return bad(CodeSTOffsets, "data_offsets [%d,%d] not sorted", b, e)
	}
	t.begin, t.end, t.bytes = b, e, nbytes
	return t, dtype, elems, nil
}
