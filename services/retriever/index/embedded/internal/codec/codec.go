// Package codec is the embedded index's binary format: little-endian, varint lengths, CRC-32C checksums around
// every WAL record and over the whole snapshot. The index encodes chunks with it and the graph package encodes
// graphs with it.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
)

// Castagnoli is the CRC-32C table of every checksum.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt marks undecodable persisted data.
var ErrCorrupt = errors.New("corrupt index data")

// Encoder appends to Buf, optionally draining it into W when it grows large.
type Encoder struct {
	Buf []byte
	W   io.Writer // nil: everything stays in Buf
	Err error     // the first write error of Flush
}

// MaybeFlush drains Buf into W once it holds 1 MiB.
func (e *Encoder) MaybeFlush() {
	if e.W != nil && len(e.Buf) >= 1<<20 {
		e.Flush()
	}
}

// Flush drains Buf into W.
func (e *Encoder) Flush() {
	if e.W == nil || e.Err != nil {
		return
	}
	_, e.Err = e.W.Write(e.Buf)
	e.Buf = e.Buf[:0]
}

// Byte appends one byte.
func (e *Encoder) Byte(b byte) { e.Buf = append(e.Buf, b) }

// Uvarint appends an unsigned varint.
func (e *Encoder) Uvarint(x uint64) { e.Buf = binary.AppendUvarint(e.Buf, x) }

// Varint appends a signed varint.
func (e *Encoder) Varint(x int64) { e.Buf = binary.AppendVarint(e.Buf, x) }

// F64 appends a float64 (8 bytes).
func (e *Encoder) F64(x float64) {
	e.Buf = binary.LittleEndian.AppendUint64(e.Buf, math.Float64bits(x))
}

// Str appends a length-prefixed string.
func (e *Encoder) Str(s string) { e.Uvarint(uint64(len(s))); e.Buf = append(e.Buf, s...) }

// RawF32s appends floats without a length (4 bytes each).
func (e *Encoder) RawF32s(v []float32) {
	for _, x := range v {
		e.Buf = binary.LittleEndian.AppendUint32(e.Buf, math.Float32bits(x))
	}
}

// Boolean appends 1 or 0.
func (e *Encoder) Boolean(b bool) {
	if b {
		e.Byte(1)
	} else {
		e.Byte(0)
	}
}

// OptLen appends the length of an optional list, keeping nil distinct from empty: length+1, 0 for nil.
func (e *Encoder) OptLen(isNil bool, n int) {
	if isNil {
		e.Uvarint(0)
		return
	}
	e.Uvarint(uint64(n) + 1)
}

// ByteReader is what a Decoder reads from: a bytes.Reader for WAL records, a checksummed bufio.Reader for
// snapshots.
type ByteReader interface {
	io.Reader
	io.ByteReader
}

// Decoder reads what Encoder wrote; the first error sticks (in Err, wrapping ErrCorrupt) and zero values are
// returned after it.
type Decoder struct {
	R       ByteReader
	Err     error
	scratch []byte
}

// Fail records err (as ErrCorrupt) unless an error is already recorded.
func (d *Decoder) Fail(err error) {
	if d.Err == nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		d.Err = fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.Err != nil {
		return 0
	}
	b, err := d.R.ReadByte()
	if err != nil {
		d.Fail(err)
	}
	return b
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	x, err := binary.ReadUvarint(d.R)
	if err != nil {
		d.Fail(err)
	}
	return x
}

// Varint reads a signed varint.
func (d *Decoder) Varint() int64 {
	if d.Err != nil {
		return 0
	}
	x, err := binary.ReadVarint(d.R)
	if err != nil {
		d.Fail(err)
	}
	return x
}

// Count reads a length and checks it against a sanity bound.
func (d *Decoder) Count(limit uint64) int {
	n := d.Uvarint()
	if n > limit {
		d.Fail(fmt.Errorf("length %d exceeds %d", n, limit))
		return 0
	}
	return int(n)
}

// Bytes reads n bytes into a scratch buffer that the next call reuses.
func (d *Decoder) Bytes(n int) []byte {
	if d.Err != nil {
		return nil
	}
	if cap(d.scratch) < n {
		d.scratch = make([]byte, n)
	}
	b := d.scratch[:n]
	if _, err := io.ReadFull(d.R, b); err != nil {
		d.Fail(err)
		return nil
	}
	return b
}

// F64 reads a float64.
func (d *Decoder) F64() float64 {
	b := d.Bytes(8)
	if b == nil {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// Str reads a length-prefixed string.
func (d *Decoder) Str() string {
	n := d.Count(1 << 30)
	return string(d.Bytes(n))
}

// RawF32s reads len(dst) floats into dst.
func (d *Decoder) RawF32s(dst []float32) {
	b := d.Bytes(4 * len(dst))
	if b == nil {
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

// OptLen reads what Encoder.OptLen wrote.
func (d *Decoder) OptLen(limit uint64) (n int, isNil bool) {
	v := d.Count(limit + 1)
	if v == 0 {
		return 0, true
	}
	return v - 1, false
}

// CRCReader checksums everything read through it.
type CRCReader struct {
	R ByteReader
	H hash.Hash32
}

// Read implements io.Reader.
func (c *CRCReader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.H.Write(p[:n])
	return n, err
}

// ReadByte implements io.ByteReader.
func (c *CRCReader) ReadByte() (byte, error) {
	b, err := c.R.ReadByte()
	if err == nil {
		c.H.Write([]byte{b})
	}
	return b, err
}
