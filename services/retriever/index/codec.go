package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"slices"
)

// The embedded index persists chunks and graphs in a small binary format: little-endian, varint lengths,
// CRC-32C checksums around every WAL record and over the whole snapshot.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks undecodable persisted data.
var errCorrupt = errors.New("corrupt index data")

// encoder appends to a buffer, optionally draining it into w when it grows large.
type encoder struct {
	buf []byte
	w   io.Writer
	err error
}

func (e *encoder) maybeFlush() {
	if e.w != nil && len(e.buf) >= 1<<20 {
		e.flush()
	}
}

func (e *encoder) flush() {
	if e.w == nil || e.err != nil {
		return
	}
	_, e.err = e.w.Write(e.buf)
	e.buf = e.buf[:0]
}

func (e *encoder) byte(b byte)      { e.buf = append(e.buf, b) }
func (e *encoder) uvarint(x uint64) { e.buf = binary.AppendUvarint(e.buf, x) }
func (e *encoder) varint(x int64)   { e.buf = binary.AppendVarint(e.buf, x) }
func (e *encoder) u32(x uint32)     { e.buf = binary.LittleEndian.AppendUint32(e.buf, x) }
func (e *encoder) f64(x float64) {
	e.buf = binary.LittleEndian.AppendUint64(e.buf, math.Float64bits(x))
}
func (e *encoder) str(s string) { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }
func (e *encoder) rawF32s(v []float32) {
	for _, x := range v {
		e.buf = binary.LittleEndian.AppendUint32(e.buf, math.Float32bits(x))
	}
}

func (e *encoder) boolean(b bool) {
	if b {
		e.byte(1)
	} else {
		e.byte(0)
	}
}

// optional lists keep nil distinct from empty: length+1, 0 for nil.
func (e *encoder) optLen(isNil bool, n int) {
	if isNil {
		e.uvarint(0)
		return
	}
	e.uvarint(uint64(n) + 1)
}

const (
	attrString byte = 1
	attrNumber byte = 2
	attrBool   byte = 3
)

// chunk encodes a prepared chunk; withDense includes the (normalised) vector.
func (e *encoder) chunk(c *Chunk, withDense bool) {
	e.str(c.ID)
	e.str(c.Tenant)
	e.str(c.StoreID)
	e.str(c.FileID)
	e.varint(int64(c.Index))
	e.str(c.Text)
	if withDense && c.Dense != nil {
		e.uvarint(uint64(len(c.Dense)))
		e.rawF32s(c.Dense)
	} else {
		e.uvarint(0)
	}
	terms := make([]string, 0, len(c.Terms))
	for t := range c.Terms {
		terms = append(terms, t)
	}
	slices.Sort(terms)
	e.uvarint(uint64(len(terms)))
	for _, t := range terms {
		e.str(t)
		e.uvarint(uint64(c.Terms[t]))
	}
	e.uvarint(uint64(c.Length))
	e.optLen(c.Pages == nil, len(c.Pages))
	for _, p := range c.Pages {
		e.varint(int64(p))
	}
	e.optLen(c.HeadingPath == nil, len(c.HeadingPath))
	for _, h := range c.HeadingPath {
		e.str(h)
	}
	keys := make([]string, 0, len(c.Attributes))
	for k := range c.Attributes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.str(k)
		switch v := c.Attributes[k].(type) {
		case string:
			e.byte(attrString)
			e.str(v)
		case float64:
			e.byte(attrNumber)
			e.f64(v)
		case bool:
			e.byte(attrBool)
			e.boolean(v)
		}
	}
}

// byteReader is what the decoder reads from: a bytes.Reader for WAL records, a checksummed bufio.Reader for
// snapshots.
type byteReader interface {
	io.Reader
	io.ByteReader
}

// decoder reads what encoder wrote; the first error sticks and zero values are returned after it.
type decoder struct {
	r       byteReader
	err     error
	scratch []byte
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		d.err = fmt.Errorf("%w: %w", errCorrupt, err)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	b, err := d.r.ReadByte()
	if err != nil {
		d.fail(err)
	}
	return b
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.fail(err)
	}
	return x
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	x, err := binary.ReadVarint(d.r)
	if err != nil {
		d.fail(err)
	}
	return x
}

// count reads a length and checks it against a sanity bound.
func (d *decoder) count(limit uint64) int {
	n := d.uvarint()
	if n > limit {
		d.fail(fmt.Errorf("length %d exceeds %d", n, limit))
		return 0
	}
	return int(n)
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if cap(d.scratch) < n {
		d.scratch = make([]byte, n)
	}
	b := d.scratch[:n]
	if _, err := io.ReadFull(d.r, b); err != nil {
		d.fail(err)
		return nil
	}
	return b
}

func (d *decoder) u32() uint32 {
	b := d.bytes(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (d *decoder) f64() float64 {
	b := d.bytes(8)
	if b == nil {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

func (d *decoder) str() string {
	n := d.count(1 << 30)
	return string(d.bytes(n))
}

// rawF32s reads n floats into dst (len n).
func (d *decoder) rawF32s(dst []float32) {
	b := d.bytes(4 * len(dst))
	if b == nil {
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

func (d *decoder) optLen(limit uint64) (n int, isNil bool) {
	v := d.count(limit + 1)
	if v == 0 {
		return 0, true
	}
	return v - 1, false
}

func (d *decoder) chunk() Chunk {
	var c Chunk
	c.ID = d.str()
	c.Tenant = d.str()
	c.StoreID = d.str()
	c.FileID = d.str()
	c.Index = int(d.varint())
	c.Text = d.str()
	if n := d.count(1 << 16); n > 0 {
		c.Dense = make([]float32, n)
		d.rawF32s(c.Dense)
	}
	if n := d.count(1 << 24); n > 0 {
		c.Terms = make(map[string]uint32, n)
		for range n {
			t := d.str()
			c.Terms[t] = uint32(d.uvarint())
		}
	}
	c.Length = int(d.uvarint())
	if n, isNil := d.optLen(1 << 24); !isNil {
		c.Pages = make([]int, n)
		for i := range c.Pages {
			c.Pages[i] = int(d.varint())
		}
	}
	if n, isNil := d.optLen(1 << 16); !isNil {
		c.HeadingPath = make([]string, n)
		for i := range c.HeadingPath {
			c.HeadingPath[i] = d.str()
		}
	}
	if n := d.count(MaxAttributes); n > 0 {
		c.Attributes = make(map[string]any, n)
		for range n {
			k := d.str()
			switch t := d.byte(); t {
			case attrString:
				c.Attributes[k] = d.str()
			case attrNumber:
				c.Attributes[k] = d.f64()
			case attrBool:
				c.Attributes[k] = d.byte() != 0
			default:
				d.fail(fmt.Errorf("attribute type %d", t))
			}
		}
	}
	return c
}

// crcReader checksums everything read through it.
type crcReader struct {
	r interface {
		io.Reader
		io.ByteReader
	}
	h hash.Hash32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	return n, err
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.h.Write([]byte{b})
	}
	return b, err
}
