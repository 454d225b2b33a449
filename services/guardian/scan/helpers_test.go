package scan

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// rawST builds a safetensors file from a literal header and data length.
func rawST(header string, dataLen int) []byte {
	var b bytes.Buffer
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	b.Write(n[:])
	b.WriteString(header)
	b.Write(make([]byte, dataLen))
	return b.Bytes()
}

type stT struct {
	name  string
	dtype string
	shape []int64
}

// writeST is a tiny valid safetensors writer.
func writeST(meta map[string]string, ts ...stT) []byte {
	var parts []string
	if meta != nil {
		keys := make([]string, 0, len(meta))
		for k := range meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var m []string
		for _, k := range keys {
			m = append(m, fmt.Sprintf("%q:%q", k, meta[k]))
		}
		parts = append(parts, `"__metadata__":{`+strings.Join(m, ",")+`}`)
	}
	off := int64(0)
	for _, t := range ts {
		n := int64(1)
		var dims []string
		for _, d := range t.shape {
			n *= d
			dims = append(dims, fmt.Sprint(d))
		}
		sz := n * int64(safetensorsDTypes[t.dtype])
		parts = append(parts, fmt.Sprintf(`%q:{"dtype":%q,"shape":[%s],"data_offsets":[%d,%d]}`, t.name, t.dtype, strings.Join(dims, ","), off, off+sz))
		off += sz
	}
	h := "{" + strings.Join(parts, ",") + "}"
	for len(h)%8 != 0 {
		h += " "
	}
	return rawST(h, int(off))
}

type ggufKV struct {
	key string
	typ uint32
	val any // uint32, string, []byte (raw value bytes)
}

type ggufT struct {
	name   string
	dims   []uint64
	typ    uint32
	offset uint64
}

type ggufW struct{ bytes.Buffer }

func (w *ggufW) u32(v uint32) { binary.Write(&w.Buffer, binary.LittleEndian, v) }
func (w *ggufW) u64(v uint64) { binary.Write(&w.Buffer, binary.LittleEndian, v) }
func (w *ggufW) str(s string) { w.u64(uint64(len(s))); w.WriteString(s) }

// writeGGUF builds a GGUF file; dataLen bytes of tensor data follow the
// aligned tensor-info section.
func writeGGUF(version uint32, align uint64, kvs []ggufKV, ts []ggufT, dataLen int) []byte {
	var w ggufW
	w.WriteString("GGUF")
	w.u32(version)
	w.u64(uint64(len(ts)))
	w.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		w.str(kv.key)
		w.u32(kv.typ)
		switch v := kv.val.(type) {
		case uint32:
			w.u32(v)
		case string:
			w.str(v)
		case []byte:
			w.Write(v)
		}
	}
	for _, t := range ts {
		w.str(t.name)
		w.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			w.u64(d)
		}
		w.u32(t.typ)
		w.u64(t.offset)
	}
	for uint64(w.Len())%align != 0 {
		w.WriteByte(0)
	}
	w.Write(make([]byte, dataLen))
	return w.Bytes()
}

func zipWith(t *testing.T, names ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, n := range names {
		f, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("x"))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func hasCode(rs []Reason, code string) bool {
	for _, r := range rs {
		if r.Code == code {
			return true
		}
	}
	return false
}
