package objstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LocalConfig configures a Store on a local directory.
type LocalConfig struct {
	// Dir holds the store; it is created if missing. Objects live in
	// Dir/objects/<key> as plain files (an engine can read weights from there
	// directly), their metadata in Dir/meta/<key> and uploads in progress in
	// Dir/tmp. Required.
	Dir string
	// Logger receives warnings about best-effort cleanups. Optional.
	Logger *slog.Logger
}

// Validate reports every problem with the configuration.
func (c LocalConfig) Validate() error {
	var errs []error
	if strings.TrimSpace(c.Dir) == "" {
		errs = append(errs, errors.New("objstore: LocalConfig.Dir is required"))
	}
	return errors.Join(errs...)
}

const (
	localObjects = "objects"
	localMeta    = "meta"
	localTmp     = "tmp"

	localDirPerm  = 0o750
	localFilePerm = 0o640

	// staleTmpAge is how long an untouched temp file must sit before NewLocal
	// deletes it as the leftover of a crashed Put.
	staleTmpAge = time.Hour

	copyBufSize = 256 << 10
)

// Local is a Store on a local directory. Writes go to a temp file that is
// fsynced and renamed into place, so a crash or a failed Put never exposes a
// partial object. All file access goes through an os.Root, so no key and no
// symlink can reach outside Dir. The metadata sidecar makes Stat one stat and
// one small read; a file placed in Dir/objects by hand (or one whose sidecar
// is stale after a crash) is hashed on first access and its sidecar repaired.
//
// Because objects are files, Local cannot hold both "a" and "a/b"; such a Put
// fails with ErrConflict. Each key segment must also fit the filesystem's
// name limit (255 bytes on most).
type Local struct {
	dir   string
	root  *os.Root
	log   *slog.Logger
	seed  maphash.Seed
	locks [64]sync.Mutex // serialise commits of the same key within a process
}

var _ Store = (*Local)(nil)

// NewLocal opens (creating if needed) a local store. Close releases it.
func NewLocal(cfg LocalConfig) (*Local, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: local dir %q: %w", cfg.Dir, err)
	}
	if err := os.MkdirAll(dir, localDirPerm); err != nil {
		return nil, fmt.Errorf("objstore: create local dir: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: open local dir: %w", err)
	}
	for _, sub := range []string{localObjects, localMeta, localTmp} {
		if err := root.Mkdir(sub, localDirPerm); err != nil && !errors.Is(err, fs.ErrExist) {
			_ = root.Close()
			return nil, fmt.Errorf("objstore: create %s: %w", filepath.Join(dir, sub), err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Local{dir: dir, root: root, log: log.With("component", "objstore.local"), seed: maphash.MakeSeed()}
	l.removeStaleTemps()
	return l, nil
}

// Dir returns the absolute store directory.
func (l *Local) Dir() string { return l.dir }

// Close releases the directory handle.
func (l *Local) Close() error { return l.root.Close() }

// sidecar is the JSON stored at meta/<key>. It names the exact file it
// describes (size, mtime, inode), so a sidecar left stale by a crash between
// the two renames of a Put is detected rather than trusted.
type sidecar struct {
	V           int    `json:"v"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	MtimeNs     int64  `json:"mtime_ns"`
	Ino         uint64 `json:"ino,omitempty"`
}

func (m sidecar) matches(fi fs.FileInfo) bool {
	return m.V == 1 && m.Size == fi.Size() && m.MtimeNs == fi.ModTime().UnixNano() && m.Ino == inode(fi) && len(m.SHA256) == sha256.Size*2
}

func sidecarFor(fi fs.FileInfo, sum, ct string) sidecar {
	return sidecar{V: 1, Size: fi.Size(), SHA256: sum, ContentType: ct, MtimeNs: fi.ModTime().UnixNano(), Ino: inode(fi)}
}

func objPath(key string) string  { return filepath.Join(localObjects, filepath.FromSlash(key)) }
func metaPath(key string) string { return filepath.Join(localMeta, filepath.FromSlash(key)) }

func (l *Local) lock(key string) *sync.Mutex {
	return &l.locks[maphash.String(l.seed, key)%uint64(len(l.locks))]
}

// Put implements Store.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error) {
	ct, err := validatePut(key, r, size, contentType)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, putError("put", key, err, nil)
	}
	body, src, finish := bodyReader(ctx, key, r, size)

	tmpData, f, err := l.createTemp()
	if err != nil {
		return Info{}, putError("put", key, err, nil)
	}
	tmpMeta := ""
	committed := false
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if !committed {
			l.removeQuiet(tmpData)
			if tmpMeta != "" {
				l.removeQuiet(tmpMeta)
			}
		}
	}()

	h := sha256.New()
	if _, err := io.CopyBuffer(io.MultiWriter(f, h), body, make([]byte, copyBufSize)); err != nil {
		return Info{}, putError("put", key, err, src)
	}
	if err := finish(); err != nil {
		return Info{}, putError("put", key, err, src)
	}
	if err := f.Sync(); err != nil {
		return Info{}, putError("put", key, fmt.Errorf("fsync: %w", err), nil)
	}
	fi, err := f.Stat()
	if err != nil {
		return Info{}, putError("put", key, err, nil)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return Info{}, putError("put", key, err, nil)
	}
	meta := sidecarFor(fi, hex.EncodeToString(h.Sum(nil)), ct)
	if tmpMeta, err = l.writeTempMeta(meta); err != nil {
		return Info{}, putError("put", key, err, nil)
	}

	mu := l.lock(key)
	mu.Lock()
	err = l.commit(key, tmpData, tmpMeta)
	mu.Unlock()
	if err != nil {
		return Info{}, putError("put", key, err, nil)
	}
	committed = true
	return Info{Key: key, Size: meta.Size, SHA256: meta.SHA256, ContentType: ct, Modified: fi.ModTime().UTC()}, nil
}

// commit renames the sidecar and then the data into place. The sidecar goes
// first: if the data rename fails the old object stays whole, and its now
// mismatching sidecar is detected and rebuilt on the next read.
func (l *Local) commit(key, tmpData, tmpMeta string) error {
	const attempts = 5 // a concurrent Delete may prune a parent we just made
	var err error
	for range attempts {
		if err = l.prepareTarget(key); err != nil {
			return err
		}
		if err = l.root.Rename(tmpMeta, metaPath(key)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return l.conflictOr(key, err)
		}
		if err = l.root.Rename(tmpData, objPath(key)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return l.conflictOr(key, err)
		}
		l.syncDir(path.Dir(key))
		return nil
	}
	return err
}

// prepareTarget creates the parent directories of key in both trees and makes
// sure the object path is not a directory.
func (l *Local) prepareTarget(key string) error {
	if dir := path.Dir(key); dir != "." {
		for _, base := range []string{localObjects, localMeta} {
			if err := l.root.MkdirAll(filepath.Join(base, filepath.FromSlash(dir)), localDirPerm); err != nil {
				return l.conflictOr(key, err)
			}
		}
	}
	for _, p := range []string{objPath(key), metaPath(key)} {
		fi, err := l.root.Lstat(p)
		if err == nil && fi.IsDir() {
			// A leftover empty directory is fine to replace; one holding other
			// keys is a conflict.
			if err := l.root.Remove(p); err != nil {
				return fmt.Errorf("%w: %s is a prefix of other keys", ErrConflict, quoteKey(key))
			}
		}
	}
	return nil
}

func (l *Local) conflictOr(key string, err error) error {
	if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %s: %w", ErrConflict, quoteKey(key), err)
	}
	if errors.Is(err, syscall.ENAMETOOLONG) {
		return fmt.Errorf("%w: %s: a segment is too long for the local filesystem: %w", ErrInvalidKey, quoteKey(key), err)
	}
	return err
}

// syncDir fsyncs the directory that now names the object, so the rename
// survives a crash. (The sidecar's directory is not synced; see
// writeTempMeta.)
func (l *Local) syncDir(dir string) {
	p := localObjects
	if dir != "." {
		p = filepath.Join(localObjects, filepath.FromSlash(dir))
	}
	d, err := l.root.Open(p)
	if err != nil {
		return
	}
	if err := d.Sync(); err != nil {
		l.log.Warn("fsync directory", "dir", p, "err", err)
	}
	_ = d.Close()
}

func (l *Local) createTemp() (string, *os.File, error) {
	for range 10 {
		var b [12]byte
		_, _ = rand.Read(b[:])
		name := filepath.Join(localTmp, hex.EncodeToString(b[:])+".part")
		f, err := l.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, localFilePerm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("create temp file: %w", err)
		}
		return name, f, nil
	}
	return "", nil, errors.New("create temp file: no free name")
}

func (l *Local) writeTempMeta(m sidecar) (string, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	name, f, err := l.createTemp()
	if err != nil {
		return "", err
	}
	// No fsync: a sidecar names the file it describes, so one lost or torn
	// in a crash is detected and rebuilt, never trusted.
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		l.removeQuiet(name)
		return "", fmt.Errorf("write metadata: %w", err)
	}
	return name, nil
}

func (l *Local) removeQuiet(name string) {
	if err := l.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.log.Warn("remove temp file", "file", name, "err", err)
	}
}

func (l *Local) removeStaleTemps() {
	d, err := l.root.Open(localTmp)
	if err != nil {
		return
	}
	entries, err := d.ReadDir(-1)
	_ = d.Close()
	if err != nil {
		return
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || time.Since(fi.ModTime()) < staleTmpAge {
			continue
		}
		name := filepath.Join(localTmp, e.Name())
		if err := l.root.Remove(name); err == nil {
			l.log.Info("removed stale temp file", "file", name)
		}
	}
}

// isMissing reports errors that mean "no object at this path".
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ENAMETOOLONG)
}

func (l *Local) readMeta(key string) (sidecar, bool) {
	data, err := l.root.ReadFile(metaPath(key))
	if err != nil {
		return sidecar{}, false
	}
	var m sidecar
	if json.Unmarshal(data, &m) != nil {
		return sidecar{}, false
	}
	return m, true
}

// Stat implements Store.
func (l *Local) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("objstore: stat %s: %w", quoteKey(key), err)
	}
	fi, err := l.root.Stat(objPath(key))
	if err != nil {
		if isMissing(err) {
			return Info{}, notFound(key)
		}
		return Info{}, fmt.Errorf("objstore: stat %s: %w", quoteKey(key), err)
	}
	if !fi.Mode().IsRegular() {
		return Info{}, notFound(key)
	}
	if m, ok := l.readMeta(key); ok && m.matches(fi) {
		return infoFrom(key, fi, m), nil
	}
	// Slow path: no or stale sidecar. Hash the file that is there now.
	f, err := l.root.Open(objPath(key))
	if err != nil {
		if isMissing(err) {
			return Info{}, notFound(key)
		}
		return Info{}, fmt.Errorf("objstore: stat %s: %w", quoteKey(key), err)
	}
	defer func() { _ = f.Close() }()
	info, err := l.rebuild(ctx, key, f)
	if err != nil {
		return Info{}, fmt.Errorf("objstore: stat %s: %w", quoteKey(key), err)
	}
	return info, nil
}

// Get implements Store.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, Info{}, fmt.Errorf("objstore: get %s: %w", quoteKey(key), err)
	}
	f, err := l.root.Open(objPath(key))
	if err != nil {
		if isMissing(err) {
			return nil, Info{}, notFound(key)
		}
		return nil, Info{}, fmt.Errorf("objstore: get %s: %w", quoteKey(key), err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, Info{}, fmt.Errorf("objstore: get %s: %w", quoteKey(key), err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, Info{}, notFound(key)
	}
	if m, ok := l.readMeta(key); ok && m.matches(fi) {
		return f, infoFrom(key, fi, m), nil
	}
	info, err := l.rebuild(ctx, key, f)
	if err != nil {
		_ = f.Close()
		return nil, Info{}, fmt.Errorf("objstore: get %s: %w", quoteKey(key), err)
	}
	return f, info, nil
}

func infoFrom(key string, fi fs.FileInfo, m sidecar) Info {
	return Info{Key: key, Size: fi.Size(), SHA256: m.SHA256, ContentType: cmp.Or(m.ContentType, DefaultContentType), Modified: fi.ModTime().UTC()}
}

// rebuild hashes the open file f (without moving its offset) and, if f is
// still the file at key, rewrites the sidecar. The content type of a file
// without a valid sidecar is unknown and reported as DefaultContentType.
func (l *Local) rebuild(ctx context.Context, key string, f *os.File) (Info, error) {
	fi, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	h := sha256.New()
	sr := io.NewSectionReader(f, 0, fi.Size())
	if _, err := io.CopyBuffer(h, ctxReader{ctx: ctx, r: sr}, make([]byte, copyBufSize)); err != nil {
		return Info{}, fmt.Errorf("hash: %w", err)
	}
	ct := DefaultContentType
	if m, ok := l.readMeta(key); ok && m.Size == fi.Size() && m.ContentType != "" {
		// Same length: most likely the sidecar of this very content whose
		// mtime or inode changed (a copy or restore); keep its type.
		ct = m.ContentType
	}
	meta := sidecarFor(fi, hex.EncodeToString(h.Sum(nil)), ct)
	l.repair(key, fi, meta)
	return infoFrom(key, fi, meta), nil
}

func (l *Local) repair(key string, fi fs.FileInfo, meta sidecar) {
	tmp, err := l.writeTempMeta(meta)
	if err != nil {
		l.log.Warn("repair metadata", "key", key, "err", err)
		return
	}
	mu := l.lock(key)
	mu.Lock()
	defer mu.Unlock()
	cur, err := l.root.Stat(objPath(key))
	if err != nil || !meta.matches(cur) {
		l.removeQuiet(tmp) // replaced meanwhile; its own Put wrote its sidecar
		return
	}
	err = l.root.Rename(tmp, metaPath(key))
	if err != nil {
		// The sidecar's directory may not exist yet (a file placed by hand
		// under a new prefix): create it and try once more. Only a failure
		// of that second attempt is worth a warning.
		if err = l.root.MkdirAll(filepath.Dir(metaPath(key)), localDirPerm); err == nil {
			err = l.root.Rename(tmp, metaPath(key))
		}
	}
	if err != nil {
		l.removeQuiet(tmp)
		l.log.Warn("repair metadata", "key", key, "err", err)
	}
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("objstore: delete %s: %w", quoteKey(key), err)
	}
	mu := l.lock(key)
	mu.Lock()
	defer mu.Unlock()
	fi, err := l.root.Lstat(objPath(key))
	switch {
	case err != nil && !isMissing(err):
		return fmt.Errorf("objstore: delete %s: %w", quoteKey(key), err)
	case err == nil && fi.IsDir():
		return nil // a prefix of other keys, not an object
	case err == nil:
		if err := l.root.Remove(objPath(key)); err != nil && !isMissing(err) {
			return fmt.Errorf("objstore: delete %s: %w", quoteKey(key), err)
		}
	}
	if err := l.root.Remove(metaPath(key)); err != nil && !isMissing(err) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, fs.ErrExist) {
		l.log.Warn("remove metadata", "key", key, "err", err)
	}
	l.prune(path.Dir(key))
	l.syncDir(path.Dir(key))
	return nil
}

// prune removes directories left empty by a Delete, deepest first, stopping
// at the first one that still holds something.
func (l *Local) prune(dir string) {
	for ; dir != "." && dir != "/"; dir = path.Dir(dir) {
		okObj := l.root.Remove(filepath.Join(localObjects, filepath.FromSlash(dir))) == nil
		okMeta := l.root.Remove(filepath.Join(localMeta, filepath.FromSlash(dir))) == nil
		if !okObj && !okMeta {
			return
		}
	}
}

// List implements Store. It walks only the directory named by the prefix's
// complete segments and visits entries in key order (a directory "d" sorts
// as "d/"), so it streams without collecting the whole listing.
func (l *Local) List(ctx context.Context, prefix string) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		if err := ValidatePrefix(prefix); err != nil {
			yield(Info{}, err)
			return
		}
		dir := ""
		if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
			dir = prefix[:i]
		}
		l.walk(ctx, dir, prefix, yield)
	}
}

type walkEntry struct {
	name  string
	sort  string
	isDir bool
	entry fs.DirEntry
}

func (l *Local) walk(ctx context.Context, dirKey, prefix string, yield func(Info, error) bool) bool {
	if err := ctx.Err(); err != nil {
		return yield(Info{}, fmt.Errorf("objstore: list %s: %w", quoteKey(prefix), err))
	}
	p := localObjects
	if dirKey != "" {
		p = filepath.Join(localObjects, filepath.FromSlash(dirKey))
	}
	d, err := l.root.Open(p)
	if err != nil {
		if isMissing(err) {
			return true
		}
		return yield(Info{}, fmt.Errorf("objstore: list %s: %w", quoteKey(prefix), err))
	}
	entries, err := d.ReadDir(-1)
	_ = d.Close()
	if err != nil {
		if isMissing(err) {
			return true // not a directory: the prefix names an object's parent that is a file
		}
		return yield(Info{}, fmt.Errorf("objstore: list %s: %w", quoteKey(prefix), err))
	}
	items := make([]walkEntry, 0, len(entries))
	for _, e := range entries {
		isDir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			fi, err := l.root.Stat(filepath.Join(p, e.Name()))
			if err != nil {
				continue // dangling or escaping link
			}
			isDir = fi.IsDir()
		}
		it := walkEntry{name: e.Name(), sort: e.Name(), isDir: isDir, entry: e}
		if isDir {
			it.sort += "/"
		}
		items = append(items, it)
	}
	slices.SortFunc(items, func(a, b walkEntry) int { return strings.Compare(a.sort, b.sort) })
	for _, it := range items {
		key := it.name
		if dirKey != "" {
			key = dirKey + "/" + it.name
		}
		if it.isDir {
			kd := key + "/"
			if !strings.HasPrefix(kd, prefix) && !strings.HasPrefix(prefix, kd) {
				continue
			}
			if !l.walk(ctx, key, prefix, yield) {
				return false
			}
			continue
		}
		if !strings.HasPrefix(key, prefix) || ValidateKey(key) != nil {
			continue
		}
		fi, err := l.root.Stat(filepath.Join(p, it.name))
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted since ReadDir, or not a plain file
		}
		if !yield(Info{Key: key, Size: fi.Size(), Modified: fi.ModTime().UTC()}, nil) {
			return false
		}
	}
	return true
}
