// Package gguf reads the header of a GGUF file (v2 and v3): its metadata
// key-value pairs and its tensor infos, never the tensor data. The file is
// untrusted: every count and length is bounded (Limits) and checked
// against the file's size before anything is allocated, so a hostile
// header fails with an error instead of exhausting memory or time.
//
// MoE summarises a mixture-of-experts model's expert layout from the
// header: experts per layer, experts used per token, and the bytes of the
// expert tensors of each layer (what an engine may leave on disk).
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
)

// ErrFormat is wrapped by every error about the file's content.
var ErrFormat = errors.New("gguf: malformed file")

// Limits bound what Read accepts. Zero fields take the defaults.
type Limits struct {
	// MaxTensors bounds the tensor count. Default 1<<20.
	MaxTensors uint64
	// MaxKV bounds the metadata entries. Default 1<<16.
	MaxKV uint64
	// MaxArrayLen bounds the elements of one metadata array. Default 1<<24.
	MaxArrayLen uint64
	// MaxString bounds one string (keys, values, tensor names). Default
	// 1<<20; strings kept as values are those up to MaxKeptString.
	MaxString uint64
	// MaxKeptString bounds the string values kept in Metadata; longer ones
	// (chat templates) are skipped and recorded by length only. Default
	// 64 KiB.
	MaxKeptString uint64
	// MaxHeader bounds the bytes of the header read (metadata and tensor
	// infos). Default 512 MiB.
	MaxHeader uint64
}

func (l Limits) withDefaults() Limits {
	def := func(v *uint64, d uint64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxTensors, 1<<20)
	def(&l.MaxKV, 1<<16)
	def(&l.MaxArrayLen, 1<<24)
	def(&l.MaxString, 1<<20)
	def(&l.MaxKeptString, 64<<10)
	def(&l.MaxHeader, 512<<20)
	return l
}

// ValueType is a metadata value's GGUF type.
type ValueType uint32

// Metadata value types.
const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
)

var scalarSize = map[ValueType]uint64{
	TypeUint8: 1, TypeInt8: 1, TypeBool: 1, TypeUint16: 2, TypeInt16: 2,
	TypeUint32: 4, TypeInt32: 4, TypeFloat32: 4, TypeUint64: 8, TypeInt64: 8, TypeFloat64: 8,
}

// Value is one metadata value. Scalars fill Int (signed and unsigned
// integers and bools; Unsigned tells which) or Float; strings fill Str
// (empty with StrLen set when longer than Limits.MaxKeptString); arrays
// are not kept, only their element type and length.
type Value struct {
	Type     ValueType
	Int      int64
	Unsigned uint64
	Float    float64
	Str      string
	StrLen   uint64
	// ElemType and Len describe an array.
	ElemType ValueType
	Len      uint64
}

// Tensor is one tensor info.
type Tensor struct {
	Name string
	// Dims is the shape, ne0 (the innermost) first.
	Dims []uint64
	// Type is the ggml type id.
	Type uint32
	// Offset is where the data starts, relative to File.DataOffset.
	Offset uint64
	// Bytes is the data's size: from the type's block size when the type
	// is known, else up to the next tensor's offset (or the end of file).
	Bytes uint64
}

// File is a GGUF header.
type File struct {
	Version    uint32
	Metadata   map[string]Value
	Tensors    []Tensor
	Alignment  uint64
	DataOffset uint64
	Size       uint64
}

// Open reads the header of the GGUF file at path with default limits.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s is not a regular file", path)
	}
	return Read(f, fi.Size(), Limits{})
}

// reader is a bounded sequential reader of the header.
type reader struct {
	br   *bufio.Reader
	pos  uint64
	size uint64 // file size
	max  uint64 // header bound
	lim  Limits
}

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// need checks that n more bytes exist in the file and the header bound.
func (r *reader) need(n uint64) error {
	if n > r.size-r.pos {
		return formatErr("truncated at byte %d (needs %d more bytes, file has %d)", r.pos, n, r.size)
	}
	if n > r.max-r.pos {
		return formatErr("header larger than %d bytes", r.max)
	}
	return nil
}

func (r *reader) read(n uint64) ([]byte, error) {
	if err := r.need(n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.br, b); err != nil {
		return nil, fmt.Errorf("gguf: read at byte %d: %w", r.pos, err)
	}
	r.pos += n
	return b, nil
}

func (r *reader) skip(n uint64) error {
	if err := r.need(n); err != nil {
		return err
	}
	for n > 0 {
		k := min(n, 1<<30)
		d, err := r.br.Discard(int(k))
		r.pos += uint64(d)
		if err != nil {
			return fmt.Errorf("gguf: read at byte %d: %w", r.pos, err)
		}
		n -= k
	}
	return nil
}

func (r *reader) u32() (uint32, error) {
	b, err := r.read(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u64() (uint64, error) {
	b, err := r.read(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// str reads a string; keep=false skips strings longer than MaxKeptString.
func (r *reader) str(keep bool) (string, uint64, error) {
	n, err := r.u64()
	if err != nil {
		return "", 0, err
	}
	if n > r.lim.MaxString {
		return "", n, formatErr("string of %d bytes at byte %d (limit %d)", n, r.pos, r.lim.MaxString)
	}
	if !keep && n > r.lim.MaxKeptString {
		return "", n, r.skip(n)
	}
	b, err := r.read(n)
	return string(b), n, err
}

// Read reads the header of a GGUF file of size bytes from r.
func Read(ra io.ReaderAt, size int64, lim Limits) (*File, error) {
	lim = lim.withDefaults()
	if size < 0 {
		return nil, formatErr("negative size")
	}
	r := &reader{
		br:   bufio.NewReaderSize(io.NewSectionReader(ra, 0, size), 1<<16),
		size: uint64(size),
		max:  min(uint64(size), lim.MaxHeader),
		lim:  lim,
	}
	magic, err := r.read(4)
	if err != nil {
		return nil, err
	}
	if string(magic) != "GGUF" {
		return nil, formatErr("no GGUF magic")
	}
	f := &File{Size: uint64(size), Metadata: map[string]Value{}, Alignment: 32}
	if f.Version, err = r.u32(); err != nil {
		return nil, err
	}
	if f.Version != 2 && f.Version != 3 {
		return nil, formatErr("version %d (2 and 3 are read)", f.Version)
	}
	nt, err := r.u64()
	if err != nil {
		return nil, err
	}
	nkv, err := r.u64()
	if err != nil {
		return nil, err
	}
	if nt > lim.MaxTensors {
		return nil, formatErr("%d tensors (limit %d)", nt, lim.MaxTensors)
	}
	if nkv > lim.MaxKV {
		return nil, formatErr("%d metadata entries (limit %d)", nkv, lim.MaxKV)
	}
	for i := uint64(0); i < nkv; i++ {
		key, _, err := r.str(true)
		if err != nil {
			return nil, fmt.Errorf("metadata entry %d: %w", i, err)
		}
		t, err := r.u32()
		if err != nil {
			return nil, err
		}
		v, err := r.value(ValueType(t), 0)
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", key, err)
		}
		f.Metadata[key] = v
	}
	if v, ok := f.Metadata["general.alignment"]; ok {
		a, ok := v.Uint()
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, formatErr("general.alignment is not a power of two up to 1 MiB")
		}
		f.Alignment = a
	}
	// Every tensor info takes at least 8+4+8+4+8 bytes: the count is
	// bounded by the file before anything is allocated for it.
	if nt > (r.size-r.pos)/32 {
		return nil, formatErr("%d tensors cannot fit in the file", nt)
	}
	f.Tensors = make([]Tensor, 0, nt)
	for i := uint64(0); i < nt; i++ {
		t, err := r.tensor()
		if err != nil {
			return nil, fmt.Errorf("tensor info %d: %w", i, err)
		}
		f.Tensors = append(f.Tensors, t)
	}
	f.DataOffset = alignUp(r.pos, f.Alignment)
	if f.DataOffset > f.Size {
		return nil, formatErr("data section starts past the end of the file")
	}
	if err := f.sizeTensors(); err != nil {
		return nil, err
	}
	return f, nil
}

func alignUp(n, a uint64) uint64 {
	if r := n % a; r != 0 {
		return n + a - r
	}
	return n
}

func (r *reader) value(t ValueType, depth int) (Value, error) {
	v := Value{Type: t}
	if sz, ok := scalarSize[t]; ok {
		b, err := r.read(sz)
		if err != nil {
			return v, err
		}
		switch t {
		case TypeUint8, TypeBool:
			v.Unsigned, v.Int = uint64(b[0]), int64(b[0])
		case TypeInt8:
			v.Int = int64(int8(b[0]))
		case TypeUint16:
			x := binary.LittleEndian.Uint16(b)
			v.Unsigned, v.Int = uint64(x), int64(x)
		case TypeInt16:
			v.Int = int64(int16(binary.LittleEndian.Uint16(b)))
		case TypeUint32:
			x := binary.LittleEndian.Uint32(b)
			v.Unsigned, v.Int = uint64(x), int64(x)
		case TypeInt32:
			v.Int = int64(int32(binary.LittleEndian.Uint32(b)))
		case TypeUint64:
			v.Unsigned = binary.LittleEndian.Uint64(b)
			v.Int = int64(min(v.Unsigned, math.MaxInt64))
		case TypeInt64:
			v.Int = int64(binary.LittleEndian.Uint64(b))
		case TypeFloat32:
			v.Float = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		case TypeFloat64:
			v.Float = math.Float64frombits(binary.LittleEndian.Uint64(b))
		}
		if v.Int >= 0 && v.Unsigned == 0 {
			v.Unsigned = uint64(v.Int)
		}
		return v, nil
	}
	switch t {
	case TypeString:
		s, n, err := r.str(false)
		v.Str, v.StrLen = s, n
		return v, err
	case TypeArray:
		if depth > 0 {
			return v, formatErr("nested arrays")
		}
		et, err := r.u32()
		if err != nil {
			return v, err
		}
		n, err := r.u64()
		if err != nil {
			return v, err
		}
		v.ElemType, v.Len = ValueType(et), n
		if n > r.lim.MaxArrayLen {
			return v, formatErr("array of %d elements (limit %d)", n, r.lim.MaxArrayLen)
		}
		if sz, ok := scalarSize[v.ElemType]; ok {
			hi, total := bits.Mul64(n, sz)
			if hi != 0 {
				return v, formatErr("array size overflows")
			}
			return v, r.skip(total)
		}
		if v.ElemType != TypeString {
			return v, formatErr("array of element type %d", et)
		}
		if n > (r.size-r.pos)/8 { // each string takes at least its length
			return v, formatErr("array of %d strings cannot fit in the file", n)
		}
		for i := uint64(0); i < n; i++ {
			sn, err := r.u64()
			if err != nil {
				return v, err
			}
			if sn > r.lim.MaxString {
				return v, formatErr("string of %d bytes in an array (limit %d)", sn, r.lim.MaxString)
			}
			if err := r.skip(sn); err != nil {
				return v, err
			}
		}
		return v, nil
	}
	return v, formatErr("value type %d", t)
}

// maxDims is ggml's GGML_MAX_DIMS.
const maxDims = 4

func (r *reader) tensor() (Tensor, error) {
	var t Tensor
	name, _, err := r.str(true)
	if err != nil {
		return t, err
	}
	t.Name = name
	nd, err := r.u32()
	if err != nil {
		return t, err
	}
	if nd == 0 || nd > maxDims {
		return t, formatErr("tensor %q has %d dimensions", name, nd)
	}
	t.Dims = make([]uint64, nd)
	for i := range t.Dims {
		if t.Dims[i], err = r.u64(); err != nil {
			return t, err
		}
	}
	if t.Type, err = r.u32(); err != nil {
		return t, err
	}
	if t.Offset, err = r.u64(); err != nil {
		return t, err
	}
	return t, nil
}

// ggml types: block size in elements and bytes per block.
var ggmlTypes = map[uint32][2]uint64{
	0: {1, 4}, 1: {1, 2}, 2: {32, 18}, 3: {32, 20}, 6: {32, 22}, 7: {32, 24},
	8: {32, 34}, 9: {32, 36}, 10: {256, 84}, 11: {256, 110}, 12: {256, 144},
	13: {256, 176}, 14: {256, 210}, 15: {256, 292}, 16: {256, 66}, 17: {256, 74},
	18: {256, 98}, 19: {256, 50}, 20: {32, 18}, 21: {256, 110}, 22: {256, 82},
	23: {256, 136}, 24: {1, 1}, 25: {1, 2}, 26: {1, 4}, 27: {1, 8}, 28: {1, 8},
	29: {256, 56}, 30: {1, 2}, 34: {256, 54}, 35: {256, 66}, 39: {32, 17},
}

// sizeTensors sets each tensor's Bytes and checks it lies in the file.
func (f *File) sizeTensors() error {
	avail := f.Size - f.DataOffset
	// ends[i] is where the data after tensor i's start begins: the next
	// offset in file order, for types of unknown size.
	order := make([]uint64, len(f.Tensors))
	for i, t := range f.Tensors {
		order[i] = t.Offset
	}
	next := nextOffsets(order, avail)
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Offset > avail {
			return formatErr("tensor %q starts past the end of the file", t.Name)
		}
		n := uint64(1)
		for _, d := range t.Dims {
			hi, lo := bits.Mul64(n, d)
			if hi != 0 {
				return formatErr("tensor %q has too many elements", t.Name)
			}
			n = lo
		}
		if bt, ok := ggmlTypes[t.Type]; ok {
			if n%bt[0] != 0 {
				return formatErr("tensor %q: %d elements are not whole blocks of %d", t.Name, n, bt[0])
			}
			hi, b := bits.Mul64(n/bt[0], bt[1])
			if hi != 0 {
				return formatErr("tensor %q is too large", t.Name)
			}
			t.Bytes = b
		} else {
			t.Bytes = next[i] - t.Offset
		}
		if t.Bytes > avail-t.Offset {
			return formatErr("tensor %q (%d bytes at %d) extends past the end of the file", t.Name, t.Bytes, t.Offset)
		}
	}
	return nil
}

// nextOffsets returns, for each offset, the smallest offset greater than
// it, or end.
func nextOffsets(offs []uint64, end uint64) []uint64 {
	sorted := append([]uint64(nil), offs...)
	slices.Sort(sorted)
	out := make([]uint64, len(offs))
	for i, o := range offs {
		// binary search for the first value > o
		lo, hi := 0, len(sorted)
		for lo < hi {
			m := (lo + hi) / 2
			if sorted[m] <= o {
				lo = m + 1
			} else {
				hi = m
			}
		}
		out[i] = end
		if lo < len(sorted) && sorted[lo] < end {
			out[i] = sorted[lo]
		}
		if out[i] < o {
			out[i] = o
		}
	}
	return out
}

// Uint returns an integer value that is not negative.
func (v Value) Uint() (uint64, bool) {
	switch v.Type {
	case TypeUint8, TypeUint16, TypeUint32, TypeUint64:
		return v.Unsigned, true
	case TypeInt8, TypeInt16, TypeInt32, TypeInt64:
		if v.Int >= 0 {
			return uint64(v.Int), true
		}
	}
	return 0, false
}

// Uint returns the non-negative integer metadata value of key.
func (f *File) Uint(key string) (uint64, bool) {
	v, ok := f.Metadata[key]
	if !ok {
		return 0, false
	}
	return v.Uint()
}

// String returns the string metadata value of key (false when absent,
// not a string, or too long to have been kept).
func (f *File) String(key string) (string, bool) {
	v, ok := f.Metadata[key]
	if !ok || v.Type != TypeString || uint64(len(v.Str)) != v.StrLen {
		return "", false
	}
	return v.Str, true
}

// Architecture is general.architecture ("llama", "qwen3moe", ...).
func (f *File) Architecture() string {
	s, _ := f.String("general.architecture")
	return s
}
