package embedded

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aiforge/aiforge/services/retriever/index"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/hnsw"
	"github.com/aiforge/aiforge/services/retriever/index/embedded/internal/codec"
)

// On-disk layout of an embedded index directory:
//
//	LOCK                 flock'd while open
//	snapshot             the state as of the start of WAL generation G (written to snapshot.tmp, fsync'd, renamed)
//	wal-<G>.log ...      write-ahead logs of generation G and later, replayed in order on open
//
// A WAL file is a header followed by records: u32 payload length, u32 CRC-32C of the payload, payload. A record
// is written and fsync'd before its mutation is applied. On open, a short or checksum-failing record at the end
// of the newest WAL (a torn write: the process died mid-append) is cut off; anywhere else it is corruption and
// the open fails rather than silently dropping acknowledged writes.

const (
	walMagic      = "AIFWAL\x00\x01"
	snapMagic     = "AIFSNP\x00\x01"
	walHeaderLen  = int64(len(walMagic))
	snapshotName  = "snapshot"
	maxWALRecord  = 1 << 30
	snapshotFmtV1 = 1

	walUpsert      byte = 1
	walDeleteFile  byte = 2
	walDeleteStore byte = 3
)

func walName(gen uint64) string { return fmt.Sprintf("wal-%020d.log", gen) }

type walWriter struct {
	f    *os.File
	gen  uint64
	size int64
}

func (w *walWriter) close() error {
	if w == nil || w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// appendWAL writes one record and fsyncs it. On failure the file is cut back to its previous size; when even that
// fails, the index turns read-only (e.broken) because the tail of the log is unknown.
func (e *Index) appendWAL(payload []byte) error {
	if len(payload) > maxWALRecord {
		return index.Invalidf("batch encodes to %d bytes (at most %d): split it", len(payload), maxWALRecord)
	}
	rec := make([]byte, 8, 8+len(payload))
	binary.LittleEndian.PutUint32(rec[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(payload, codec.Castagnoli))
	rec = append(rec, payload...)
	w := e.wal
	_, err := w.f.Write(rec)
	if err == nil {
		err = w.f.Sync()
	}
	if err != nil {
		if terr := w.f.Truncate(w.size); terr != nil {
			e.broken = errors.Join(err, terr)
		} else if _, serr := w.f.Seek(w.size, io.SeekStart); serr != nil {
			e.broken = errors.Join(err, serr)
		}
		return fmt.Errorf("embedded index: write-ahead log: %w", err)
	}
	w.size += int64(len(rec))
	return nil
}

func (e *Index) maybeSnapshot() error {
	// A snapshot rewrites the whole state, so it waits for a WAL of at least a quarter of the last snapshot's
	// size: snapshot writes stay proportional to what is written (about 5× it at most) instead of growing with
	// the square of the index size (a million 384-dimensional chunks make a 1.6 GB snapshot; every 64 MiB of
	// WAL would rewrite it 25 times over), and a crash replays at most max(SnapshotBytes, a quarter of the
	// state) of log.
	if e.wal.size < max(e.cfg.SnapshotBytes, e.snapLen/4) {
		return nil
	}
	if err := e.snapshot(); err != nil {
		// The WAL still holds everything: the write succeeded, only compaction failed.
		e.log.Error("snapshot failed; the write-ahead log keeps growing", "err", err)
	}
	return nil
}

// snapshot rotates the WAL and writes the state. Caller holds writeMu.
func (e *Index) snapshot() error {
	start := time.Now()
	next := e.wal.gen + 1
	nw, err := createWAL(e.cfg.Dir, next)
	if err != nil {
		return err
	}
	if err := e.wal.close(); err != nil {
		e.log.Warn("closing write-ahead log", "err", err)
	}
	e.wal = nw
	tmp := filepath.Join(e.cfg.Dir, snapshotName+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("embedded index: snapshot: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	h := crc32.New(codec.Castagnoli)
	enc := codec.Encoder{W: io.MultiWriter(bw, h)}
	e.mu.RLock()
	e.encodeState(&enc, next)
	e.mu.RUnlock()
	enc.Flush()
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], h.Sum32())
	err = enc.Err
	if err == nil {
		_, err = bw.Write(sum[:])
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	var snapLen int64
	if st, serr := f.Stat(); serr == nil {
		snapLen = st.Size()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(e.cfg.Dir, snapshotName))
	}
	if err == nil {
		err = syncDir(e.cfg.Dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("embedded index: snapshot: %w", err)
	}
	removeOldWALs(e.cfg.Dir, next, e.log)
	e.snapLen = snapLen
	e.log.Info("snapshot written", "wal_generation", next, "took", time.Since(start))
	return nil
}

func createWAL(dir string, gen uint64) (*walWriter, error) {
	path := filepath.Join(dir, walName(gen))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded index: create write-ahead log: %w", err)
	}
	_, err = f.Write([]byte(walMagic))
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded index: create write-ahead log: %w", err)
	}
	return &walWriter{f: f, gen: gen, size: walHeaderLen}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// listWALs returns the WAL generations present, ascending.
func listWALs(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var gens []uint64
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasPrefix(name, "wal-") || !strings.HasSuffix(name, ".log") {
			continue
		}
		g, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "wal-"), ".log"), 10, 64)
		if err != nil {
			continue
		}
		gens = append(gens, g)
	}
	slices.Sort(gens)
	return gens, nil
}

func removeOldWALs(dir string, keepFrom uint64, log interface{ Warn(string, ...any) }) {
	gens, err := listWALs(dir)
	if err != nil {
		log.Warn("listing write-ahead logs", "err", err)
		return
	}
	for _, g := range gens {
		if g < keepFrom {
			if err := os.Remove(filepath.Join(dir, walName(g))); err != nil {
				log.Warn("removing old write-ahead log", "err", err)
			}
		}
	}
}

// open loads the snapshot, replays the WAL and opens the newest WAL for appending.
func (e *Index) open() error {
	dir := e.cfg.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("embedded index: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, "LOCK"))
	if err != nil {
		return fmt.Errorf("embedded index: %s is in use: %w", dir, err)
	}
	e.dirLock = lock
	if err := e.load(); err != nil {
		_ = e.vecs.close()
		e.vecs = nil
		lock.Close()
		return err
	}
	return nil
}

func (e *Index) load() error {
	start := time.Now()
	dir := e.cfg.Dir
	_ = os.Remove(filepath.Join(dir, snapshotName+".tmp"))
	_ = os.Remove(filepath.Join(dir, vectorsName)) // a crashed process's scratch file: rebuilt below
	from := uint64(0)
	hasSnap := false
	if f, err := os.Open(filepath.Join(dir, snapshotName)); err == nil {
		from, err = e.readSnapshot(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("embedded index: snapshot: %w", err)
		}
		hasSnap = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("embedded index: %w", err)
	}
	gens, err := listWALs(dir)
	if err != nil {
		return fmt.Errorf("embedded index: %w", err)
	}
	var replay []uint64
	for _, g := range gens {
		if g >= from {
			replay = append(replay, g)
		}
	}
	if hasSnap && len(replay) > 0 && replay[0] != from {
		return fmt.Errorf("embedded index: write-ahead log generation %d missing (snapshot needs it)", from)
	}
	records := 0
	for i, g := range replay {
		last := i == len(replay)-1
		n, size, err := e.replayWAL(g, last)
		if err != nil {
			return err
		}
		records += n
		if last {
			f, err := os.OpenFile(filepath.Join(dir, walName(g)), os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("embedded index: %w", err)
			}
			if _, err := f.Seek(size, io.SeekStart); err != nil {
				f.Close()
				return fmt.Errorf("embedded index: %w", err)
			}
			e.wal = &walWriter{f: f, gen: g, size: size}
		}
	}
	if e.wal == nil {
		w, err := createWAL(dir, max(from, 1))
		if err != nil {
			return err
		}
		e.wal = w
	}
	removeOldWALs(dir, from, e.log)
	chunks := 0
	for _, t := range e.tenants {
		chunks += t.live
	}
	e.log.Info("embedded index opened", "tenants", len(e.tenants), "chunks", chunks,
		"replayed_records", records, "took", time.Since(start))
	return nil
}

// replayWAL applies the records of one WAL file and returns how many and the size of its valid prefix. In the
// newest file a torn tail is cut off.
func (e *Index) replayWAL(gen uint64, last bool) (int, int64, error) {
	path := filepath.Join(e.cfg.Dir, walName(gen))
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("embedded index: %w", err)
	}
	bad := func(off int64, why string) (int, int64, error) {
		return 0, 0, fmt.Errorf("embedded index: %w: %s at offset %d of %s", codec.ErrCorrupt, why, off, path)
	}
	if len(data) < int(walHeaderLen) || string(data[:walHeaderLen]) != walMagic {
		if last && len(data) < int(walHeaderLen) && strings.HasPrefix(walMagic, string(data)) {
			// Created but the header never made it to disk: start the file again.
			if err := os.WriteFile(path, []byte(walMagic), 0o644); err != nil {
				return 0, 0, fmt.Errorf("embedded index: %w", err)
			}
			return 0, walHeaderLen, nil
		}
		return bad(0, "bad header")
	}
	off := walHeaderLen
	n := 0
	for off < int64(len(data)) {
		rest := data[off:]
		torn := ""
		var payload []byte
		if len(rest) < 8 {
			torn = "short record header"
		} else {
			size := int64(binary.LittleEndian.Uint32(rest[0:]))
			sum := binary.LittleEndian.Uint32(rest[4:])
			switch {
			case size > maxWALRecord || 8+size > int64(len(rest)):
				torn = "short record"
			case crc32.Checksum(rest[8:8+size], codec.Castagnoli) != sum:
				torn = "checksum mismatch"
			default:
				payload = rest[8 : 8+size]
			}
		}
		if torn != "" {
			if !last {
				return bad(off, torn)
			}
			e.log.Warn("cutting torn write-ahead log tail (the last write before a crash)",
				"file", path, "offset", off, "dropped_bytes", int64(len(data))-off, "reason", torn)
			if err := os.Truncate(path, off); err != nil {
				return 0, 0, fmt.Errorf("embedded index: %w", err)
			}
			break
		}
		if err := e.applyRecord(payload); err != nil {
			return bad(off, err.Error())
		}
		n++
		off += 8 + int64(len(payload))
	}
	return n, off, nil
}

func (e *Index) applyRecord(payload []byte) error {
	d := codec.Decoder{R: bytes.NewReader(payload)}
	switch op := d.Byte(); op {
	case walUpsert:
		cnt := d.Count(1 << 24)
		chunks := make([]index.Chunk, 0, cnt)
		for range cnt {
			chunks = append(chunks, decodeChunk(&d))
		}
		if d.Err != nil {
			return d.Err
		}
		for i := range chunks {
			if chunks[i].Dense != nil {
				dim := e.dim
				if dim == 0 {
					dim = len(chunks[i].Dense)
				}
				if len(chunks[i].Dense) != dim {
					return fmt.Errorf("vector of %d dimensions in an index of %d", len(chunks[i].Dense), dim)
				}
			}
		}
		if err := e.applyUpsert(chunks); err != nil {
			return err
		}
	case walDeleteFile, walDeleteStore:
		tenantID, storeID := d.Str(), d.Str()
		fileID := ""
		if op == walDeleteFile {
			fileID = d.Str()
		}
		if d.Err != nil {
			return d.Err
		}
		e.applyDelete(tenantID, storeID, fileID)
	default:
		if d.Err != nil {
			return d.Err
		}
		return fmt.Errorf("unknown record type %d", op)
	}
	return nil
}

// encodeState writes the snapshot body. Documents are renumbered densely; graph labels follow.
func (e *Index) encodeState(enc *codec.Encoder, walGen uint64) {
	enc.Buf = append(enc.Buf, snapMagic...)
	enc.Uvarint(snapshotFmtV1)
	enc.Uvarint(walGen)
	enc.Uvarint(uint64(e.dim))
	names := make([]string, 0, len(e.tenants))
	for name := range e.tenants {
		names = append(names, name)
	}
	slices.Sort(names)
	enc.Uvarint(uint64(len(names)))
	for _, name := range names {
		t := e.tenants[name]
		enc.Str(name)
		remap := make(map[uint32]uint32, t.live)
		enc.Uvarint(uint64(t.live))
		for num, d := range t.docs {
			if d == nil {
				continue
			}
			remap[uint32(num)] = uint32(len(remap))
			encodeChunk(enc, &d.c, false)
			enc.Varint(int64(d.node))
			enc.MaybeFlush()
		}
		g := t.graph
		if g == nil {
			enc.Byte(0)
			continue
		}
		enc.Byte(1)
		g.Encode(enc, func(num uint32) uint32 { return remap[num] })
	}
}

func (e *Index) readSnapshot(f *os.File) (walGen uint64, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	e.snapLen = st.Size()
	if st.Size() < int64(len(snapMagic))+4 {
		return 0, fmt.Errorf("%w: snapshot too short", codec.ErrCorrupt)
	}
	body := io.LimitReader(f, st.Size()-4)
	cr := &codec.CRCReader{R: bufio.NewReaderSize(body, 1<<20), H: crc32.New(codec.Castagnoli)}
	d := codec.Decoder{R: cr}
	if string(d.Bytes(len(snapMagic))) != snapMagic {
		return 0, fmt.Errorf("%w: not a snapshot", codec.ErrCorrupt)
	}
	if v := d.Uvarint(); d.Err == nil && v != snapshotFmtV1 {
		return 0, fmt.Errorf("snapshot format %d not supported", v)
	}
	walGen = d.Uvarint()
	dim := int(d.Count(1 << 16))
	if d.Err == nil && e.cfg.Dim > 0 && dim > 0 && dim != e.cfg.Dim {
		return 0, fmt.Errorf("index holds %d-dimensional vectors, configured Dim is %d", dim, e.cfg.Dim)
	}
	if dim > 0 {
		e.dim = dim
	}
	tenants := make(map[string]*tenant)
	nt := d.Count(1 << 30)
	for range nt {
		name := d.Str()
		t := e.newTenant()
		nd := d.Count(1 << 31)
		for range nd {
			c := decodeChunk(&d)
			node := int32(d.Varint())
			if d.Err != nil {
				break
			}
			num := uint32(len(t.docs))
			t.docs = append(t.docs, &doc{c: c, node: node})
			t.byID[c.ID] = num
			s := t.stores[c.StoreID]
			if s == nil {
				s = &storeDocs{files: make(map[string]map[uint32]struct{})}
				t.stores[c.StoreID] = s
			}
			if s.files[c.FileID] == nil {
				s.files[c.FileID] = make(map[uint32]struct{})
			}
			s.files[c.FileID][num] = struct{}{}
			s.count++
			t.addDoc(num, t.docs[num])
		}
		if d.Byte() == 1 {
			store, err := e.vectorStore(t)
			if err != nil {
				return 0, err
			}
			t.graph = hnsw.Decode(&d, e.dim, e.cfg.HNSW, e.rng.Uint64(), store)
		}
		if d.Err != nil {
			return 0, d.Err
		}
		if err := t.checkGraph(); err != nil {
			return 0, fmt.Errorf("tenant %q: %w", name, err)
		}
		tenants[name] = t
	}
	if d.Err != nil {
		return 0, d.Err
	}
	want := cr.H.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(f, sum[:]); err != nil {
		return 0, fmt.Errorf("%w: %w", codec.ErrCorrupt, err)
	}
	if binary.LittleEndian.Uint32(sum[:]) != want {
		return 0, fmt.Errorf("%w: snapshot checksum mismatch", codec.ErrCorrupt)
	}
	e.tenants = tenants
	return walGen, nil
}

// checkGraph cross-checks documents and graph nodes after loading.
func (t *tenant) checkGraph() error {
	g := t.graph
	vectors := 0
	for num, d := range t.docs {
		if d.node < 0 {
			continue
		}
		vectors++
		if label, ok := g.LiveLabel(d.node); g == nil || !ok || label != uint32(num) {
			return fmt.Errorf("%w: document %q and its graph node disagree", codec.ErrCorrupt, d.c.ID)
		}
	}
	if g != nil && g.Live() != vectors {
		return fmt.Errorf("%w: %d live graph nodes for %d vectors", codec.ErrCorrupt, g.Live(), vectors)
	}
	return nil
}
