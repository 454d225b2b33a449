package hnsw

import (
	"errors"
	"fmt"
	"sync"

	"github.com/aiforge/aiforge/services/retriever/index/embedded/internal/codec"
)

// Encode writes the graph (shape, nodes, full-precision vectors and links, so that loading rebuilds nothing; a
// quantized graph's codes are recomputed from the vectors). label maps each live node's label to the one stored
// (the snapshot renumbers documents densely); tombstones store label 0. A store read error is recorded in
// enc.Err.
func (g *Graph) Encode(enc *codec.Encoder, label func(uint32) uint32) {
	buf := make([]float32, g.dim)
	enc.Uvarint(uint64(g.m))
	enc.Uvarint(uint64(g.nodes()))
	enc.Varint(int64(g.entry))
	enc.Uvarint(uint64(g.maxLevel))
	for i := range g.nodes() {
		n := int32(i)
		st := g.state[n]
		enc.Byte(st)
		if st == nodeFree {
			continue
		}
		enc.Byte(g.levels[n])
		var l uint32
		if st == nodeLive {
			l = label(g.labels[n])
		}
		enc.Uvarint(uint64(l))
		if err := g.Vector(n, buf); err != nil {
			if enc.Err == nil {
				enc.Err = fmt.Errorf("reading vector of node %d: %w", n, err)
			}
			return
		}
		enc.RawF32s(buf)
		for l := 0; l <= int(g.levels[n]); l++ {
			links := g.linksOf(n, l)
			enc.Uvarint(uint64(len(links)))
			for _, x := range links {
				enc.Uvarint(uint64(x))
			}
		}
		enc.MaybeFlush()
	}
}

// Decode reads a graph that Encode wrote, for vectors of dim dimensions. The stored M wins over cfg.M. With a
// store the graph is quantized (see New): the vectors go to the store. Errors are recorded in d.Err.
func Decode(d *codec.Decoder, dim int, cfg Config, seed uint64, store VectorStore) *Graph {
	m := d.Count(128)
	if m >= 2 {
		cfg.M = m // the stored graph's shape wins over the configuration
	}
	g := New(dim, cfg, seed, store)
	n := d.Count(1 << 31)
	entry := int32(d.Varint())
	top := d.Count(maxLevel)
	if d.Err != nil || dim == 0 {
		if d.Err == nil {
			d.Fail(errors.New("graph without a dimension"))
		}
		return g
	}
	var buf []float32
	if store != nil {
		g.scales = make([]float32, n)
		buf = make([]float32, dim)
	} else {
		g.vecs = make([]float32, n*dim)
	}
	g.levels = make([]uint8, n)
	g.labels = make([]uint32, n)
	g.state = make([]uint8, n)
	if n > 0 {
		g.grow(int32(n - 1))
	}
	g.up = make([][]int32, n)
	g.locks = make([]sync.Mutex, n+64)
	readLinks := func(node int32, l int) {
		cnt := d.Count(uint64(g.maxLinks(l)))
		b := g.block(node, l)
		b[0] = int32(cnt)
		for i := range cnt {
			x := d.Uvarint()
			if x >= uint64(n) {
				d.Fail(fmt.Errorf("link to node %d of %d", x, n))
				return
			}
			b[1+i] = int32(x)
		}
	}
	for i := range n {
		if d.Err != nil {
			return g
		}
		node := int32(i)
		st := d.Byte()
		g.state[node] = st
		switch st {
		case nodeFree:
			g.free = append(g.free, node)
			continue
		case nodeLive:
			g.live++
		case nodeDead:
			g.dead++
		default:
			d.Fail(fmt.Errorf("node state %d", st))
			return g
		}
		lv := d.Count(maxLevel)
		g.levels[node] = uint8(lv)
		g.labels[node] = uint32(d.Uvarint())
		if store != nil {
			d.RawF32s(buf)
			g.scales[node] = Quantize(buf, g.code(node))
			if d.Err == nil {
				if err := store.Put(node, buf); err != nil {
					d.Fail(fmt.Errorf("storing vector of node %d: %w", node, err))
				}
			}
		} else {
			d.RawF32s(g.vec(node))
		}
		if lv > 0 {
			g.up[node] = make([]int32, lv*(g.m+1))
		}
		for l := 0; l <= lv; l++ {
			readLinks(node, l)
		}
	}
	if entry >= int32(n) || (entry < 0 && g.live > 0) {
		d.Fail(fmt.Errorf("graph entry %d of %d nodes", entry, n))
	}
	g.entry, g.maxLevel = entry, top
	return g
}
