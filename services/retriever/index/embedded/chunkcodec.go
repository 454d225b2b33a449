package embedded

import (
	"fmt"
	"slices"

	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/internal/codec"
)

// Chunks are stored in WAL records (with their vector) and in snapshots (the vector lives in the graph).

const (
	attrString byte = 1
	attrNumber byte = 2
	attrBool   byte = 3
)

// encodeChunk encodes a prepared chunk; withDense includes the (normalised) vector.
func encodeChunk(e *codec.Encoder, c *index.Chunk, withDense bool) {
	e.Str(c.ID)
	e.Str(c.Tenant)
	e.Str(c.StoreID)
	e.Str(c.FileID)
	e.Varint(int64(c.Index))
	e.Str(c.Text)
	if withDense && c.Dense != nil {
		e.Uvarint(uint64(len(c.Dense)))
		e.RawF32s(c.Dense)
	} else {
		e.Uvarint(0)
	}
	terms := make([]string, 0, len(c.Terms))
	for t := range c.Terms {
		terms = append(terms, t)
	}
	slices.Sort(terms)
	e.Uvarint(uint64(len(terms)))
	for _, t := range terms {
		e.Str(t)
		e.Uvarint(uint64(c.Terms[t]))
	}
	e.Uvarint(uint64(c.Length))
	e.OptLen(c.Pages == nil, len(c.Pages))
	for _, p := range c.Pages {
		e.Varint(int64(p))
	}
	e.OptLen(c.HeadingPath == nil, len(c.HeadingPath))
	for _, h := range c.HeadingPath {
		e.Str(h)
	}
	keys := make([]string, 0, len(c.Attributes))
	for k := range c.Attributes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.Uvarint(uint64(len(keys)))
	for _, k := range keys {
		e.Str(k)
		switch v := c.Attributes[k].(type) {
		case string:
			e.Byte(attrString)
			e.Str(v)
		case float64:
			e.Byte(attrNumber)
			e.F64(v)
		case bool:
			e.Byte(attrBool)
			e.Boolean(v)
		}
	}
}

// decodeChunk reads what encodeChunk wrote.
func decodeChunk(d *codec.Decoder) index.Chunk {
	var c index.Chunk
	c.ID = d.Str()
	c.Tenant = d.Str()
	c.StoreID = d.Str()
	c.FileID = d.Str()
	c.Index = int(d.Varint())
	c.Text = d.Str()
	if n := d.Count(1 << 16); n > 0 {
		c.Dense = make([]float32, n)
		d.RawF32s(c.Dense)
	}
	if n := d.Count(1 << 24); n > 0 {
		c.Terms = make(map[string]uint32, n)
		for range n {
			t := d.Str()
			c.Terms[t] = uint32(d.Uvarint())
		}
	}
	c.Length = int(d.Uvarint())
	if n, isNil := d.OptLen(1 << 24); !isNil {
		c.Pages = make([]int, n)
		for i := range c.Pages {
			c.Pages[i] = int(d.Varint())
		}
	}
	if n, isNil := d.OptLen(1 << 16); !isNil {
		c.HeadingPath = make([]string, n)
		for i := range c.HeadingPath {
			c.HeadingPath[i] = d.Str()
		}
	}
	if n := d.Count(index.MaxAttributes); n > 0 {
		c.Attributes = make(map[string]any, n)
		for range n {
			k := d.Str()
			switch t := d.Byte(); t {
			case attrString:
				c.Attributes[k] = d.Str()
			case attrNumber:
				c.Attributes[k] = d.F64()
			case attrBool:
				c.Attributes[k] = d.Byte() != 0
			default:
				d.Fail(fmt.Errorf("attribute type %d", t))
			}
		}
	}
	return c
}
