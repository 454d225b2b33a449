package guardian

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/aiforge/aiforge/pkg/objstore"
)

// objFS is a read-only fs.FS over exactly the listed files of a version in
// the object store: the key of a file is prefix + path. Opening a file
// returns something the scanner can read at random: the object itself when
// the store hands out an io.ReaderAt (the local store's *os.File), else a
// copy spooled to a temporary file in scratch, removed on Close.
type objFS struct {
	ctx     context.Context
	store   objstore.Store
	prefix  string
	scratch string
	files   map[string]int64 // path -> size
	dirs    map[string][]string
}

func newObjFS(ctx context.Context, store objstore.Store, prefix, scratch string, files map[string]int64) *objFS {
	o := &objFS{ctx: ctx, store: store, prefix: prefix, scratch: scratch, files: files, dirs: map[string][]string{".": nil}}
	for p := range files {
		child := p
		for {
			dir := path.Dir(child)
			_, existed := o.dirs[dir]
			if !slices.Contains(o.dirs[dir], path.Base(child)) {
				o.dirs[dir] = append(o.dirs[dir], path.Base(child))
			}
			if existed {
				break
			}
			child = dir
		}
	}
	for _, names := range o.dirs {
		slices.Sort(names)
	}
	return o
}

// Open implements fs.FS.
func (o *objFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if _, ok := o.dirs[name]; ok {
		entries, err := o.ReadDir(name)
		if err != nil {
			return nil, err
		}
		return &objDir{info: objInfo{name: path.Base(name), mode: fs.ModeDir | 0o555}, entries: entries}, nil
	}
	size, ok := o.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	rc, info, err := o.store.Get(o.ctx, o.prefix+name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if info.Size != size {
		_ = rc.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("object holds %d bytes, the upload recorded %d", info.Size, size)}
	}
	fi := objInfo{name: path.Base(name), size: info.Size, mode: 0o444, mod: info.Modified}
	if ra, ok := rc.(readerAtCloser); ok {
		return &objFile{r: ra, info: fi}, nil
	}
	defer func() { _ = rc.Close() }()
	tmp, err := os.CreateTemp(o.scratch, "guardian-spool-*")
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("spool: %w", err)}
	}
	n, err := io.Copy(tmp, &ctxReader{ctx: o.ctx, r: rc})
	if err == nil && n != info.Size {
		err = fmt.Errorf("read %d bytes, the object holds %d", n, info.Size)
	}
	if err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("spool: %w", err)}
	}
	return &objFile{r: tmp, info: fi, remove: tmp.Name()}, nil
}

// ReadDir implements fs.ReadDirFS.
func (o *objFS) ReadDir(name string) ([]fs.DirEntry, error) {
	names, ok := o.dirs[name]
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	out := make([]fs.DirEntry, 0, len(names))
	for _, n := range names {
		full := n
		if name != "." {
			full = name + "/" + n
		}
		if _, isDir := o.dirs[full]; isDir {
			out = append(out, fs.FileInfoToDirEntry(objInfo{name: n, mode: fs.ModeDir | 0o555}))
		} else {
			out = append(out, fs.FileInfoToDirEntry(objInfo{name: n, size: o.files[full], mode: 0o444}))
		}
	}
	return out, nil
}

type readerAtCloser interface {
	io.ReaderAt
	io.ReadCloser
}

type objFile struct {
	r      readerAtCloser
	info   objInfo
	remove string
}

func (f *objFile) Stat() (fs.FileInfo, error)              { return f.info, nil }
func (f *objFile) Read(p []byte) (int, error)              { return f.r.Read(p) }
func (f *objFile) ReadAt(p []byte, off int64) (int, error) { return f.r.ReadAt(p, off) }
func (f *objFile) ReadDir(int) ([]fs.DirEntry, error)      { return nil, errors.New("not a directory") }
func (f *objFile) Close() error {
	err := f.r.Close()
	if f.remove != "" {
		_ = os.Remove(f.remove)
	}
	return err
}

type objDir struct {
	info    objInfo
	entries []fs.DirEntry
	off     int
}

func (d *objDir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *objDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: errors.New("is a directory")}
}
func (d *objDir) Close() error { return nil }
func (d *objDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.off += n
	return rest[:n], nil
}

type objInfo struct {
	name string
	size int64
	mode fs.FileMode
	mod  time.Time
}

func (i objInfo) Name() string       { return i.name }
func (i objInfo) Size() int64        { return i.size }
func (i objInfo) Mode() fs.FileMode  { return i.mode }
func (i objInfo) ModTime() time.Time { return i.mod }
func (i objInfo) IsDir() bool        { return i.mode.IsDir() }
func (i objInfo) Sys() any           { return nil }

// ctxReader fails reads once ctx is done, so a long copy stops on cancel.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// relPath returns the file path of key under prefix, or false when key is
// not below it.
func relPath(prefix, key string) (string, bool) {
	rel, ok := strings.CutPrefix(key, prefix)
	return rel, ok && rel != ""
}
