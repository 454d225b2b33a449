package scan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sort"
)

type ggmlType struct {
	name  string
	block uint64
	size  uint64
}

var ggmlTypes = map[uint32]ggmlType{
	0:  {"F32", 1, 4},
	1:  {"F16", 1, 2},
	2:  {"Q4_0", 32, 18},
	3:  {"Q4_1", 32, 20},
	6:  {"Q5_0", 32, 22},
	7:  {"Q5_1", 32, 24},
	8:  {"Q8_0", 32, 34},
	9:  {"Q8_1", 32, 36},
	10: {"Q2_K", 256, 84},
	11: {"Q3_K", 256, 110},
	12: {"Q4_K", 256, 144},
	13: {"Q5_K", 256, 176},
	14: {"Q6_K", 256, 210},
	15: {"Q8_K", 256, 292},
	24: {"I8", 1, 1},
	25: {"I16", 1, 2},
	26: {"I32", 1, 4},
	27: {"I64", 1, 8},
	28: {"F64", 1, 8},
	30: {"BF16", 1, 2},
}

// GGUF metadata value types.
const (
	ggufU8 = iota
	ggufI8
	ggufU16
	ggufI16
	ggufU32
	ggufI32
	ggufF32
	ggufBool
	ggufString
	ggufArray
	ggufU64
	ggufI64
	ggufF64
)

var ggufScalarSize = map[uint32]uint64{
	ggufU8: 1, ggufI8: 1, ggufBool: 1, ggufU16: 2, ggufI16: 2,
	ggufU32: 4, ggufI32: 4, ggufF32: 4, ggufU64: 8, ggufI64: 8, ggufF64: 8,
}

const (
	ggufMaxString  = 64 << 20
	ggufMaxDims    = 4
	ggufMaxNesting = 2
)

type ggufReader struct {
	r    io.ReaderAt
	size uint64
	pos  uint64
}

var errGGUFEOF = errors.New("read past end of file")

func (g *ggufReader) bytes(n uint64) ([]byte, error) {
	if n > g.size-g.pos {
		return nil, errGGUFEOF
	}
	b := make([]byte, n)
	if err := readAtFull(g.r, b, int64(g.pos)); err != nil {
		return nil, err
	}
	g.pos += n
	return b, nil
}

func (g *ggufReader) skip(n uint64) error {
	if n > g.size-g.pos {
		return errGGUFEOF
	}
	g.pos += n
	return nil
}

func (g *ggufReader) u32() (uint32, error) {
	b, err := g.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (g *ggufReader) u64() (uint64, error) {
	b, err := g.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (g *ggufReader) str() (string, error) {
	n, err := g.u64()
	if err != nil {
		return "", err
	}
	if n > ggufMaxString {
		return "", fmt.Errorf("string length %d too large", n)
	}
	b, err := g.bytes(n)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// value reads (or skips) a metadata value. Scalars of interest are returned.
func (g *ggufReader) value(typ uint32, depth int) (any, error) {
	if sz, ok := ggufScalarSize[typ]; ok {
		b, err := g.bytes(sz)
		if err != nil {
			return nil, err
		}
		switch typ {
		case ggufU32:
			return uint64(binary.LittleEndian.Uint32(b)), nil
		case ggufU64:
			return binary.LittleEndian.Uint64(b), nil
		case ggufU16:
			return uint64(binary.LittleEndian.Uint16(b)), nil
		case ggufU8:
			return uint64(b[0]), nil
		}
		return nil, nil
	}
	switch typ {
	case ggufString:
		return g.str()
	case ggufArray:
		if depth >= ggufMaxNesting {
			return nil, errors.New("arrays nested too deeply")
		}
		et, err := g.u32()
		if err != nil {
			return nil, err
		}
		n, err := g.u64()
		if err != nil {
			return nil, err
		}
		if sz, ok := ggufScalarSize[et]; ok {
			hi, total := bits.Mul64(n, sz)
			if hi != 0 {
				return nil, errors.New("array length overflows")
			}
			return nil, g.skip(total)
		}
		// strings take at least 8 bytes, arrays at least 12
		if n > (g.size-g.pos)/8 {
			return nil, fmt.Errorf("array length %d exceeds file size", n)
		}
		if et != ggufString && et != ggufArray {
			return nil, fmt.Errorf("unknown array element type %d", et)
		}
		for i := uint64(0); i < n; i++ {
			if _, err := g.value(et, depth+1); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	return nil, fmt.Errorf("unknown value type %d", typ)
}

// ScanGGUF validates the structure of a GGUF (v2/v3) file.
func ScanGGUF(r io.ReaderAt, size int64) (FileReport, []Reason) {
	rep := FileReport{Size: size, Format: "gguf", DTypes: map[string]int64{}}
	fail := func(format string, args ...any) (FileReport, []Reason) {
		return rep, []Reason{{Code: CodeGGUF, Message: fmt.Sprintf(format, args...)}}
	}
	if size < 24 {
		return fail("file too short for a GGUF header")
	}
	g := &ggufReader{r: r, size: uint64(size)}
	magic, err := g.bytes(4)
	if err != nil {
		return fail("reading magic: %v", err)
	}
	if string(magic) != "GGUF" {
		return fail("bad magic %q", magic)
	}
	version, _ := g.u32()
	if version != 2 && version != 3 {
		return fail("unsupported version %d", version)
	}
	nTensors, _ := g.u64()
	nKV, _ := g.u64()
	rest := g.size - g.pos
	if nTensors > rest/24 {
		return fail("tensor count %d exceeds what the file can hold", nTensors)
	}
	if nKV > rest/13 {
		return fail("metadata count %d exceeds what the file can hold", nKV)
	}
	alignment := uint64(32)
	seen := map[string]bool{}
	for i := uint64(0); i < nKV; i++ {
		key, err := g.str()
		if err != nil {
			return fail("metadata key %d: %v", i, err)
		}
		if seen[key] {
			return fail("duplicate metadata key %q", key)
		}
		seen[key] = true
		typ, err := g.u32()
		if err != nil {
			return fail("metadata %q type: %v", key, err)
		}
		v, err := g.value(typ, 0)
		if err != nil {
			return fail("metadata %q: %v", key, err)
		}
		switch key {
		case "general.alignment":
			a, ok := v.(uint64)
			if !ok || typ != ggufU32 {
				return fail("general.alignment must be uint32")
			}
			if a == 0 || a&(a-1) != 0 {
				return fail("general.alignment %d is not a power of two", a)
			}
			alignment = a
		case "general.license":
			s, ok := v.(string)
			if !ok {
				return fail("general.license must be a string")
			}
			rep.License = s
		case "tokenizer.chat_template":
			if s, ok := v.(string); ok {
				rep.ChatTemplate = s
			}
		}
	}
	type tinfo struct {
		name          string
		offset, bytes uint64
	}
	var infos []tinfo // grown as parsed; never sized from the header's claim
	names := map[string]bool{}
	for i := uint64(0); i < nTensors; i++ {
		name, err := g.str()
		if err != nil {
			return fail("tensor %d name: %v", i, err)
		}
		if name == "" || names[name] {
			return fail("tensor %d: empty or duplicate name %q", i, name)
		}
		names[name] = true
		nd, err := g.u32()
		if err != nil {
			return fail("tensor %q: %v", name, err)
		}
		if nd == 0 || nd > ggufMaxDims {
			return fail("tensor %q: %d dimensions", name, nd)
		}
		elems := uint64(1)
		var ne0 uint64
		for d := uint32(0); d < nd; d++ {
			dim, err := g.u64()
			if err != nil {
				return fail("tensor %q: %v", name, err)
			}
			if d == 0 {
				ne0 = dim
			}
			hi, lo := bits.Mul64(elems, dim)
			if hi != 0 || lo > 1<<62 {
				return fail("tensor %q: element count overflows", name)
			}
			elems = lo
		}
		typ, err := g.u32()
		if err != nil {
			return fail("tensor %q: %v", name, err)
		}
		gt, ok := ggmlTypes[typ]
		if !ok {
			return fail("tensor %q: unknown ggml type %d", name, typ)
		}
		if ne0%gt.block != 0 {
			return fail("tensor %q: first dimension %d not a multiple of block size %d", name, ne0, gt.block)
		}
		off, err := g.u64()
		if err != nil {
			return fail("tensor %q: %v", name, err)
		}
		if off%alignment != 0 {
			return fail("tensor %q: offset %d not aligned to %d", name, off, alignment)
		}
		hi, nbytes := bits.Mul64(elems/gt.block, gt.size)
		if hi != 0 {
			return fail("tensor %q: byte size overflows", name)
		}
		infos = append(infos, tinfo{name, off, nbytes})
		rep.Tensors++
		rep.Params += int64(elems)
		if rep.Params < 0 {
			return fail("parameter count overflows")
		}
		rep.DTypes[gt.name] += int64(elems)
	}
	dataStart := g.pos
	if rem := dataStart % alignment; rem != 0 {
		if alignment-rem > g.size-dataStart && nTensors > 0 {
			return fail("data section starts past end of file")
		}
		dataStart += alignment - rem
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].offset < infos[j].offset })
	var prevEnd uint64
	for i, t := range infos {
		if dataStart > g.size || t.offset > g.size-dataStart || t.bytes > g.size-dataStart-t.offset {
			return fail("tensor %q data [%d,+%d) beyond end of file", t.name, t.offset, t.bytes)
		}
		if i > 0 && t.offset < prevEnd {
			return fail("tensor %q data overlaps the previous tensor", t.name)
		}
		prevEnd = t.offset + t.bytes
	}
	return rep, nil
}

// readAtFull reads len(b) bytes at off, accepting io.EOF alongside a full
// read as io.ReaderAt permits.
func readAtFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) && (err == nil || errors.Is(err, io.EOF)) {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}
