package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The full-precision vectors of quantized graphs live in one scratch file, vectorsName in the index directory,
// not on the Go heap: the graphs keep their links and int8 codes in memory and read a vector back (pread, served
// by the page cache while it fits) only to rescore the best candidates of a search, to answer exact scans, and
// to write snapshots. The file is not a durable record — the snapshot and the WAL are, and they keep storing every
// vector — but a cache rebuilt at every open while the snapshot is loaded and the WAL replayed: a crash can leave
// it behind in any state and nothing reads it before it is truncated again.
//
// The file is cut into extents of extentSlots vectors; each graph owns a list of extents (its node n lives in
// extent n/extentSlots at slot n%extentSlots), so that graph node ids, dense and reused after deletes, map to file
// offsets without a per-node table. A tenant's extents return to a free list when the tenant goes away. Unwritten
// parts of the file stay sparse.
const (
	vectorsName = "vectors.scratch"
	extentSlots = 1024
)

type vecFile struct {
	f    *os.File
	path string
	row  int64 // bytes per vector
	mu   sync.Mutex
	next int64   // extents handed out so far
	free []int64 // extents given back
	err  atomic.Pointer[error]
}

func createVecFile(dir string, dim int) (*vecFile, error) {
	path := filepath.Join(dir, vectorsName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded index: vector file: %w", err)
	}
	return &vecFile{f: f, path: path, row: int64(dim) * 4}, nil
}

func (v *vecFile) alloc() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if k := len(v.free); k > 0 {
		e := v.free[k-1]
		v.free = v.free[:k-1]
		return e
	}
	v.next++
	return v.next - 1
}

func (v *vecFile) fail(err error) {
	v.err.CompareAndSwap(nil, &err)
}

// Err is the first write error: after it the file cannot be trusted and the index turns read-only.
func (v *vecFile) Err() error {
	if p := v.err.Load(); p != nil {
		return *p
	}
	return nil
}

// close closes and removes the file.
func (v *vecFile) close() error {
	if v == nil {
		return nil
	}
	err := v.f.Close()
	if rerr := os.Remove(v.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// Size is the file's length (sparse parts included).
func (v *vecFile) Size() int64 {
	st, err := v.f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}

// vecSeg is one graph's part of the file; it implements hnsw.VectorStore.
type vecSeg struct {
	file    *vecFile
	extents []int64 // written with exclusive access to the graph, read by searches
}

func (s *vecSeg) offset(n int32) (int64, bool) {
	e := int(n) / extentSlots
	if n < 0 || e >= len(s.extents) {
		return 0, false
	}
	return (s.extents[e]*extentSlots + int64(n%extentSlots)) * s.file.row, true
}

func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*4)
}

// Put implements hnsw.VectorStore.
func (s *vecSeg) Put(n int32, v []float32) error {
	if int64(len(v))*4 != s.file.row {
		return fmt.Errorf("vector of %d dimensions in a file of %d", len(v), s.file.row/4)
	}
	for int(n)/extentSlots >= len(s.extents) {
		s.extents = append(s.extents, s.file.alloc())
	}
	off, _ := s.offset(n)
	if _, err := s.file.f.WriteAt(f32Bytes(v), off); err != nil {
		err = fmt.Errorf("embedded index: vector file: %w", err)
		s.file.fail(err)
		return err
	}
	return nil
}

// Get implements hnsw.VectorStore.
func (s *vecSeg) Get(n int32, dst []float32) error {
	if err := s.file.Err(); err != nil {
		return err
	}
	off, ok := s.offset(n)
	if !ok || int64(len(dst))*4 != s.file.row {
		return fmt.Errorf("embedded index: vector file: no vector %d", n)
	}
	if _, err := s.file.f.ReadAt(f32Bytes(dst), off); err != nil {
		return fmt.Errorf("embedded index: vector file: %w", err)
	}
	return nil
}

// release gives the segment's extents back to the file (the graph is gone).
func (s *vecSeg) release() {
	if s == nil {
		return
	}
	s.file.mu.Lock()
	s.file.free = append(s.file.free, s.extents...)
	s.file.mu.Unlock()
	s.extents = nil
}
